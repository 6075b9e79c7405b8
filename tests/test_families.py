"""Every family the lab reads, as a tiny random model built in a temp folder (tests/families.py), checked
over HTTP against the model's own outputs and a NumPy recomputation from its raw weights."""

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine import capture as capture_module
from app.engine import measures, names
from app.engine.capture import capture
from app.engine.engine import Engine
from app.engine.model import ModelLoadError, load_model
from app.main import create_app
from app.web.encoding import decode_attention
from tests.families import BUILDERS, build, pegasus
from tests.float32 import largest, pass_tolerance, tolerance

TEXT = "The cat sat on the mat."
PAIR = "A quick fox!"
FAMILIES = list(BUILDERS)
DECODERS = {"gpt2", "llama", "qwen2", "mistral", "qwen3", "gemma3"}
LLAMA_LIKE = {"llama", "qwen2", "mistral", "qwen3"}
GEMMA = {"gemma3", "embeddinggemma"}
ROTARY = LLAMA_LIKE | GEMMA | {"modernbert"}
PRE_NORM = {"gpt2", "modernbert"} | LLAMA_LIKE | GEMMA  # a final norm after the last block


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tmp_path_factory):
    """(name, the loaded model, a client of a lab serving it)."""
    loaded = load_model(build(request.param, tmp_path_factory.mktemp(request.param)))
    with TestClient(create_app(loaded)) as client:
        yield request.param, loaded, client


def weights(module) -> dict[str, np.ndarray]:
    return {name: value.detach().numpy().astype(np.float64) for name, value in module.state_dict().items()}


