"""Every family the lab reads, as a tiny random model built in a temp folder (tests/families.py), checked
over HTTP against the model's own outputs and a NumPy recomputation from its raw weights."""

import math

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine import names
from app.engine.capture import capture
from app.engine.model import ModelLoadError, load_model
from app.main import create_app
from app.web.encoding import decode_attention
from tests.families import BUILDERS, build

TEXT = "The cat sat on the mat."
PAIR = "A quick fox!"
FAMILIES = list(BUILDERS)
DECODERS = {"gpt2", "llama", "qwen2", "mistral"}


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
    w, eps = weights(base.layers[layer]), config.rms_norm_eps
    h = rms_norm(x, w["input_layernorm.weight"], eps)
    repeat = n // config.num_key_value_heads
    project = lambda part: h @ w[f"self_attn.{part}.weight"].T + w.get(f"self_attn.{part}.bias", 0)  # noqa: E731
    q = by_heads(project("q_proj"), n)
    k = by_heads(project("k_proj"), config.num_key_value_heads).repeat(repeat, axis=0)
    v = by_heads(project("v_proj"), config.num_key_value_heads).repeat(repeat, axis=0)
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
    np.testing.assert_allclose(attention, expected, atol=1e-5)

    hidden = [state[0].double().numpy() for state in reference.hidden_states]  # what each block reads
    for layer in range(2):
        numbers = client.get(f"/api/runs/{run}/layers/{layer}").json()
        resid_mid = np.array(numbers["resid_mid"])
        q, k, v, ffn_output = reference_block(name, loaded, layer, hidden[layer], resid_mid)
        for head in range(4):
            got = client.get(f"/api/runs/{run}/layers/{layer}/heads/{head}").json()
            for part, want in zip("qkv", (q, k, v), strict=True):
                np.testing.assert_allclose(np.array(got[part]), want[head], atol=1e-5, err_msg=f"{part} {layer}.{head}")
            np.testing.assert_allclose(np.array(got["weights"]), expected[layer, head], atol=1e-5)
            scores = np.array(got["scores"])
            shifted = np.exp(scores - scores.max(-1, keepdims=True))
            np.testing.assert_allclose(shifted / shifted.sum(-1, keepdims=True), expected[layer, head], atol=1e-5)
        np.testing.assert_allclose(np.array(numbers["ffn_output"]), ffn_output, atol=1e-5)
        if layer == 0 and name not in DECODERS:
            np.testing.assert_allclose(np.array(numbers["output"]), hidden[1], atol=1e-5)

    last = reference.hidden_states[-1][0].numpy()  # after the final norm in a pre-norm decoder
    pooled = np.array(body["pooled"]["vector"])
    np.testing.assert_allclose(pooled, last[-1] if name in DECODERS else last.mean(0), atol=1e-5)

    if name in DECODERS:
        logits = reference.logits[0].numpy()
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        for token in range(len(ids)):
            candidates = client.get(f"/api/runs/{run}/tokens/{token}/next", params={"k": 5}).json()["candidates"]
            best = np.argsort(-logits[token], kind="stable")[:5]
            assert [c["id"] for c in candidates] == best.tolist()
            np.testing.assert_allclose([c["logit"] for c in candidates], logits[token, best], atol=1e-5)
            np.testing.assert_allclose([c["probability"] for c in candidates], probabilities[token, best], atol=1e-6)
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
    assert model["key_value_heads"] == (2 if name in ("llama", "qwen2", "mistral") else 4)
    assert model["positions"] == {"llama": "rotary", "qwen2": "rotary", "mistral": "rotary", "mpnet": "relative"}.get(
        name, "absolute"
    )
    assert model["windows"] == {"qwen2": [None, 3], "mistral": [3, 3]}.get(name, [None, None])
    gated = name in ("llama", "qwen2", "mistral")
    assert (model["ffn"], model["ffn_gated"]) == (("SwiGLU", True) if gated else ("GELU", False))
    assert model["activations"]["ffn_intermediate"] == ("SiLU(x · W_gate) ⊙ (x · W_up)" if gated else "GELU(x · W₁)")
    # 1/√16, and GPT-2's divided by the block's number too (tests/families.py)
    assert model["scales"] == pytest.approx([0.25, 0.125] if name == "gpt2" else [0.25, 0.25], rel=1e-12)
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
    np.testing.assert_allclose(got, expected, atol=1e-5)


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
        if measure != "norm":
            np.testing.assert_allclose(values.sum(-1), 1, atol=1e-5)


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
}
ATTENTION = ["q", "k", "v", "weights", "context"]
BLOCK = ["attention_output", "resid_mid", "ffn_intermediate", "ffn_output", "output"]


def test_the_names_each_family_records_are_pinned(family):
    name, loaded, _ = family
    ids = torch.tensor(loaded.tokenizer(TEXT)["input_ids"])
    recorded = capture(loaded.model, loaded.family, ids, torch.zeros_like(ids), loaded.family.native_mask)[0]
    attention = ATTENTION[:3] + ["position_bias"] + ATTENTION[3:] if name == "mpnet" else ATTENTION
    expected = [f"embeddings.{part}" for part in EMBEDDINGS[name]]
    for layer in range(2):
        expected += [f"blocks.{layer}.attn.{part}" for part in attention] + [f"blocks.{layer}.{part}" for part in BLOCK]
    expected += ["final.normalized"] if name in DECODERS else []
    assert names.ordered(set(recorded), 2) == expected
    assert len(recorded) == len(expected)


def test_a_folder_of_another_family_is_refused_in_one_line_naming_the_known_ones(tmp_path):
    from transformers import T5Config, T5Model

    T5Model(T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=50)).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError) as refused:
        load_model(tmp_path)
    message = str(refused.value)
    assert "\n" not in message and "'t5'" in message
    assert all(known in message for known in ("BERT", "RoBERTa", "DistilBERT", "MPNet", "GPT-2", "Llama"))


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
