"""The HTTP API through the real app (TestClient runs the lifespan with the packaged MiniLM)."""

import base64
import os
import socket
from collections import Counter

import httpx
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from app.engine.labels import token_labels
from app.engine.model import packaged_model_path
from app.web.encoding import decode_attention
from tests.conftest import LIVE_LAB_PROXY
from tests.float32 import largest, pass_tolerance, product_tolerance, tolerance

BANK = {"text": "the river bank"}


@pytest.fixture(scope="module")
def bank(client):
    response = client.post("/api/analyze", json=BANK)
    assert response.status_code == 200
    return response.json()


def test_analyze_contract(bank):
    fields = {"run_id", "model", "text_pair", "tokens", "truncated", "mask", "pooling", "prompt", "pooled", "ablated"}
    assert set(bank) == {*fields, "patch", "attention"} and bank["attention"] is None and bank["patch"] is None
    assert bank["text_pair"] is None
    assert bank["ablated"] == []
    expected = {
        "name": "sentence-transformers/all-MiniLM-L6-v2",
        "dtype": "float32",  # auto, on a CPU
        "device": "cpu",
        "family": "BERT",
        "attention_only": None,
        "capabilities": dict.fromkeys(["qkv", "worked_example", "ffn", "measures", "ablation", "pipeline"], True),
        "score_notes": [],  # softmax(q·k/√d + mask), nothing else
        "prompts": {},
        "default_prompt": None,
        "sentence_modules": [  # the packaged modules.json: mean pooling, then L2 normalisation
            {
                "module": "Pooling",
                "pooling": "mean",
                "include_prompt": True,
                "shape": None,
                "bias": None,
                "activation": None,
            },
            {
                "module": "Normalize",
                "pooling": None,
                "include_prompt": None,
                "shape": None,
                "bias": None,
                "activation": None,
            },
        ],
        "logit_softcapping": None,
        "kind": "encoder",
        "decoder": False,
        "masks": ["bidirectional", "causal"],
        "default_mask": "bidirectional",
        "poolings": ["mean", "cls", "max"],
        "default_pooling": "mean",
        "normalization": "post-LN",
        "positions": "absolute",
        "ffn": "GELU",
        "ffn_gated": False,
        "ffn_activation": "GELU",
        "token_types": True,
        "position_offset": 0,
        "next_tokens": False,
        "cannot_write": (
            "sentence-transformers/all-MiniLM-L6-v2 reads and does not write: it is an encoder, with no next token "
            "to choose. To write, choose a decoder the lab serves, or serve one saved with its language-model head "
            "(GPT-2, Llama, Qwen3, Gemma 3): its folder or Hub id among ATTENTION_LAB_MODELS, or as "
            "ATTENTION_LAB_MODEL_PATH; a model grown in the lab writes too"
        ),
        "key_value_heads": 12,
        "windows": [None] * 6,  # MiniLM reads the whole context in every block
        "scales": [32**-0.5] * 6,  # 1/√d_head
        "pair_layout": "[CLS] A [SEP] B [SEP]",
        "layers": 6,
        "heads": 12,
        "hidden_size": 384,
        "head_dim": 32,
        "intermediate_size": 1536,
        "vocab_size": 30522,
        "max_tokens": 512,
        "max_input_tokens": 512,
        "max_seq_length": 256,  # the packaged sentence_bert_config.json
    }
    assert {name: value for name, value in bank["model"].items() if name != "activations"} == expected
    assert set(bank["model"]["activations"]) == {
        "word", "position", "token_type", "sum", "normalized",
        "attention_output", "resid_mid", "ffn_intermediate", "ffn_output", "output",
    }  # fmt: skip
    assert [(t["text"], t["id"], t["special"], t["added"]) for t in bank["tokens"]] == [
        ("[CLS]", 101, True, True),
        ("the", 1996, False, False),
        ("river", 2314, False, False),
        ("bank", 2924, False, False),
        ("[SEP]", 102, True, True),
    ]
    assert [t["index"] for t in bank["tokens"]] == list(range(5))
    assert (bank["tokens"][3]["start"], bank["tokens"][3]["end"]) == (10, 14)
    assert bank["truncated"] is False and bank["mask"] == "bidirectional"
    pooled = bank["pooled"]
    assert pooled["strategy"] == "mean" and len(pooled["vector"]) == 384
    assert pooled["norm"] == pytest.approx(np.linalg.norm(pooled["vector"]), rel=tolerance(384))
    np.testing.assert_allclose(np.array(pooled["vector"]) / pooled["norm"], pooled["normalized"], atol=1e-7)
    assert [(stage["module"], stage["title"]) for stage in pooled["stages"]] == [
        ("Pooling", "mean pooling"),
        ("Normalize", "L2 normalisation"),
    ]
    np.testing.assert_allclose(pooled["embedding"], pooled["normalized"], atol=1e-7)