def layer_norm(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def rms_norm(x, w, eps):
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def gelu_tanh(x):  # GPT-2's gelu_new
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def rms_per_head(x, w, eps):  # x [head, pos, d]: each head's vector on its own
    return x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * w


def rotary(x, theta):
    """RoPE as in the Llama paper's reference: pairs (i, i + d/2) rotated by position · θ^(-2i/d). x [head, pos, d]"""
    d = x.shape[-1]
    angles = np.arange(x.shape[1])[:, None] * theta ** (-np.arange(0, d, 2) / d)[None]  # [pos, d/2]
    cos, sin = np.cos(angles), np.sin(angles)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([first * cos - second * sin, second * cos + first * sin], -1)


def by_heads(x, n):  # [pos, n·d] -> [head, pos, d]
    return x.reshape(len(x), n, -1).transpose(1, 0, 2)


def reference_block(name, loaded, layer, x, resid_mid):
    """q, k, v [head, pos, d_head] and the FFN's output [pos, d_model] of block `layer` from its raw weights:
    x is what the block reads (the model's own hidden state), resid_mid the residual after attention."""
    config, base = loaded.model.config, loaded.model.base_model
    n = config.num_attention_heads
    if name in ("bert", "roberta", "xlm-roberta"):
        w = weights(base.encoder.layer[layer])
        project = lambda part: x @ w[f"attention.self.{part}.weight"].T + w[f"attention.self.{part}.bias"]  # noqa: E731
        q, k, v = (by_heads(project(part), n) for part in ("query", "key", "value"))
        ffn = gelu(resid_mid @ w["intermediate.dense.weight"].T + w["intermediate.dense.bias"])
        return q, k, v, ffn @ w["output.dense.weight"].T + w["output.dense.bias"]
    if name == "distilbert":
        w = weights(base.transformer.layer[layer])
        project = lambda part: x @ w[f"attention.{part}.weight"].T + w[f"attention.{part}.bias"]  # noqa: E731
        q, k, v = (by_heads(project(part), n) for part in ("q_lin", "k_lin", "v_lin"))
        ffn = gelu(resid_mid @ w["ffn.lin1.weight"].T + w["ffn.lin1.bias"])
        return q, k, v, ffn @ w["ffn.lin2.weight"].T + w["ffn.lin2.bias"]
    if name == "mpnet":
        w = weights(base.encoder.layer[layer])
        project = lambda part: x @ w[f"attention.attn.{part}.weight"].T + w[f"attention.attn.{part}.bias"]  # noqa: E731
        q, k, v = (by_heads(project(part), n) for part in "qkv")
        ffn = gelu(resid_mid @ w["intermediate.dense.weight"].T + w["intermediate.dense.bias"])
        return q, k, v, ffn @ w["output.dense.weight"].T + w["output.dense.bias"]
    if name == "gpt2":
        w, eps = weights(base.h[layer]), config.layer_norm_epsilon
        qkv = layer_norm(x, w["ln_1.weight"], w["ln_1.bias"], eps) @ w["attn.c_attn.weight"] + w["attn.c_attn.bias"]
        q, k, v = (by_heads(part, n) for part in np.split(qkv, 3, axis=-1))
        h = layer_norm(resid_mid, w["ln_2.weight"], w["ln_2.bias"], eps)
        ffn = gelu_tanh(h @ w["mlp.c_fc.weight"] + w["mlp.c_fc.bias"])
        return q, k, v, ffn @ w["mlp.c_proj.weight"] + w["mlp.c_proj.bias"]
    if name == "modernbert":
        w, eps = weights(base.layers[layer]), config.norm_eps
        h = x if layer == 0 else layer_norm(x, w["attn_norm.weight"], 0, eps)  # block 0 reads the embeddings' LN
        q, k, v = (by_heads(part, n) for part in np.split(h @ w["attn.Wqkv.weight"].T, 3, axis=-1))
        theta = config.rope_parameters[config.layer_types[layer]]["rope_theta"]
        inner, gate = np.split(layer_norm(resid_mid, w["mlp_norm.weight"], 0, eps) @ w["mlp.Wi.weight"].T, 2, axis=-1)
        return rotary(q, theta), rotary(k, theta), v, (gelu(inner) * gate) @ w["mlp.Wo.weight"].T
    w, eps = weights(base.layers[layer]), config.rms_norm_eps
    repeat = n // config.num_key_value_heads
    if name in GEMMA:  # RMSNorms scale by 1 + weight; q and k normalised per head; GELU (tanh) gated
        h = rms_norm(x, 1 + w["input_layernorm.weight"], eps)
        project = lambda part, heads: by_heads(h @ w[f"self_attn.{part}_proj.weight"].T, heads)  # noqa: E731
        q = rms_per_head(project("q", n), 1 + w["self_attn.q_norm.weight"], eps)
        k = rms_per_head(project("k", config.num_key_value_heads), 1 + w["self_attn.k_norm.weight"], eps)
        v = project("v", config.num_key_value_heads)
        theta = config.rope_parameters[config.layer_types[layer]]["rope_theta"]
        h = rms_norm(resid_mid, 1 + w["pre_feedforward_layernorm.weight"], eps)
        ffn = gelu_tanh(h @ w["mlp.gate_proj.weight"].T) * (h @ w["mlp.up_proj.weight"].T)
        k, v = k.repeat(repeat, axis=0), v.repeat(repeat, axis=0)
        return rotary(q, theta), rotary(k, theta), v, ffn @ w["mlp.down_proj.weight"].T
    h = rms_norm(x, w["input_layernorm.weight"], eps)
    project = lambda part: h @ w[f"self_attn.{part}.weight"].T + w.get(f"self_attn.{part}.bias", 0)  # noqa: E731
    q = by_heads(project("q_proj"), n)
    k = by_heads(project("k_proj"), config.num_key_value_heads).repeat(repeat, axis=0)
    v = by_heads(project("v_proj"), config.num_key_value_heads).repeat(repeat, axis=0)
    if name == "qwen3":  # each head's q and k RMS-normalised before the rotation
        q = rms_per_head(q, w["self_attn.q_norm.weight"], eps)
        k = rms_per_head(k, w["self_attn.k_norm.weight"], eps)
    theta = config.rope_parameters["rope_theta"]
    h = rms_norm(resid_mid, w["post_attention_layernorm.weight"], eps)
    gate, up = h @ w["mlp.gate_proj.weight"].T, h @ w["mlp.up_proj.weight"].T
    ffn = gate / (1 + np.exp(-gate)) * up
    return rotary(q, theta), rotary(k, theta), v, ffn @ w["mlp.down_proj.weight"].T


def model_outputs(name, loaded, ids, types):
    inputs = {"input_ids": torch.tensor([ids])}
    if loaded.family.token_types:
        inputs["token_type_ids"] = torch.tensor([types])
    with torch.no_grad():
        return loaded.model(**inputs, output_attentions=True, output_hidden_states=True)


@pytest.mark.parametrize("pair", [None, PAIR])
def test_a_family_over_http_equals_the_model_and_its_weights(family, pair):
    name, loaded, client = family
    answer = client.post("/api/analyze", json={"text": TEXT, "text_pair": pair})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    tokenizer = loaded.tokenizer
    encoding = tokenizer(TEXT, pair, return_token_type_ids=True)
    ids = encoding["input_ids"]
    assert [token["id"] for token in body["tokens"]] == ids
    assert [token["special"] for token in body["tokens"]] == [i in tokenizer.all_special_ids for i in ids]
    assert [token["added"] for token in body["tokens"]] == [s is None for s in encoding.sequence_ids()]
    assert body["mask"] == ("causal" if name in DECODERS else "bidirectional")
    run = body["run_id"]
    reference = model_outputs(name, loaded, ids, encoding["token_type_ids"])

    got = client.get(f"/api/runs/{run}/attention", params={"dtype": "float32"})
    attention = decode_attention(got.content, got.headers)
    expected = np.stack([layer[0].numpy() for layer in reference.attentions])
    config = loaded.model.config
    np.testing.assert_allclose(attention, expected, atol=pass_tolerance(config))

    hidden = [state[0].double().numpy() for state in reference.hidden_states]  # what each block reads
    for layer in range(2):
        numbers = client.get(f"/api/runs/{run}/layers/{layer}").json()
        resid_mid = np.array(numbers["resid_mid"])
        q, k, v, ffn_output = reference_block(name, loaded, layer, hidden[layer], resid_mid)
        for head in range(4):
            got = client.get(f"/api/runs/{run}/layers/{layer}/heads/{head}").json()
            for part, want in zip("qkv", (q, k, v), strict=True):
                atol = pass_tolerance(config, largest(want[head]))
                np.testing.assert_allclose(np.array(got[part]), want[head], atol=atol, err_msg=f"{part} {layer}.{head}")
            np.testing.assert_allclose(np.array(got["weights"]), expected[layer, head], atol=pass_tolerance(config))
            scores = np.array(got["scores"])
            shifted = np.exp(scores - scores.max(-1, keepdims=True))
            softmax = shifted / shifted.sum(-1, keepdims=True)
            np.testing.assert_allclose(softmax, expected[layer, head], atol=pass_tolerance(config))
        atol = pass_tolerance(config, largest(ffn_output))
        np.testing.assert_allclose(np.array(numbers["ffn_output"]), ffn_output, atol=atol)
        if layer == 0 and name not in DECODERS:
            np.testing.assert_allclose(
                np.array(numbers["output"]), hidden[1], atol=pass_tolerance(config, largest(hidden[1]))
            )

    last = reference.hidden_states[-1][0].numpy()  # after the final norm in a pre-norm model
    pooled = np.array(body["pooled"]["vector"])
    expected = {"mean": last.mean(0), "cls": last[0], "last": last[-1]}[body["pooling"]]
    np.testing.assert_allclose(pooled, expected, atol=pass_tolerance(config, largest(last)))
    assert body["pooling"] == ("last" if name in DECODERS else "cls" if name == "modernbert" else "mean")

    if name in DECODERS:
        logits = reference.logits[0].numpy()
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        atol = pass_tolerance(config, largest(logits))  # a probability moves by at most half its logits' error
        for token in range(len(ids)):
            candidates = client.get(f"/api/runs/{run}/tokens/{token}/next", params={"k": 5}).json()["candidates"]
            best = np.argsort(-logits[token], kind="stable")[:5]
            assert [c["id"] for c in candidates] == best.tolist()
            np.testing.assert_allclose([c["logit"] for c in candidates], logits[token, best], atol=atol)
            np.testing.assert_allclose([c["probability"] for c in candidates], probabilities[token, best], atol=atol)
        if name == "gemma3":  # the model's own logits, soft-capped at 3 (tests/families.py)
            assert np.abs(logits).max() < 3
    else:
        assert client.get(f"/api/runs/{run}/tokens/0/next").status_code == 422


def test_what_the_page_is_told_follows_the_family(family):
    name, loaded, client = family
    model = client.get("/api/model").json()
    assert (model["layers"], model["heads"], model["hidden_size"], model["head_dim"]) == (2, 4, 64, 16)
    assert model["intermediate_size"] == (256 if name == "gpt2" else 96)
    assert model["decoder"] == (name in DECODERS)
    assert model["default_mask"] == ("causal" if name in DECODERS else "bidirectional")
    assert model["next_tokens"] == (name in DECODERS)
    assert model["key_value_heads"] == (2 if name in LLAMA_LIKE | GEMMA else 4)
    assert model["positions"] == ("rotary" if name in ROTARY else "relative" if name == "mpnet" else "absolute")
    # Mistral's window in every block, the others' in their local blocks (tests/families.py): a query sees the
    # keys fewer than 3 positions away, before it or (an encoder's) on either side.
    windows = {"qwen2": [None, 3], "mistral": [3, 3], "modernbert": [None, 3], "gemma3": [3, None]}
    assert model["windows"] == {**windows, "embeddinggemma": [3, None]}.get(name, [None, None])
    ffn = {"GELU": "GeGLU", "SiLU": "SwiGLU"}[model["ffn_activation"]] if name in ROTARY else model["ffn_activation"]
    assert (model["ffn"], model["ffn_gated"]) == (ffn, name in ROTARY)
    assert model["ffn_activation"] == ("SiLU" if name in LLAMA_LIKE else "GELU")
    gated = f"{model['ffn_activation']}(x · W_gate) ⊙ (x · W_up)"
    assert model["activations"]["ffn_intermediate"] == (gated if name in ROTARY else "GELU(x · W₁)")
    # 1/√16, GPT-2's divided by the block's number too, Gemma's 1/√24 (query_pre_attn_scalar): tests/families.py
    scales = {"gpt2": [0.25, 0.125], "gemma3": [24**-0.5] * 2, "embeddinggemma": [24**-0.5] * 2}
    assert model["scales"] == pytest.approx(scales.get(name, [0.25, 0.25]), rel=1e-12)
    assert model["capabilities"] == dict.fromkeys(model["capabilities"], True) and model["attention_only"] is None
    if name in DECODERS:
        refused = client.post("/api/analyze", json={"text": TEXT, "mask": "bidirectional"})
        assert refused.status_code == 422 and "causal" in refused.json()["detail"]
        assert model["default_pooling"] == "last"


@pytest.mark.parametrize(
    ("name", "act", "ffn", "label"),
    [("bert", "relu", "ReLU", "ReLU(x · W₁)"), ("llama", "gelu", "GeGLU", "GELU(x · W_gate) ⊙ (x · W_up)")],
)
def test_the_ffn_is_named_by_the_activation_its_config_gives(tmp_path, monkeypatch, name, act, ffn, label):
    """A BERT with ReLU and a Llama gated by GELU: the page names what they compute, and the recorded FFN
    activations are that function of the raw weights."""
    import tests.families

    monkeypatch.setattr(tests.families, "SIZE", {**tests.families.SIZE, "hidden_act": act})
    loaded = load_model(build(name, tmp_path / name))
    with TestClient(create_app(loaded)) as client:
        model = client.get("/api/model").json()
        assert (model["ffn"], model["ffn_activation"], model["activations"]["ffn_intermediate"]) == (
            ffn,
            "ReLU" if act == "relu" else "GELU",
            label,
        )
        run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
        numbers = client.get(f"/api/runs/{run}/layers/0").json()
    resid_mid, got = np.array(numbers["resid_mid"]), np.array(numbers["ffn_intermediate"])
    if name == "bert":
        w = weights(loaded.model.base_model.encoder.layer[0])
        expected = np.maximum(resid_mid @ w["intermediate.dense.weight"].T + w["intermediate.dense.bias"], 0)
    else:
        w = weights(loaded.model.base_model.layers[0])
        h = rms_norm(resid_mid, w["post_attention_layernorm.weight"], loaded.model.config.rms_norm_eps)
        expected = gelu(h @ w["mlp.gate_proj.weight"].T) * (h @ w["mlp.up_proj.weight"].T)
    np.testing.assert_allclose(got, expected, atol=pass_tolerance(loaded.model.config, largest(expected)))


def test_a_switched_off_head_is_zero_before_w_o_in_every_family(family):
    name, loaded, client = family
    plain = client.post("/api/analyze", json={"text": TEXT}).json()
    ablated = client.post("/api/analyze", json={"text": TEXT, "ablate": [[1, 2]]}).json()
    head = client.get(f"/api/runs/{ablated['run_id']}/layers/1/heads/2").json()
    assert head["ablated"] and not np.any(np.array(head["context_to_output"]))
    before = client.get(f"/api/runs/{plain['run_id']}/layers/0").json()["output"]
    after = client.get(f"/api/runs/{ablated['run_id']}/layers/0").json()["output"]
    assert before == after  # blocks before the switched-off head are untouched
    assert plain["pooled"]["vector"] != ablated["pooled"]["vector"]


def test_the_measures_serve_every_family(family):
    name, loaded, client = family
    run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    for measure in ("norm", "alti", "alti_rollout"):
        got = client.get(f"/api/runs/{run}/attention", params={"measure": measure, "dtype": "float32"})
        assert got.status_code == 200, got.text
        values = decode_attention(got.content, got.headers)
        assert np.isfinite(values).all()
        if measure != "norm":  # shares of each row, rolled out over the blocks
            np.testing.assert_allclose(values.sum(-1), 1, atol=tolerance(values.shape[-1] * values.shape[0]))


# What each family records, in the order of the forward pass: pinned, so that a change is a decision.
EMBEDDINGS = {
    "bert": ["word", "position", "token_type", "sum", "normalized"],
    "roberta": ["word", "position", "token_type", "sum", "normalized"],
    "xlm-roberta": ["word", "position", "token_type", "sum", "normalized"],
    "distilbert": ["word", "position", "sum", "normalized"],
    "mpnet": ["word", "position", "sum", "normalized"],
    "gpt2": ["word", "position", "sum"],
    "llama": ["word"],
    "qwen2": ["word"],
    "mistral": ["word"],
    "modernbert": ["word", "normalized"],
    "qwen3": ["word"],
    "gemma3": ["word", "scaled"],
    "embeddinggemma": ["word", "scaled"],
}
ATTENTION = ["q", "k", "v", "context"]
BLOCK = ["attention_output", "resid_mid", "ffn_intermediate", "ffn_output", "output"]


def test_the_names_each_family_records_are_pinned(family):
    name, loaded, _ = family
    ids = torch.tensor(loaded.tokenizer(TEXT)["input_ids"])
    recorded = capture(loaded.model, loaded.family, ids, torch.zeros_like(ids), loaded.family.native_mask)[0]
    attention = ATTENTION[:3] + ["position_bias"] + ATTENTION[3:] if name == "mpnet" else ATTENTION
    expected = [f"embeddings.{part}" for part in EMBEDDINGS[name]]
    for layer in range(2):
        expected += [f"blocks.{layer}.attn.{part}" for part in attention] + [f"blocks.{layer}.{part}" for part in BLOCK]
    expected += ["final.normalized"] if name in PRE_NORM else []
    assert names.ordered(set(recorded), 2) == expected
    assert len(recorded) == len(expected)


def test_a_model_that_does_not_return_its_attention_is_refused_in_one_line(tmp_path):
    """Pegasus is an encoder-decoder the lab has no family for (it reads T5, BART and Marian as such): one pass of
    its encoder's input alone is not a pass it makes."""
    pegasus(tmp_path)
    with pytest.raises(ModelLoadError) as refused:
        load_model(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "'pegasus' model the lab cannot read" in message


def test_the_position_row_a_token_reads_is_the_models_own(family):
    """RoBERTa and MPNet count positions from after their padding row: token i reads row i + offset."""
    name, loaded, client = family
    info = client.get("/api/model").json()
    if "position" not in info["activations"]:
        assert info["positions"] == "rotary"  # no position table: nothing to read
        return
    run = client.post("/api/analyze", json={"text": TEXT}).json()["run_id"]
    rows = np.array(client.get(f"/api/runs/{run}/embeddings").json()["position"])
    base = loaded.model.base_model
    table = (base.wpe if name == "gpt2" else base.embeddings.position_embeddings).weight.detach().numpy()
    offset = info["position_offset"]
    assert offset == (2 if name in ("roberta", "xlm-roberta", "mpnet") else 0)
    np.testing.assert_allclose(rows, table[offset : offset + len(rows)], atol=1e-6)


NEW = ["modernbert", "qwen3", "gemma3", "embeddinggemma"]


@pytest.fixture(scope="module", params=NEW)
def new_family(request, tmp_path_factory):
    loaded = load_model(build(request.param, tmp_path_factory.mktemp(request.param)))
    with TestClient(create_app(loaded)) as client:
        yield request.param, loaded, client


def served(client, run, measure):
    got = client.get(f"/api/runs/{run}/attention", params={"measure": measure, "dtype": "float32"})
    assert got.status_code == 200, got.text
    return decode_attention(got.content, got.headers).astype(np.float64)


def test_norms_alti_and_its_rollout_equal_the_papers_formulas(new_family):
    """From transformers' hidden states and weights and the raw W_V, W_O: ‖α f(x)‖, and ALTI through a pre-norm
    block (y = x + attention) or Gemma's, whose RMSNorm scales attention's output before the residual
    (y_i = x_i + γ ⊙ a_i / σ_i, so T̃_i(x_j) = γ ⊙ Σ_h α_ij f_h(x_j) / σ_i + [i = j] x_j)."""
    name, loaded, client = new_family
    body = client.post("/api/analyze", json={"text": TEXT}).json()
    ids = [token["id"] for token in body["tokens"]]
    reference = model_outputs(name, loaded, ids, [0] * len(ids))
    hidden = [state[0].double().numpy() for state in reference.hidden_states]
    norms, alti, rollout = (served(client, body["run_id"], measure) for measure in ("norm", "alti", "alti_rollout"))
    config, base, n = loaded.model.config, loaded.model.base_model, len(ids)
    flow = np.eye(n)
    for layer in range(2):
        x, alpha = hidden[layer], reference.attentions[layer][0].double().numpy()
        resid_mid = np.array(client.get(f"/api/runs/{body['run_id']}/layers/{layer}").json()["resid_mid"])
        _, _, v, _ = reference_block(name, loaded, layer, x, resid_mid)
        w = weights(base.layers[layer])
        w_o = w["attn.Wo.weight" if name == "modernbert" else "self_attn.o_proj.weight"]
        d = v.shape[-1]
        f = np.stack([v[h] @ w_o[:, h * d : (h + 1) * d].T for h in range(4)])  # [head, key, d_model]
        expected = alpha * np.linalg.norm(f, axis=-1)[:, None, :]
        np.testing.assert_allclose(norms[layer], expected, atol=pass_tolerance(config, largest(expected)))
        attention = np.einsum("hij,hjd->id", alpha, f)
        if name in GEMMA:
            gamma = 1 + w["post_attention_layernorm.weight"]
            sigma = np.sqrt((attention**2).mean(-1) + config.rms_norm_eps)
        else:
            gamma, sigma = 1, np.ones(n)
        y = x + gamma * attention / sigma[:, None]
        atol = pass_tolerance(config, largest(y))
        np.testing.assert_allclose(y, resid_mid, atol=atol)  # the block's own residual after attention
        contributions = np.zeros((n, n))
        for i in range(n):
            t = gamma * np.einsum("hj,hjd->jd", alpha[:, i], f) / sigma[i]
            t[i] += x[i]
            contributions[i] = np.maximum(0, np.abs(y[i]).sum() - np.abs(y[i] - t).sum(-1))
            contributions[i] /= contributions[i].sum()
        np.testing.assert_allclose(alti[layer, 0], contributions, atol=pass_tolerance(config))
        flow = contributions @ flow
        np.testing.assert_allclose(rollout[layer, 0], flow, atol=pass_tolerance(config))


def test_each_local_block_hides_the_keys_its_window_has_passed(new_family):
    """ModernBERT's block 1 and EmbeddingGemma's block 0 see 2 tokens on either side, Gemma 3's block 0 the 2
    before each token; the global blocks see every key their mask allows. Under the causal mask an encoder's
    local block sees the window before the token only."""
    name, loaded, client = new_family
    windows = client.get("/api/model").json()["windows"]
    for mask in ["causal"] if name in DECODERS else ["bidirectional", "causal"]:
        body = client.post("/api/analyze", json={"text": TEXT, "mask": mask}).json()
        weights = served(client, body["run_id"], "weights")
        n = len(body["tokens"])
        distance = np.arange(n)[:, None] - np.arange(n)[None]  # query − key
        for layer, window in enumerate(windows):
            seen = np.abs(distance) < (window or n)
            if mask == "causal":
                seen &= distance >= 0
            assert (weights[layer][:, ~seen] == 0).all() and (weights[layer][:, seen] > 0).all(), (mask, layer)
    assert sum(window is not None for window in windows) == (0 if name == "qwen3" else 1)


def test_a_switched_off_head_is_the_model_with_its_columns_of_w_o_zeroed(new_family, tmp_path):
    """Independent of the lab's hooks: the same model with head 2's columns of block 1's W_O set to zero."""
    name, loaded, client = new_family
    body = client.post("/api/analyze", json={"text": TEXT, "ablate": [[1, 2]]}).json()
    reference = load_model(loaded.path).model
    w_o = reference.base_model.layers[1].get_submodule("attn.Wo" if name == "modernbert" else "self_attn.o_proj")
    d = reference.config.hidden_size // 4 if name == "modernbert" else 16
    with torch.no_grad():
        w_o.weight[:, 2 * d : 3 * d] = 0
        last = reference.base_model(input_ids=torch.tensor([[t["id"] for t in body["tokens"]]])).last_hidden_state[0]
    expected = {"mean": last.mean(0), "cls": last[0], "last": last[-1]}[body["pooling"]]
    atol = pass_tolerance(reference.config, largest(last))
    np.testing.assert_allclose(body["pooled"]["vector"], expected.numpy(), atol=atol)


def test_gemma_scales_its_word_rows_by_the_root_of_its_width(new_family):
    name, loaded, client = new_family
    if name not in GEMMA:
        return
    body = client.post("/api/analyze", json={"text": TEXT}).json()
    rows = client.get(f"/api/runs/{body['run_id']}/embeddings").json()
    table = loaded.model.get_input_embeddings().weight.detach().numpy()
    ids = [token["id"] for token in body["tokens"]]
    assert np.array_equal(np.array(rows["word"], dtype=np.float32), table[ids])  # bit for bit: no rounding (rows)
    np.testing.assert_allclose(rows["scaled"], table[ids] * 8, rtol=1e-6)  # √64
    notes = " ".join(client.get("/api/model").json()["score_notes"])
    assert "1/√24 (query_pre_attn_scalar), not 1/√16" in notes and "attn_logit_softcapping = 50" in notes


@pytest.mark.parametrize("fused", [False, True], ids=["eager pass", "fused pass"])
def test_weights_computed_when_asked_equal_output_attentions_and_so_do_norm_and_alti(family, fused, monkeypatch):
    """A run keeps q and k, not its N² weights: a block's weights are computed when asked (Run.weights) by the
    block's own scoring (rotary q and k, grouped K/V heads, windows, scale, MPNet's position bias). After an
    eager pass (a short input) they equal transformers' output_attentions bit for bit, and so do norm and ALTI
    from them; after a fused pass (a long input: capture.FUSED_FROM_BYTES, here forced) block 0's still do
    (its q and k read the embeddings), the later blocks' to float rounding (tests/float32.py; at most 3e-7
    measured here)."""
    if fused:
        monkeypatch.setattr(capture_module, "FUSED_FROM_BYTES", 0)
    name, loaded, _ = family
    engine = Engine(loaded, max_chars=1000)
    run = engine.compute(engine.spec(TEXT))
    reference = model_outputs(name, loaded, [t.id for t in run.tokens], [t.token_type for t in run.tokens])
    eager_weights = {names.attn(layer, "weights"): w[0] for layer, w in enumerate(reference.attentions)}
    eager = replace(run, activations={**run.activations, **eager_weights})
    # bit for bit: same shapes (a lone pass; block 0's q and k the same projections of the same embeddings)
    assert torch.equal(run.weights(0), eager.weights(0))
    for layer in range(2):
        norms = [measures.norm(which, loaded.model, layer) for which in (run, eager)]
        alti = [[piece() for piece in measures.alti_slices(which, loaded.model, layer)][-1] for which in (run, eager)]
        if fused:
            atol = pass_tolerance(loaded.model.config)
            torch.testing.assert_close(run.weights(layer), eager.weights(layer), atol=atol, rtol=0)
            torch.testing.assert_close(*norms, atol=pass_tolerance(loaded.model.config, largest(norms[1])), rtol=0)
            torch.testing.assert_close(*alti, atol=atol, rtol=0)
        else:
            # bit for bit: same shapes (the lab's lone pass and transformers' own)
            assert torch.equal(run.weights(layer), eager.weights(layer)), f"block {layer}"
            assert torch.equal(*norms) and torch.equal(*alti)  # bit for bit: same shapes (from those weights)


def test_rows_computed_alone_are_the_blocks_own_bits(family):
    """A long run's views compute query rows alone (Run.score_rows: whole chunks of 64 queries, only the keys
    a causal query may see, the mask added only where it hides a key): in every family, under each mask it
    may be read with, the rows equal the block's weights and scores (Run.weights, bit for bit the model's)."""
    name, loaded, _ = family
    engine = Engine(loaded, max_chars=1000)
    for mask in engine.info["masks"]:
        run = engine.compute(engine.spec(TEXT, mask=mask))
        n = len(run.tokens)
        for layer in range(run.n_layers):
            rows = run.score_rows(layer, list(range(run.n_heads)), range(n), softmax=True)
            # bit for bit: same shapes (a run shorter than ROW_CHUNK: one chunk of rows, the whole block)
            assert torch.equal(rows, run.weights(layer)), f"{name}, {mask} mask, block {layer}"
            scores = run.score_rows(layer, [1, 2], range(3, n))
            # bit for bit: same shapes (the rows cut from that one chunk)
            assert torch.equal(scores, run.scores(layer, [1, 2])[:, 3:]), f"{name}, {mask} mask, block {layer}"
