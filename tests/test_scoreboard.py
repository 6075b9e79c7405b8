"""POST /api/scoreboard against a computation written here on transformers' own models (the packaged MiniLM
and a tiny GPT-2, loaded anew with eager attention): the weights from output_attentions, the value vectors
from a hook on the value projection, norm-weighted attention from the raw W_O, the output F run again with a
key's contribution taken out of W_O's input by a plain forward pre-hook, its gradient by autograd, and
Spearman's ρ by SciPy. ALTI is the attention endpoint's (tested against the paper's formula in
test_measures)."""

import math

import pytest
import torch
from fastapi.testclient import TestClient
from scipy.stats import spearmanr
from transformers import AutoModel, AutoModelForCausalLM

from app.engine.model import load_model, packaged_model_path
from app.main import create_app
from tests.families import build
from tests.float32 import largest, pass_terms, pass_tolerance, tolerance
from tests.test_measures import served

TEXT, OTHER = "the bank of the river", "the bank raised rates"
W_O = {"bert": "encoder.layer.{}.attention.output.dense", "gpt2": "transformer.h.{}.attn.c_proj"}
VALUE = {"bert": "encoder.layer.{}.attention.self.value", "gpt2": "transformer.h.{}.attn.c_attn"}
ACCOUNTS = ("weights", "norm", "alti", "gradient")


class Reference:
    def __init__(self, model, kind: str):
        self.model, self.kind = model.eval(), kind
        self.heads = model.config.num_attention_heads
        self.layers = model.config.num_hidden_layers

    def _w_o(self, layer):
        return self.model.get_submodule(W_O[self.kind].format(layer))

    def _inputs(self, ids):
        ids = torch.tensor([ids])
        return {"input_ids": ids, **({"token_type_ids": torch.zeros_like(ids)} if self.kind == "bert" else {})}

    def _sentence(self, ids):
        vector = self.model(**self._inputs(ids)).last_hidden_state[0].mean(0)  # MiniLM: mean pooling, unit
        return vector / vector.norm()

    def setup(self, ids, other_ids):
        """A's weights [layer][head, query, key] and value vectors [layer][head, pos, d_head], and F's target."""
        values = {}

        def keep(layer):
            def hook(module, args, out):
                width = out.shape[-1] // 3 if self.kind == "gpt2" else 0  # GPT-2's c_attn makes q, k, v at once
                values[layer] = out[0, :, 2 * width :].unflatten(-1, (self.heads, -1)).transpose(0, 1)

            return hook

        handles = [
            self.model.get_submodule(VALUE[self.kind].format(layer)).register_forward_hook(keep(layer))
            for layer in range(self.layers)
        ]
        try:
            with torch.no_grad():
                out = self.model(**self._inputs(ids), output_attentions=True)
        finally:
            for handle in handles:
                handle.remove()
        self.weights = [block[0] for block in out.attentions]
        self.values = [values[layer] for layer in range(self.layers)]
        if self.kind == "bert":
            with torch.no_grad():
                self.other = self._sentence(other_ids)
        else:
            self.token = int(out.logits[0, -1].argmax())

    def output(self, ids, layer=None, edit=None, grad_at=None):
        """F for A, with edit(value) applied at W_O's input of block `layer`; with grad_at, a zero [1, pos,
        width] added at every block's W_O input whose gradients are returned too."""
        handles = []
        if edit is not None:
            hook = lambda module, args: (edit(args[0]),)  # noqa: E731
            handles.append(self._w_o(layer).register_forward_pre_hook(hook))
        for at, zero in enumerate(grad_at or []):
            handles.append(self._w_o(at).register_forward_pre_hook(lambda module, args, zero=zero: (args[0] + zero,)))
        try:
            with torch.enable_grad() if grad_at else torch.no_grad():
                if self.kind == "bert":
                    value = self._sentence(ids) @ self.other
                else:
                    value = self.model(**self._inputs(ids)).logits[0, -1, self.token]
                if grad_at:
                    return float(value.detach()), torch.autograd.grad(value, grad_at)
                return float(value)
        finally:
            for handle in handles:
                handle.remove()

    def removed(self, ids, layer, head, key, queries):
        """F with α_ij v_j taken out of head `head`'s context at each query i."""
        delta = self.weights[layer][head, queries, key, None] * self.values[layer][head, key]  # [query, d_head]

        def edit(value):
            value = value.clone()
            heads = value.unflatten(-1, (self.heads, -1))
            heads[0, queries, head] -= delta
            return heads.flatten(-2)

        return self.output(ids, layer, edit)

    def norm(self, layer, head):
        """‖v_j W_O^h‖ per key, from the raw W_O (a Linear keeps [out, in], GPT-2's Conv1D [in, out])."""
        weight = self._w_o(layer).weight.detach()
        w_o = weight if self.kind == "bert" else weight.T  # [d_model, heads·d_head]
        d_head = w_o.shape[1] // self.heads
        block = w_o[:, head * d_head : (head + 1) * d_head]
        return (self.values[layer][head] @ block.T).norm(dim=-1)