REPEATED = "a dog saw a cat and a bird near a tree"


def test_a_label_tells_repeated_pieces_apart_by_their_position():
    assert token_labels(["[CLS]", "a", " a", "dog", " ", "a", "[SEP]"]) == [
        "[CLS]", "a #1", "a #2", "dog", "␣", "a #5", "[SEP]",
    ]  # fmt: skip
    # A byte-level vocabulary's control bytes, which draw nothing, spelled by their bytes; a tab is a blank.
    assert token_labels(["\x7f", "\x1b", "a\x00", "\t"]) == ["<0x7F>", "<0x1B>", "a<0x00>", "␣"]


def test_every_token_list_names_a_repeated_word_by_its_position(client):
    """The run's tokens, a patch's A and B and an attribution's tokens each carry the label of each token,
    against the tokenizer's own pieces counted here."""
    tokenizer = AutoTokenizer.from_pretrained(packaged_model_path())
    pieces = tokenizer.convert_ids_to_tokens(tokenizer(REPEATED)["input_ids"])
    counts = Counter(pieces)
    expected = [piece if counts[piece] == 1 else f"{piece} #{index}" for index, piece in enumerate(pieces)]
    assert [label for label in expected if label.startswith("a #")] == ["a #1", "a #4", "a #7", "a #10"]
    run = client.post("/api/analyze", json={"text": REPEATED})
    assert run.status_code == 200, run.text
    assert [token["label"] for token in run.json()["tokens"]] == expected
    other = "a cat"
    patch = client.post(
        "/api/patch", json={"text": REPEATED, "source": other, "site": "resid_pre", "layer": 0, "align": "end"}
    )
    assert patch.status_code == 200, patch.text
    assert [token["label"] for token in patch.json()["a_tokens"]] == expected
    assert [token["label"] for token in patch.json()["b_tokens"]] == ["[CLS]", "a", "cat", "[SEP]"]
    attribution = client.post("/api/attribution", json={"text": REPEATED, "other": other, "method": "gradient_x_input"})
    assert attribution.status_code == 200, attribution.text
    assert [token["label"] for token in attribution.json()["tokens"]] == expected


def test_head_numbers_are_consistent(client, bank):
    head = client.get(f"/api/runs/{bank['run_id']}/layers/2/heads/5").json()
    assert (head["layer"], head["head"]) == (2, 5)
    q, k, v, scores, weights, context = (
        np.array(head[name]) for name in ("q", "k", "v", "scores", "weights", "context")
    )
    assert q.shape == k.shape == v.shape == context.shape == (5, 32)
    np.testing.assert_allclose(q @ k.T / np.sqrt(32), scores, atol=product_tolerance(q / np.sqrt(32), k.T))
    softmax = np.exp(scores - scores.max(1, keepdims=True))
    # exp turns an error in a score into the same relative error in its weight: scores' size, 5 keys summed
    np.testing.assert_allclose(softmax / softmax.sum(1, keepdims=True), weights, atol=tolerance(5, largest(scores)))
    np.testing.assert_allclose(weights @ v, context, atol=product_tolerance(weights, v))


def test_query_row_is_the_heads_row(client, bank):
    run_id = bank["run_id"]
    head = client.get(f"/api/runs/{run_id}/layers/3/heads/8").json()
    row = client.get(f"/api/runs/{run_id}/layers/3/heads/8/queries/2").json()
    assert (row["layer"], row["head"], row["query"]) == (3, 8, 2)
    for name in ("q", "scores", "weights", "context"):
        assert row[name] == head[name][2]
    assert row["k"] == head["k"] and row["v"] == head["v"]
    response = client.get(f"/api/runs/{run_id}/layers/3/heads/8/queries/5")
    assert response.status_code == 404 and "tokens are 0 to 4" in response.json()["detail"]


