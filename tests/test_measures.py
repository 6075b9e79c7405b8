"""Norm-based attention (Kobayashi et al. 2020) and ALTI (Ferrando et al. 2022), served by the attention
endpoint, against a float64 NumPy re-implementation of the papers' formulas from the raw weights and
the hidden states transformers itself computes."""

import numpy as np
import pytest
import torch

from app.web.encoding import decode_attention
from tests.float32 import largest, pass_tolerance

pytestmark = pytest.mark.slow

TEXT = "The animal didn't cross the street because it was too tired."


def served(client, run_id, measure, dtype="float32"):
    response = client.get(f"/api/runs/{run_id}/attention", params={"measure": measure, "dtype": dtype})
    assert response.status_code == 200, response.text
    assert response.headers["X-Attention-Measure"] == measure
    return decode_attention(response.content, response.headers).astype(np.float64)


def reference(minilm, ids, mask=None):
    """transformers' own pass: the input of every block and every block's attention weights, float64."""
    with torch.inference_mode():
        out = minilm.model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    return [h[0].double().numpy() for h in out.hidden_states], [a[0].double().numpy() for a in out.attentions]


def weights_of(minilm, layer):
    block = minilm.model.encoder.layer[layer].attention
    as64 = lambda t: t.detach().double().numpy()  # noqa: E731
    return {
        "w_v": as64(block.self.value.weight),
        "b_v": as64(block.self.value.bias),
        "w_o": as64(block.output.dense.weight),
        "b_o": as64(block.output.dense.bias),
        "gamma": as64(block.output.LayerNorm.weight),
        "beta": as64(block.output.LayerNorm.bias),
        "eps": block.output.LayerNorm.eps,
    }


def transformed(x, w, heads=12, off=()):
    """f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, per head: [head, key, d_model]."""
    v = x @ w["w_v"].T + w["b_v"]
    d = v.shape[1] // heads
    f = np.stack([v[:, h * d : (h + 1) * d] @ w["w_o"][:, h * d : (h + 1) * d].T for h in range(heads)])
    for head in off:
        f[head] = 0
    return f


def alti_layer(x, alpha, w, off=()):
    """ALTI for one block, straight from the paper: T_i(x_j), LayerNorm-decomposed, Manhattan closeness."""
    f = transformed(x, w, off=off)
    n = len(x)
    attn_out = np.einsum("hij,hjd->id", alpha, f) + w["b_o"]
    resid = x + attn_out
    sigma = np.sqrt(resid.var(-1) + w["eps"])
    y = w["gamma"] * (resid - resid.mean(-1, keepdims=True)) / sigma[:, None] + w["beta"]
    c = np.zeros((n, n))
    for i in range(n):
        t = np.einsum("hj,hjd->jd", alpha[:, i], f)
        t[i] += x[i]
        t_tilde = w["gamma"] * (t - t.mean(-1, keepdims=True)) / sigma[i]
        c[i] = np.maximum(0, np.abs(y[i]).sum() - np.abs(y[i] - t_tilde).sum(-1))
        c[i] /= c[i].sum()
    return c


def test_norms_and_alti_equal_the_papers_formulas(client, minilm):
    body = client.post("/api/analyze", json={"text": TEXT}).json()
    ids = torch.tensor([[token["id"] for token in body["tokens"]]])
    inputs, alphas = reference(minilm, ids)
    norms = served(client, body["run_id"], "norm")
    alti = served(client, body["run_id"], "alti")
    rollout = served(client, body["run_id"], "alti_rollout")
    assert norms.shape == (6, 12, len(ids[0]), len(ids[0])) and alti.shape == (6, 1, len(ids[0]), len(ids[0]))
    flow = np.eye(len(ids[0]))
    for layer in range(6):
        w = weights_of(minilm, layer)
        f = transformed(inputs[layer], w)
        expected = alphas[layer] * np.linalg.norm(f, axis=-1)[:, None, :]
        config = minilm.model.config
        np.testing.assert_allclose(norms[layer], expected, atol=pass_tolerance(config, largest(expected)))
        contributions = alti_layer(inputs[layer], alphas[layer], w)
        np.testing.assert_allclose(alti[layer, 0], contributions, atol=pass_tolerance(config))
        flow = contributions @ flow
        np.testing.assert_allclose(rollout[layer, 0], flow, atol=pass_tolerance(config))


