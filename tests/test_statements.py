"""What the lab says about its numbers is exactly true: which tokens the sinks hide, what an ablated head
reports, how long the pooled input is, the encodings' error bounds, and cosines within [-1, 1]. Each
against an independent computation: transformers' own outputs, sentence-transformers, float64 NumPy."""

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from app.engine.model import packaged_model_path
from app.web.encoding import decode_attention, encode_attention
from tests.float32 import largest, pass_tolerance, product_tolerance

pytestmark = pytest.mark.slow


def reference(minilm, ids, **outputs):
    """transformers' own forward pass of the ids, with the outputs asked for."""
    with torch.inference_mode():
        return minilm.model(input_ids=ids, **outputs)


def analyze(client, text, **options):
    response = client.post("/api/analyze", json={"text": text, **options})
    assert response.status_code == 200, response.text
    return response.json()


def sentence_vector(client, body):
    """The run's sentence vector: the analyze answer's, or, past max_seq_length, the one asked for after."""
    response = client.get(f"/api/runs/{body['run_id']}/pooled")
    assert response.status_code == 200, response.text
    if body["pooled"] is not None:
        assert response.json() == body["pooled"]
    return response.json()


def test_only_the_tokens_the_tokenizer_added_are_sinks(client, minilm):
    body = analyze(client, "I love 🙂 so much [SEP] [MASK]")
    tokens = body["tokens"]
    texts = [token["text"] for token in tokens]
    assert texts == ["[CLS]", "i", "love", "[UNK]", "so", "much", "[SEP]", "[MASK]", "[SEP]"]
    assert [token["special"] for token in tokens] == [True, False, False, True, False, False, True, True, True]
    assert [token["added"] for token in tokens] == [True] + [False] * 7 + [True]
    # The overview's shares count exactly the added tokens: block 3, head 0, recomputed from transformers.
    ids = torch.tensor([[token["id"] for token in tokens]])
    weights = reference(minilm, ids, output_attentions=True).attentions[3][0, 0].double()  # [query, key]
    stats = client.get(f"/api/runs/{body['run_id']}/head-stats").json()
    assert stats["added"] == {"cls": "[CLS]", "sep": "[SEP]"}
    stat = next(s for s in stats["heads"] if (s["layer"], s["head"]) == (3, 0))
    atol = pass_tolerance(minilm.model.config)
    assert stat["cls"] == pytest.approx(float(weights[:, 0].mean()), abs=atol)
    assert stat["sep"] == pytest.approx(float(weights[:, -1].mean()), abs=atol)  # the typed [SEP] is text


def test_the_issue_example_sink_holds_cls_and_sep_only(client, minilm):
    """ "I love 🙂 so much", block 3, head 0, query "love": the sink is [CLS]+[SEP] (0.1903 in the audit),
    not [CLS]+[SEP]+[UNK] (0.4238)."""
    body = analyze(client, "I love 🙂 so much")
    added = [token["index"] for token in body["tokens"] if token["added"]]
    assert added == [0, len(body["tokens"]) - 1]
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    row = reference(minilm, ids, output_attentions=True).attentions[3][0, 0, 2]
    assert float(row[added].sum()) == pytest.approx(0.1903, abs=1e-4)


def test_an_ablated_head_reports_its_context_and_what_w_o_received(client, minilm):
    text = "the animal did not cross the street because it was too tired"
    body = analyze(client, text, ablate=[[2, 5], [4, 0]])
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    plain = reference(minilm, ids, output_attentions=True, output_hidden_states=True)
    # Blocks before 2 are untouched, so head (2, 5)'s weights·V is the plain model's, from its own weights.
    layer = minilm.model.encoder.layer[2].attention.self
    x = plain.hidden_states[2][0].double()
    value = layer.value.weight.detach().double(), layer.value.bias.detach().double()
    v = (x @ value[0].T + value[1])[:, 5 * 32 : 6 * 32]
    expected = plain.attentions[2][0, 5].double() @ v
    head = client.get(f"/api/runs/{body['run_id']}/layers/2/heads/5").json()
    assert head["ablated"] is True
    atol = pass_tolerance(minilm.model.config, largest(expected), blocks=3)
    np.testing.assert_allclose(np.array(head["context"]), expected.numpy(), atol=atol)
    assert np.abs(np.array(head["context"])).max() > 0.1
    assert not np.array(head["context_to_output"]).any()
    later = client.get(f"/api/runs/{body['run_id']}/layers/4/heads/0/queries/3").json()
    assert later["ablated"] is True and not any(later["context_to_output"])
    weights, v = np.array(later["weights"]), np.array(later["v"])
    np.testing.assert_allclose(weights @ v, np.array(later["context"]), atol=product_tolerance(weights, v))
    other = client.get(f"/api/runs/{body['run_id']}/layers/4/heads/1").json()
    assert other["ablated"] is False and other["context_to_output"] == other["context"]


@pytest.fixture(scope="module")
def sentence_transformer():
    return SentenceTransformer(str(packaged_model_path()), device="cpu")  # max_seq_length 256, as packaged