def test_json_floats_are_the_exact_float32_values(client, lab):
    run_id = client.post("/api/analyze", json={"text": "exact numbers"}).json()["run_id"]
    served = client.app.state.lab.runs.get(run_id)
    q = np.array(client.get(f"/api/runs/{run_id}/layers/0/heads/0").json()["q"], dtype=np.float32)
    assert np.array_equal(q, served.head(0, 0)["q"].numpy())  # bit for bit: read back (JSON)


def test_layer_and_embeddings_shapes(client, bank):
    layer = client.get(f"/api/runs/{bank['run_id']}/layers/5").json()
    assert layer["layer"] == 5
    assert np.array(layer["ffn_intermediate"]).shape == (5, 1536)
    for name in ("attention_output", "resid_mid", "ffn_output", "output"):
        assert np.array(layer[name]).shape == (5, 384)
    mean = np.array(layer["output"]).mean(0)
    np.testing.assert_allclose(mean, bank["pooled"]["vector"], atol=tolerance(5, largest(layer["output"])))
    embeddings = client.get(f"/api/runs/{bank['run_id']}/embeddings").json()
    assert set(embeddings) == {"word", "position", "token_type", "sum", "normalized"}
    parts = {name: np.array(value) for name, value in embeddings.items()}
    summed = parts["word"] + parts["position"] + parts["token_type"]
    np.testing.assert_allclose(summed, parts["sum"], atol=tolerance(3, largest(summed)))


def test_token_trace_is_the_tokens_rows(client, bank):
    run_id = bank["run_id"]
    trace = client.get(f"/api/runs/{run_id}/tokens/3").json()
    embeddings = client.get(f"/api/runs/{run_id}/embeddings").json()
    assert trace["index"] == 3
    for name, row in trace["embeddings"].items():
        assert row == embeddings[name][3]
    assert [layer["layer"] for layer in trace["layers"]] == list(range(6))
    block_2 = client.get(f"/api/runs/{run_id}/layers/2").json()
    for name in ("attention_output", "resid_mid", "ffn_intermediate", "ffn_output", "output"):
        assert trace["layers"][2][name] == block_2[name][3]
    response = client.get(f"/api/runs/{run_id}/tokens/5")
    assert response.status_code == 404 and "tokens are 0 to 4" in response.json()["detail"]


@pytest.mark.parametrize("dtype, bound", [("uint8", 0.5 / 255 + 1e-7), ("float16", 2**-11)])
def test_binary_attention_round_trips_within_its_bound(client, bank, dtype, bound):
    response = client.get(f"/api/runs/{bank['run_id']}/attention", params={"dtype": dtype})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.headers["x-attention-shape"] == "6,12,5,5"
    weights = decode_attention(response.content, response.headers)
    assert len(response.content) == 6 * 12 * 25 * (1 if dtype == "uint8" else 2)
    for layer in (0, 5):
        exact = np.array(client.get(f"/api/runs/{bank['run_id']}/layers/{layer}/heads/3").json()["weights"])
        assert np.abs(weights[layer, 3] - exact).max() <= bound


def test_one_layer_of_exact_float32_attention(client, bank):
    response = client.get(f"/api/runs/{bank['run_id']}/attention", params={"dtype": "float32", "layer": 4})
    assert response.headers["x-attention-shape"] == "1,12,5,5"
    weights = decode_attention(response.content, response.headers)
    exact = np.array(client.get(f"/api/runs/{bank['run_id']}/layers/4/heads/11").json()["weights"], dtype=np.float32)
    assert np.array_equal(weights[0, 11], exact)  # bit for bit: read back (the body and JSON)
    assert client.get(f"/api/runs/{bank['run_id']}/attention", params={"layer": 6}).status_code == 404
    assert client.get(f"/api/runs/{bank['run_id']}/attention", params={"dtype": "int4"}).status_code == 422