@pytest.mark.parametrize(
    "options",
    [{"text_pair": "It was exhausted."}, {"mask": "causal"}, {"ablate": [[2, 5], [4, 0]]}],
    ids=["pair", "causal", "ablated"],
)
def test_measures_follow_pairs_causal_masks_and_switched_off_heads(client, minilm, options):
    """From the run's own served numbers (checked against transformers elsewhere) and the raw weights."""
    body = client.post("/api/analyze", json={"text": TEXT, **options}).json()
    run, n = body["run_id"], len(body["tokens"])
    off = {layer: [h for ablated_layer, h in options.get("ablate", []) if ablated_layer == layer] for layer in range(6)}
    norms, alti = served(client, run, "norm"), served(client, run, "alti")
    x = np.array(client.get(f"/api/runs/{run}/embeddings").json()["normalized"])
    for layer in range(6):
        heads = [client.get(f"/api/runs/{run}/layers/{layer}/heads/{h}").json() for h in range(12)]
        alpha = np.array([head["weights"] for head in heads])
        if options.get("mask") == "causal":
            assert not np.triu(alpha, 1).any() and not np.triu(norms[layer], 1).any()
        w = weights_of(minilm, layer)
        f = transformed(x, w, off=off[layer])
        # one block from the lab's own served numbers
        expected = alpha * np.linalg.norm(f, axis=-1)[:, None, :]
        atol = pass_tolerance(minilm.model.config, largest(expected), blocks=1)
        np.testing.assert_allclose(norms[layer], expected, atol=atol)
        for head in off[layer]:
            assert not norms[layer, head].any()  # a switched-off head moves nothing
        atol = pass_tolerance(minilm.model.config, blocks=1)
        np.testing.assert_allclose(alti[layer, 0], alti_layer(x, alpha, w, off[layer]), atol=atol)
        x = np.array(client.get(f"/api/runs/{run}/layers/{layer}").json()["output"])
    assert alti.shape == (6, 1, n, n)


def test_uint8_norms_carry_their_own_scale_and_bad_measures_are_422(client):
    run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    exact = served(client, run, "norm")
    response = client.get(f"/api/runs/{run}/attention", params={"measure": "norm", "layer": 2})
    scale = float(response.headers["X-Attention-Scale"])
    assert scale == pytest.approx(255 / exact[2].max(), rel=1e-6)
    small = decode_attention(response.content, response.headers)[0]
    assert np.abs(small - exact[2]).max() <= 0.5 / scale + 1e-6
    only = client.get(f"/api/runs/{run}/attention", params={"measure": "alti", "layer": 1, "head": 0})
    assert only.status_code == 200 and only.headers["X-Attention-Shape"].startswith("1,1,")
    assert (
        client.get(f"/api/runs/{run}/attention", params={"measure": "alti", "layer": 1, "head": 1}).status_code == 404
    )
    bad = client.get(f"/api/runs/{run}/attention", params={"measure": "saliency"})
    assert bad.status_code == 422 and "measure" in bad.json()["detail"]


def test_every_measure_the_api_takes_is_declared_once_with_its_words():
    from typing import get_args

    from app.engine.measures import MEASURES, Measure

    assert set(get_args(Measure)) <= set(MEASURES)
    for key, measure in MEASURES.items():
        assert measure.key == key and measure.symbol and measure.name and measure.values and measure.meaning
    assert [key for key, measure in MEASURES.items() if measure.per_block] == ["alti", "alti_rollout"]


def test_a_measure_is_kept_beside_its_run_within_the_caches_bytes(client):
    """ALTI's and the norms' blocks are kept by run id, measure and block (asked again, the same bytes
    without computing them), and their bytes count against the cache's bound, not against its runs."""
    lab = client.app.state.lab
    run = client.post("/api/analyze", json={"text": TEXT + " kept"}).json()["run_id"]
    runs, nbytes = len(lab.runs), lab.runs.nbytes
    first = served(client, run, "alti")
    n = first.shape[-1]
    assert len(lab.runs) == runs and lab.runs.nbytes == nbytes + 6 * n * n * 4  # six [1, n, n] float32 blocks
    kept = lab.runs.get(f"{run}/alti/3")
    assert kept is not None
    np.testing.assert_array_equal(served(client, run, "alti"), first)  # bit for bit: read back (kept)
    assert lab.runs.get(f"{run}/alti/3") is kept
    served(client, run, "norm")
    assert lab.runs.nbytes == nbytes + 6 * n * n * 4 + 6 * 12 * n * n * 4
