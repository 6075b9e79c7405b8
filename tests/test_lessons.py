"""The lesson endpoints against independent computations from transformers' own outputs and NumPy."""

import numpy as np
import pytest
import torch

from app.engine.model import packaged_model_path
from tests.float32 import largest, pass_tolerance, product_tolerance, tolerance


def hidden_states(minilm, text, causal=False):
    """transformers' own forward pass: [stage][pos, 384] with stage 0 the embeddings' output."""
    ids = minilm.tokenizer(text, return_tensors="pt")["input_ids"]
    minilm.model.config.is_decoder = causal  # transformers' own causal mask, not the lab's
    try:
        with torch.no_grad():
            out = minilm.model(input_ids=ids, output_hidden_states=True, output_attentions=True, use_cache=False)
    finally:
        minilm.model.config.is_decoder = False
    return [h[0].double().numpy() for h in out.hidden_states], [a[0].double().numpy() for a in out.attentions]


def cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def analyze(client, text, **options):
    response = client.post("/api/analyze", json={"text": text, **options})
    assert response.status_code == 200, response.text
    return response.json()


def test_same_id_different_meaning(client, minilm):
    a, b = analyze(client, "the river bank"), analyze(client, "the bank approved the loan")
    i = next(t["index"] for t in a["tokens"] if t["text"] == "bank")
    j = next(t["index"] for t in b["tokens"] if t["text"] == "bank")
    got = client.get("/api/compare", params={"a": a["run_id"], "b": b["run_id"], "token_a": i, "token_b": j}).json()
    assert got["same_id"] is True
    assert got["stages"] == ["word embedding", "embeddings (LayerNorm)"] + [f"block {n}" for n in range(6)]
    assert got["cosines"][0] == pytest.approx(1.0, abs=1e-12)  # the same row of the table
    states_a, _ = hidden_states(minilm, "the river bank")
    states_b, _ = hidden_states(minilm, "the bank approved the loan")
    expected = [cos(states_a[stage][i], states_b[stage][j]) for stage in range(7)]
    np.testing.assert_allclose(got["cosines"][1:], expected, atol=pass_tolerance(minilm.model.config))
    assert got["cosines"][-1] < 0.95  # the contexts pulled the two "bank"s apart
    assert got["attention_change"] is None  # 5 and 7 tokens: no cell-by-cell difference


def test_bidirectional_against_causal(client, minilm):
    text = "the animal didn't cross the street because it was tired"
    both = analyze(client, text), analyze(client, text, mask="causal")
    got = client.get(
        "/api/compare", params={"a": both[0]["run_id"], "b": both[1]["run_id"], "token_a": 3, "token_b": 3}
    ).json()
    states_bi, _ = hidden_states(minilm, text)
    states_causal, _ = hidden_states(minilm, text, causal=True)
    atol = pass_tolerance(minilm.model.config)
    expected = [cos(x[3], y[3]) for x, y in zip(states_bi, states_causal, strict=True)]
    np.testing.assert_allclose(got["cosines"][1:], expected, atol=atol)
    # before any attention the masks change nothing: a cosine of one vector with itself, sums of 384 terms
    assert got["cosines"][1] == pytest.approx(1.0, abs=tolerance(384))
    pooled = cos(states_bi[-1].mean(0), states_causal[-1].mean(0))
    assert got["pooled_cosine"] == pytest.approx(pooled, abs=atol)
    assert len(got["attention_change"]) == 6 and min(got["attention_change"]) > 0


def test_ablating_a_head_changes_only_what_follows_it(client, lab, minilm):
    text = "switching off one head changes only what comes after it"
    original = lab.run_sync(lab.spec(text))
    ablated = lab.run_sync(lab.spec(text, ablate=[(2, 5)]))
    assert ablated.spec.ablated == ((2, 5),)
    for name, value in original.activations.items():
        layer = int(name.split(".")[1]) if name.startswith("blocks.") else -1
        same = torch.equal(value, ablated.activations[name])  # bit for bit: same shapes (the same text alone)
        if layer < 2 or name in ("blocks.2.attn.q", "blocks.2.attn.k", "blocks.2.attn.v", "blocks.2.attn.context"):
            assert same, name
        else:
            assert not same, name
    assert torch.equal(original.weights(2), ablated.weights(2))  # bit for bit: same shapes (the same q and k)
    assert not torch.equal(original.weights(3), ablated.weights(3))  # bit for bit: same shapes
    # Block 2's attention output, recomputed in NumPy from the original contexts with head 5 zeroed.
    context = original.activations["blocks.2.attn.context"].double().numpy().copy()  # [head, pos, 32]
    context[5] = 0
    concat = context.transpose(1, 0, 2).reshape(len(original.tokens), 384)
    dense = minilm.model.encoder.layer[2].attention.output.dense
    expected = concat @ dense.weight.detach().double().numpy().T + dense.bias.detach().double().numpy()
    atol = product_tolerance(concat, dense.weight.detach().double().numpy().T)
    np.testing.assert_allclose(ablated.activations["blocks.2.attention_output"].numpy(), expected, atol=atol)
    # The switched-off head reports what it computes, and that W_O received zeros from it.
    head = ablated.head(2, 5)
    assert torch.equal(head["context"], original.activations["blocks.2.attn.context"][5])  # bit for bit: same shapes
    assert not head["context_to_output"].any() and ablated.ablated(2, 5) and not ablated.ablated(2, 4)