def test_one_head_and_overview_thumbnails(client):
    body = client.post(
        "/api/analyze", json={"text": "a longer sentence so that thumbnails shrink the matrices " * 3}
    ).json()
    run_id, n = body["run_id"], len(body["tokens"])
    one = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32", "layer": 2, "head": 7})
    assert one.headers["x-attention-shape"] == f"1,1,{n},{n}"
    exact = np.array(client.get(f"/api/runs/{run_id}/layers/2/heads/7").json()["weights"], dtype=np.float32)
    assert np.array_equal(decode_attention(one.content, one.headers)[0, 0], exact)  # bit for bit: read back
    thumbs = client.get(f"/api/runs/{run_id}/attention", params={"size": 16, "dtype": "float32"})
    assert thumbs.headers["x-attention-shape"] == "6,12,16,16"
    small = decode_attention(thumbs.content, thumbs.headers)[2, 7]
    edges = [(i * n) // 16 for i in range(16)] + [n]  # adaptive pooling: block i covers floor(i*n/16)..ceil((i+1)*n/16)
    ends = [-(-(i + 1) * n // 16) for i in range(16)]
    expected = np.array([[exact[edges[i] : ends[i], edges[j] : ends[j]].max() for j in range(16)] for i in range(16)])
    np.testing.assert_array_equal(small, expected)  # bit for bit: no rounding (a max of what was read back)
    assert client.get(f"/api/runs/{run_id}/attention", params={"head": 1}).status_code == 404
    assert client.get(f"/api/runs/{run_id}/attention", params={"layer": 1, "head": 12}).status_code == 404
    assert client.get(f"/api/runs/{run_id}/attention", params={"size": 0}).status_code == 422
    assert (
        client.get(f"/api/runs/{run_id}/attention", params={"size": 10_000}).headers["x-attention-shape"]
        == f"6,12,{n},{n}"
    )


def test_causal_and_pooling_through_http(client):
    body = client.post("/api/analyze", json={"text": "one two three four", "mask": "causal", "pooling": "cls"}).json()
    assert body["mask"] == "causal" and body["pooled"]["strategy"] == "cls"
    head = client.get(f"/api/runs/{body['run_id']}/layers/1/heads/1").json()
    weights = np.array(head["weights"])
    assert np.all(np.triu(weights, 1) == 0)
    np.testing.assert_allclose(weights.sum(1), 1, atol=tolerance(len(weights)))
    scores = np.array(head["scores"])
    assert np.all(scores[np.triu_indices(len(weights), 1)] < -1e30)  # the mask is in the scores, finite


def test_health_and_model(client, data_dir):
    health = client.get("/api/health").json()
    assert health["status"] == "ok" and health["server"] == f"{socket.gethostname()}:{os.getpid()}"
    assert health["store"] == {"name": f"sqlite {data_dir / 'runs.sqlite3'}", "answering": True, "detail": None}
    assert client.get("/api/model").json()["layers"] == 6


def test_unicode_offsets_slice_the_text(client):
    text = "Ça va? 東京 🙂 مرحبا naïve"
    tokens = client.post("/api/analyze", json={"text": text}).json()["tokens"]
    pieces = [text[t["start"] : t["end"]] for t in tokens if t["end"] > t["start"]]
    assert pieces[:5] == ["Ça", "va", "?", "東", "京"]
    unknown = next(t for t in tokens if t["text"] == "[UNK]")  # the emoji is not in MiniLM's vocabulary
    assert text[unknown["start"] : unknown["end"]] == "🙂"
    assert pieces[-1] == "naïve"  # offsets point at the original accented text


BAD_REQUESTS = [
    ({"text": ""}, 422, "empty"),
    ({"text": "   \n\t "}, 422, "empty"),
    ({"text": 42}, 422, "valid string"),
    ({"text": ["a"]}, 422, "valid string"),
    ({"text": None}, 422, "valid string"),
    ({}, 422, "required"),
    ({"text": "ok", "mask": "sideways"}, 422, "bidirectional"),
    ({"text": "ok", "pooling": "median"}, 422, "mean"),
    ({"text": "ok", "extra": 1}, 422, "Extra"),
    ({"text": "a" * 40_001}, 413, "40,000"),
    ({"text": "\x00\x01\u200b"}, 422, "no characters"),
]


@pytest.mark.parametrize("body, status, message", BAD_REQUESTS)
def test_bad_input_gets_a_clear_error_and_the_server_keeps_serving(client, body, status, message):
    response = client.post("/api/analyze", json=body)
    assert response.status_code == status
    assert message in response.json()["detail"]
    assert client.post("/api/analyze", json=BANK).status_code == 200


@pytest.mark.parametrize(
    "content, content_type, message",
    [
        (b'{"text": ', "application/json", "not valid JSON"),
        (b'{"text": "\\ud800"}', "application/json", "surrogate"),
        (b"text=hello", "application/x-www-form-urlencoded", ""),
        (b"just words", "text/plain", ""),
    ],
)
def test_malformed_bodies_are_422(client, content, content_type, message):
    response = client.post("/api/analyze", content=content, headers={"content-type": content_type})
    assert response.status_code == 422
    assert message in response.json()["detail"]


def test_long_text_is_truncated(client):
    body = client.post("/api/analyze", json={"text": "bank " * 700}).json()
    assert body["truncated"] is True and len(body["tokens"]) == 512


@pytest.mark.parametrize(
    "path, message",
    [
        ("layers/6", "layers are 0 to 5"),
        ("layers/-1", "layers are 0 to 5"),
        ("layers/99999999999999999999", "layers are 0 to 5"),
        ("layers/0/heads/12", "heads are 0 to 11"),
        ("layers/0/heads/-3", "heads are 0 to 11"),
        ("layers/9/heads/0", "layers are 0 to 5"),
    ],
)
def test_out_of_range_layer_or_head_is_404_naming_the_range(client, bank, path, message):
    response = client.get(f"/api/runs/{bank['run_id']}/{path}")
    assert response.status_code == 404
    assert message in response.json()["detail"]


@pytest.mark.parametrize("run_id", ["0" * 32, "nope", "%2E%2E", "<script>"])
def test_unknown_run_is_404_saying_analyze_again(client, run_id):
    response = client.get(f"/api/runs/{run_id}/embeddings")
    assert response.status_code == 404
    assert "analyze the text again" in response.json()["detail"]


def test_path_tricks_in_run_id_are_404(client):
    assert client.get("/api/runs/..%2F..%2Fetc/embeddings").status_code == 404


def test_an_evicted_run_is_recomputed_with_the_same_numbers(client):
    lab = client.app.state.lab
    first = client.post("/api/analyze", json={"text": "soon forgotten"}).json()["run_id"]
    before = client.get(f"/api/runs/{first}/layers/0/heads/0").json()
    for i in range(lab.runs.max_runs):
        client.post("/api/analyze", json={"text": f"filler {i}"})
    assert lab.runs.get(first) is None
    after = client.get(f"/api/runs/{first}/layers/0/heads/0")
    assert after.status_code == 200
    config = lab.loaded.model.config  # computed again alone, or in a padded pass
    for name, value in before.items():
        if isinstance(value, list):
            np.testing.assert_allclose(after.json()[name], value, atol=pass_tolerance(config, largest(value)))
        else:
            assert after.json()[name] == value, name


@pytest.mark.parametrize("encoding", ["zstd", "br", "gzip"])
def test_attention_goes_out_compressed_to_a_client_elsewhere_that_accepts_it(live_lab, encoding):
    """A phone, as the proxy names it, gets the matrices compressed; the lab's own machine gets them as
    they are (app.web.compression), whatever it accepts."""
    long = " ".join(["the old river ran past quiet green fields"] * 12)
    accepts = {"Accept-Encoding": encoding}
    phone = httpx.Client(
        base_url=live_lab.url,
        timeout=60,
        headers={"X-Forwarded-For": "192.0.2.7"},
        transport=httpx.HTTPTransport(local_address=LIVE_LAB_PROXY),
    )
    with phone, httpx.Client(base_url=live_lab.url, timeout=60) as here:
        run = phone.post("/api/analyze", json={"text": long}).json()["run_id"]
        plain = phone.get(f"/api/runs/{run}/attention", headers={"Accept-Encoding": "identity"})
        packed = phone.get(f"/api/runs/{run}/attention", headers=accepts)
        local = here.get(f"/api/runs/{run}/attention", headers=accepts)
    assert "content-encoding" not in plain.headers and packed.headers["content-encoding"] == encoding
    assert packed.content == plain.content  # decoded by httpx: the same bytes
    assert packed.num_bytes_downloaded < plain.num_bytes_downloaded / 3
    assert "content-encoding" not in local.headers and local.content == plain.content


def test_the_server_averages_heads_and_blocks_in_one_matrix(client, bank):
    run = bank["run_id"]
    every = decode_attention(*attention_of(client, run))  # [layer, head, query, key]
    mean = lambda values, axis: values.astype(np.float64).mean(axis)  # noqa: E731
    cases = {
        "heads of block 2": ({"layer": 2, "heads": "0,3,7"}, mean(every[2, [0, 3, 7]], 0)),
        "every head, every block": ({"blocks": "mean"}, mean(mean(every, 1), 0)),
        "head 5, every block": ({"blocks": "mean", "head": 5}, mean(every[:, 5], 0)),
        "heads 1 and 2 of each block": ({"heads": "2,1"}, mean(every[:, [1, 2]], 1)),
    }
    for name, (params, expected) in cases.items():
        body, headers = attention_of(client, run, **params)
        got = decode_attention(body, headers)
        assert got.shape[1] == 1, name
        atol = tolerance(every.shape[0] * every.shape[1])  # means of at most every head of every block
        np.testing.assert_allclose(got.reshape(expected.shape), expected, atol=atol, err_msg=name)
    assert attention_of(client, run, layer=0, heads="0,12", status=404)
    for bad in ({"head": 1, "heads": "0,1"}, {"blocks": "mean", "layer": 1}, {"heads": "1;2"}, {"blocks": "max"}):
        assert attention_of(client, run, status=422, **bad)


EMBEDDED_VIEWS = [
    {},
    {"dtype": "float32", "layer": 3, "head": 7},
    {"dtype": "float32", "blocks": "mean"},
    {"measure": "norm", "layer": 1, "dtype": "float16"},
    {"size": 4},
]


def test_analyze_answers_with_the_attention_it_is_asked_for(client, minilm):
    """The first view in the analysis's own answer: base64 of what the attention endpoint sends."""
    body = {"text": "the river bank was steep", "text_pair": "and wet", "ablate": [[2, 5]]}
    first = client.post("/api/analyze", json={**body, "attention": {"dtype": "float32"}}).json()
    assert first["attention"]["shape"] == [6, 12, 10, 10] and first["attention"]["scale"] is None
    got = np.frombuffer(base64.b64decode(first["attention"]["data"]), "<f4").reshape(first["attention"]["shape"])
    encoded = minilm.tokenizer(body["text"], body["text_pair"], return_tensors="pt")
    with torch.inference_mode():
        attentions = minilm.model(**encoded, output_attentions=True).attentions  # no head switched off before 2
    np.testing.assert_allclose(got[:3], torch.cat(attentions[:3]).numpy(), atol=pass_tolerance(minilm.model.config))
    assert client.post("/api/analyze", json=body).json()["attention"] is None
    for params in EMBEDDED_VIEWS:
        embedded = client.post("/api/analyze", json={**body, "attention": params}).json()["attention"]
        answered = client.get(f"/api/runs/{first['run_id']}/attention", params=params)
        assert base64.b64decode(embedded["data"]) == answered.content, params
        assert embedded["shape"] == [int(n) for n in answered.headers["x-attention-shape"].split(",")], params
        assert embedded["measure"] == answered.headers["x-attention-measure"], params
        scale = answered.headers.get("x-attention-scale")
        assert embedded["scale"] == (None if scale is None else float(scale)), params


def test_an_attention_too_large_to_embed_leaves_the_analysis_whole(client):
    text = "a long enough text for every head of every block to pass one mebibyte " * 12
    too_large = client.post("/api/analyze", json={"text": text, "attention": {"dtype": "float32"}})
    assert too_large.status_code == 200 and too_large.json()["attention"] is None and too_large.json()["tokens"]
    first_heatmap = {"dtype": "float32", "layer": 0, "head": 0}  # what the page asks for: fits up to 512 tokens
    one_head = client.post("/api/analyze", json={"text": text, "attention": first_heatmap}).json()
    n = len(one_head["tokens"])
    assert n > 60 and one_head["attention"]["shape"] == [1, 1, n, n]
    for bad in ({"layer": 6}, {"blocks": "max"}, {"head": 1, "heads": "0,1"}, {"dtype": "int4"}, {"colour": "red"}):
        assert client.post("/api/analyze", json={"text": "ok", "attention": bad}).status_code in (404, 422), bad


def attention_of(client, run, status=200, **params):
    response = client.get(f"/api/runs/{run}/attention", params={"dtype": "float32", **params})
    assert response.status_code == status, response.text
    return (response.content, response.headers) if status == 200 else True