@pytest.mark.parametrize("words", [120, 300, 700])
def test_the_sentence_vector_is_the_models_own_past_256_tokens(client, minilm, sentence_transformer, words):
    text = " ".join(f"word{index % 37} river{index % 11}" for index in range(words // 2))
    body = analyze(client, text)
    n = len(body["tokens"])
    assert (body["pooled"] is None) == (n > 256) and body["pooling"] == "mean"  # past 256: a pass when asked for
    pooled = sentence_vector(client, body)
    expected = sentence_transformer.encode([text], normalize_embeddings=True)[0]
    got = np.array(pooled["normalized"])
    atol = pass_tolerance(minilm.model.config)
    assert float(got @ expected) > 0.99999 and np.abs(got - expected).max() <= atol
    assert pooled["tokens"] == min(n, 256) and body["model"]["max_seq_length"] == 256
    if n > 256:
        pooling = client.post("/api/pooling", json={"text": text, "prefix": ""}).json()
        assert pooling["whole_input"]["tokens"] == n and pooling["whole_input"]["cosine"] < 0.9999
        assert pooling["strategies"]["mean"]["normalized"] == pytest.approx(pooled["normalized"], abs=atol)


def test_uint8_stays_within_half_a_step_on_adversarial_weights():
    steps = np.arange(256, dtype=np.float64)
    near_half_steps = np.concatenate(
        [(steps[:-1] + 0.5) / 255 - d for d in (1e-9, 1e-12, 2**-30)]
        + [(steps[:-1] + 0.5) / 255 + d for d in (1e-9, 2**-30)]
        + [[0.8215686082839966, 0.0, 1.0, 1e-40]]
    )
    weights = torch.tensor(near_half_steps, dtype=torch.float32).clamp(0, 1)
    pieces, headers = encode_attention([weights.reshape(1, 1, -1)], "uint8")
    decoded = np.frombuffer(b"".join(pieces), np.uint8) / float(headers["X-Attention-Scale"])  # byte / 255, exactly
    assert np.abs(decoded - weights.double().numpy()).max() <= 1 / 510


def test_float16_is_within_its_absolute_bound_down_to_subnormals():
    values = np.concatenate(
        [np.geomspace(1e-12, 1, 4000), [6.1e-5, 6.0e-5, 3e-8, 2.9e-8, 1e-45, 0.5 + 2**-12, 1 - 2**-13]]
    )
    weights = torch.tensor(values, dtype=torch.float32)
    pieces, headers = encode_attention([weights.reshape(1, 1, -1)], "float16")
    decoded = decode_attention(b"".join(pieces), headers).reshape(-1).astype(np.float64)
    exact = weights.double().numpy()
    assert np.abs(decoded - exact).max() <= 2**-12
    assert np.all(decoded[exact < 2.98e-8] == 0)  # under half the smallest subnormal: flushed to 0


def test_compare_cosines_stay_within_minus_one_and_one(client):
    run = analyze(client, "the same sentence twice")["run_id"]
    compared = client.get("/api/compare", params={"a": run, "b": run, "token_a": 2, "token_b": 2}).json()
    assert all(-1 <= value <= 1 for value in compared["cosines"]) and compared["pooled_cosine"] <= 1


def test_past_256_tokens_the_sentence_vector_keeps_the_switched_off_heads(client, minilm):
    """The pooling's shorter pass of a long input switches off the run's heads too: its vector is the
    vector of the first 254 words read alone (every word here is one token), under the same ablation."""
    words = ("the river ran past quiet green fields while children counted birds " * 30).split()[:300]
    ablate = [[0, 1], [3, 5], [5, 11]]
    whole = analyze(client, " ".join(words), ablate=ablate)
    first = analyze(client, " ".join(words[:254]), ablate=ablate)
    assert len(whole["tokens"]) == 302 and len(first["tokens"]) == 256
    vector = lambda body: np.array(sentence_vector(client, body)["vector"])  # noqa: E731
    atol = pass_tolerance(minilm.model.config, largest(vector(first)))
    assert np.abs(vector(whole) - vector(first)).max() <= atol
    intact = analyze(client, " ".join(words))
    assert np.abs(vector(intact) - vector(whole)).max() > 1e-3


def test_comparing_two_long_inputs_compares_the_models_own_sentence_vectors(client, minilm, sentence_transformer):
    """Past 256 tokens neither analyze answer holds the vector yet; the comparison asks for both passes."""
    texts = [" ".join(f"{word}{index % 29}" for index in range(300)) for word in ("river", "loan")]
    bodies = [analyze(client, text) for text in texts]
    assert all(len(body["tokens"]) > 256 and body["pooled"] is None for body in bodies)
    params = {"a": bodies[0]["run_id"], "b": bodies[1]["run_id"], "token_a": 1, "token_b": 1}
    compared = client.get("/api/compare", params=params).json()
    expected = sentence_transformer.encode(texts, normalize_embeddings=True)
    assert compared["pooled_cosine"] == pytest.approx(
        float(expected[0] @ expected[1]), abs=pass_tolerance(minilm.model.config)
    )