def test_ablation_through_http(client):
    text = "ablation over http"
    original = analyze(client, text)
    assert analyze(client, text, ablate=[])["run_id"] == original["run_id"]  # nothing off: the same run
    ablated = analyze(client, text, ablate=[[4, 0], [4, 1], [4, 0]])
    assert ablated["ablated"] == [[4, 0], [4, 1]]
    got = client.get(
        "/api/compare", params={"a": original["run_id"], "b": ablated["run_id"], "token_a": 1, "token_b": 1}
    ).json()
    assert got["attention_change"][:5] == [0.0] * 5 and got["attention_change"][5] > 0
    np.testing.assert_allclose(got["cosines"][:6], 1.0, atol=1e-12)  # blocks 0-3 do not see the ablation
    assert got["cosines"][-1] < 0.9999
    assert 0 < got["pooled_cosine"] < 1
    for bad in ([[6, 0]], [[0, 12]], [[-1, 0]]):
        response = client.post("/api/analyze", json={"text": text, "ablate": bad})
        assert response.status_code == 422 and "no head" in response.json()["detail"]


def test_head_stats_and_labels(client, minilm):
    text = "the quick brown fox jumps over the lazy dog ."
    run = analyze(client, text)
    got = client.get(f"/api/runs/{run['run_id']}/head-stats").json()
    assert got["threshold"] == 0.5 and len(got["heads"]) == 72
    _, attentions = hidden_states(minilm, text)
    for stat in got["heads"]:
        w = attentions[stat["layer"]][stat["head"]]
        n = len(w)
        expected = {
            "entropy": float(np.mean(-(w * np.log(np.maximum(w, 1e-30))).sum(1))),
            "cls": float(w[:, 0].mean()),
            "sep": float(w[:, n - 1].mean()),
            "self": float(np.diag(w).mean()),
            "previous": float(np.diag(w, -1).mean()),
            "next": float(np.diag(w, 1).mean()),
            "period": float(w[:, n - 2].mean()),  # the text ends with " ."
        }
        for name, value in expected.items():
            # an entropy moves by its weights' errors times at most 1 + log n (tests/test_atlas.py)
            atol = pass_tolerance(minilm.model.config, 1 + np.log(n) if name == "entropy" else 1)
            assert stat[name] == pytest.approx(value, abs=atol), (stat, name)
        shares = {name: expected[name] for name in ("cls", "sep", "self", "previous", "next")}
        best = max(shares, key=shares.get)
        assert (stat["label"] is not None) == (shares[best] >= 0.5)
    labels = {stat["label"] for stat in got["heads"]}
    assert "previous-token head" in labels  # MiniLM has heads that look one token back


def test_attention_rollout(client, minilm):
    text = "rollout follows attention through every block"
    run = analyze(client, text)
    _, attentions = hidden_states(minilm, text)
    n = len(run["tokens"])
    flow = np.eye(n)
    for weights in attentions:
        mixed = 0.5 * weights.mean(0) + 0.5 * np.eye(n)
        flow = (mixed / mixed.sum(1, keepdims=True)) @ flow
    got = client.get(f"/api/runs/{run['run_id']}/tokens/3/rollout").json()
    np.testing.assert_allclose(got["rollout"], flow[3], atol=pass_tolerance(minilm.model.config))
    assert sum(got["rollout"]) == pytest.approx(1.0, abs=tolerance(n * len(attentions)))


def test_nearest_vocabulary_rows(client, minilm):
    text = "the river bank"
    run = analyze(client, text)
    got = client.get(f"/api/runs/{run['run_id']}/tokens/3/nearest", params={"k": 5}).json()
    states, _ = hidden_states(minilm, text)
    table = minilm.model.embeddings.word_embeddings.weight.detach().double().numpy()
    table = table / np.linalg.norm(table, axis=1, keepdims=True)
    assert [stage["stage"] for stage in got["stages"]] == ["embeddings (LayerNorm)"] + [f"block {n}" for n in range(6)]
    for stage, state in zip(got["stages"], states, strict=True):
        cosines = table @ (state[3] / np.linalg.norm(state[3]))
        top = np.argsort(-cosines)[:5]
        assert [row["id"] for row in stage["rows"]] == top.tolist()
        atol = pass_tolerance(minilm.model.config)
        np.testing.assert_allclose([row["cosine"] for row in stage["rows"]], cosines[top], atol=atol)
    assert got["stages"][0]["rows"][0]["token"] == "bank"  # before any block, "bank" is nearest to itself
    assert client.get(f"/api/runs/{run['run_id']}/tokens/3/nearest", params={"k": 0}).status_code == 422


def test_pooling_strategies_and_an_instruction_prefix(client, minilm):
    from sentence_transformers import SentenceTransformer

    text = "how do I open a bank account"
    got = client.post("/api/pooling", json={"text": text}).json()
    states, _ = hidden_states(minilm, text)
    last = states[-1]
    expected = {"mean": last.mean(0), "cls": last[0], "max": last.max(0)}
    atol = pass_tolerance(minilm.model.config)
    for name, vector in expected.items():
        np.testing.assert_allclose(got["strategies"][name]["vector"], vector, atol=atol * largest(last))
        assert got["strategies"][name]["norm"] == pytest.approx(np.linalg.norm(vector), rel=atol)
    assert got["cosines"]["mean/cls"] == pytest.approx(cos(expected["mean"], expected["cls"]), abs=atol)
    assert got["cosines"]["cls/max"] == pytest.approx(cos(expected["cls"], expected["max"]), abs=atol)
    encoder = SentenceTransformer(str(packaged_model_path()), device="cpu")
    plain, prefixed = encoder.encode([text, "query: " + text], normalize_embeddings=True)
    assert got["prefix"]["text"] == "query: " + text
    assert got["prefix"]["cosine"] == pytest.approx(float(plain @ prefixed), abs=atol)
    assert got["prefix"]["cosine"] < 0.999