@pytest.fixture(scope="module", params=["bert", "gpt2"])
def setup(request, tmp_path_factory):
    if request.param == "bert":
        loaded, folder, auto = load_model(), packaged_model_path(), AutoModel
    else:
        folder = build("gpt2", tmp_path_factory.mktemp("gpt2"))
        loaded, auto = load_model(folder), AutoModelForCausalLM
    model = auto.from_pretrained(folder, attn_implementation="eager")
    with TestClient(create_app(loaded)) as client:
        yield client, Reference(model, request.param)


def ask(client, reference, **more):
    body = {"text": TEXT, **({"other": OTHER} if reference.kind == "bert" else {}), **more}
    response = client.post("/api/scoreboard", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def rho(a, b):
    found = spearmanr(a, b).statistic
    return None if math.isnan(found) else found


def check(client, reference, body, checked_heads):
    ids = [token["id"] for token in body["tokens"]]
    other_ids = client.post("/api/analyze", json={"text": OTHER}).json()["tokens"] if reference.kind == "bert" else []
    reference.setup(ids, [token["id"] for token in other_ids])
    query, keys = body["query"], body["keys"]
    queries = list(range(len(ids))) if query is None else [query]
    zeros = [
        torch.zeros(
            1, len(ids), reference._w_o(layer).weight.shape[0 if reference.kind == "gpt2" else 1], requires_grad=True
        )
        for layer in range(reference.layers)
    ]
    value, gradients = reference.output(ids, grad_at=zeros)
    config = reference.model.config
    assert body["target"]["value"] == pytest.approx(value, abs=pass_tolerance(config, max(1.0, abs(value))))
    if reference.kind == "gpt2":
        assert body["target"]["token_id"] == reference.token
    alti = served(client, body["run_id"], "alti")
    heads = {(found["layer"], found["head"]): found for found in body["heads"]}
    assert list(heads) == [(layer, head) for layer in range(reference.layers) for head in range(reference.heads)]
    for layer, head in checked_heads:
        found = heads[(layer, head)]["values"]
        alpha = reference.weights[layer][head][queries][:, keys].double()  # [query, key]
        gradient = gradients[layer][0].unflatten(-1, (reference.heads, -1))[queries, head].double()  # [query, d_head]
        contributions = alpha[..., None] * reference.values[layer][head][keys].double()  # [query, key, d_head]
        expected = {
            "weights": alpha.mean(0),
            "norm": (alpha * reference.norm(layer, head)[keys].double()).mean(0),
            "alti": torch.from_numpy(alti[layer, 0][queries][:, keys]).mean(0),
            "gradient": (gradient[:, None] * contributions).sum((0, 2)).abs(),
            "intervention": torch.tensor(
                [abs(value - reference.removed(ids, layer, head, key, queries)) for key in keys]
            ),
        }
        for name, values in expected.items():
            # a gradient is a pass back after the pass forward; an intervention, a difference of two outputs
            terms = pass_terms(config) * (2 if name == "gradient" else 1)
            atol = tolerance(terms, max(1.0, abs(value), largest(values)))
            assert found[name] == pytest.approx(values.tolist(), abs=atol), (layer, head, name)
    for found in body["heads"]:
        values = found["values"]
        for pair in body["pairs"]:
            a, b = pair.split(":")
            assert found["correlations"][pair] == pytest.approx(rho(values[a], values[b]), abs=1e-9)
        for account in ACCOUNTS:
            assert found["agreement"][account] == pytest.approx(rho(values[account], values["intervention"]), abs=1e-9)


def test_one_query_token(setup):
    client, reference = setup
    body = ask(client, reference, query=3)
    assert body["keys"] == (list(range(4)) if reference.kind == "gpt2" else list(range(len(body["tokens"]))))
    check(client, reference, body, [(0, 0), (1, 2), (reference.layers - 1, reference.heads - 1)])


def test_every_query_averaged(setup):
    client, reference = setup
    body = ask(client, reference)
    assert body["query"] is None and body["keys"] == list(range(len(body["tokens"])))
    check(client, reference, body, [(1, 1)])


def test_bad_requests_are_422(setup):
    client, reference = setup
    post = lambda **body: client.post("/api/scoreboard", json={"text": TEXT, **body})  # noqa: E731
    if reference.kind == "bert":
        assert "other" in post().json()["detail"]
    else:
        assert "at least 3" in post(query=1).json()["detail"]  # token 1 of a decoder sees 2 keys
        assert post(other=OTHER).status_code == 422
    assert post(query=99, other=OTHER if reference.kind == "bert" else None).status_code == 422


def test_past_the_bound_is_422(tmp_path, monkeypatch):
    """The bound is on (rows + 1) × tokens, a row per head and key: set here to what one query token 2 costs
    in the tiny GPT-2 (8 heads × 3 keys), so that every query averaged (8 heads × every key) is past it."""
    loaded = load_model(build("gpt2", tmp_path / "gpt2"))
    n = len(loaded.tokenizer(TEXT)["input_ids"])
    bound = (8 * 3 + 1) * n
    monkeypatch.setenv("ATTENTION_LAB_MAX_PATCH_TOKENS", str(bound))
    from app.settings import get_settings

    get_settings.cache_clear()
    try:
        with TestClient(create_app(loaded)) as client:
            response = client.post("/api/scoreboard", json={"text": TEXT})
            assert response.status_code == 422 and f"{bound:,}" in response.json()["detail"]
            assert client.post("/api/scoreboard", json={"text": TEXT, "query": 2}).status_code == 200
    finally:
        get_settings.cache_clear()


def test_effects_under_float32s_resolution_are_run_again_in_float64(client):
    """Query 3 of MiniLM: a key whose true effect is 1e-16 came out of float32 as a few roundings of F (1e-7)
    and was ranked as such. Against transformers' own MiniLM read in float64 (and in float32, the old way):
    the float32 effects of those keys are rounding, their ranks gave a wrong ρ, and the scoreboard now gives
    the exact ρ, saying which keys it ran again."""
    body = client.post("/api/scoreboard", json={"text": TEXT, "other": OTHER, "query": 3}).json()
    assert body["resolution"]["roundings"] == 64 and body["resolution"]["removals"] == 6 * 12 * len(body["keys"])
    other = [token["id"] for token in client.post("/api/analyze", json={"text": OTHER}).json()["tokens"]]
    ids = [token["id"] for token in body["tokens"]]
    exact, rounded = (
        Reference(AutoModel.from_pretrained(packaged_model_path(), attn_implementation="eager", dtype=dtype), "bert")
        for dtype in (torch.float64, torch.float32)
    )
    for reference in (exact, rounded):
        reference.setup(ids, other)
    value = exact.output(ids)
    least = 64 * abs(value) * torch.finfo(torch.float32).eps
    assert body["resolution"]["least_float32_effect"] == pytest.approx(least, rel=1e-6)
    heads = {(found["layer"], found["head"]): found for found in body["heads"]}
    wrong, smallest = 0, math.inf
    for layer, head in [(0, 2), (1, 8)]:
        found = heads[(layer, head)]
        effects = [abs(value - exact.removed(ids, layer, head, key, [3])) for key in body["keys"]]
        float32 = [abs(rounded.output(ids) - rounded.removed(ids, layer, head, key, [3])) for key in body["keys"]]
        tiny = [at for at, effect in enumerate(effects) if effect < least]
        assert tiny and found["float64"] == tiny  # exactly the keys under the resolution were run again
        smallest = min([smallest, *(effects[at] for at in tiny)])
        for at in tiny:
            assert found["values"]["intervention"][at] == pytest.approx(effects[at], abs=1e-12, rel=1e-3)
        for account in ACCOUNTS:
            assert found["agreement"][account] == pytest.approx(rho(found["values"][account], effects), abs=1e-9)
            wrong += abs(rho(found["values"][account], float32) - rho(found["values"][account], effects)) > 0.02
    assert smallest < 1e-12  # far under float32's reach, where one rounding of F is 3e-8
    assert wrong > 0  # float32's effects ranked rounding: some ρ of these heads was off
