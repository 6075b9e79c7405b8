"""POST /api/patch against a patch written here with plain PyTorch hooks on transformers' own models (the
packaged MiniLM, a tiny GPT-2 and a tiny Llama, loaded anew from their folders): B's activation recorded by
one hook, put into A's unbatched pass by another, one pass per cell."""

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoModel, AutoModelForCausalLM

from app.engine.engine import Engine
from app.engine.model import load_model, packaged_model_path
from app.engine.patch_job import patch_job
from app.engine.patch_sites import changing_input
from app.main import create_app
from tests.families import BUILDERS, build
from tests.float32 import largest, pass_tolerance

# Where each site is in each family, typed here from transformers' modeling files: the block (its input is
# the residual stream it reads), W_O (its input holds the heads' contexts, its output the attention's), and
# the FFN's output projection.
MODULES = {
    "bert": ("encoder.layer.{}", "encoder.layer.{}.attention.output.dense", "encoder.layer.{}.output.dense"),
    "gpt2": ("transformer.h.{}", "transformer.h.{}.attn.c_proj", "transformer.h.{}.mlp.c_proj"),
    "llama": ("model.layers.{}", "model.layers.{}.self_attn.o_proj", "model.layers.{}.mlp.down_proj"),
}
SITES = ("resid_pre", "attention_output", "head", "ffn_output")


class Reference:
    """transformers' model and a patch by hand: site -> (module, whether the value is its input)."""

    def __init__(self, model, kind: str, n_heads: int):
        self.model, self.kind, self.n_heads = model.eval(), kind, n_heads
        block, w_o, ffn = MODULES[kind]
        self.where = {
            "resid_pre": (block, True),
            "head": (w_o, True),
            "attention_output": (w_o, False),
            "ffn_output": (ffn, False),
        }

    def _module(self, site, layer):
        path, before = self.where[site]
        return self.model.get_submodule(path.format(layer)), before

    def _hidden(self, args, kwargs):
        return args[0] if args else kwargs["hidden_states"]

    def output(self, ids: list[int], site=None, layer=None, replace=None):
        """The model's output for one input ([1, pos] ids): the next-token logits after the last token, or
        the mean-pooled unit sentence vector; `replace(value) -> value` applied at the site."""
        handle = None
        if site is not None:
            module, before = self._module(site, layer)
            if before:

                def pre(module, args, kwargs):
                    if args:
                        return (replace(args[0]), *args[1:]), kwargs
                    return args, {**kwargs, "hidden_states": replace(kwargs["hidden_states"])}

                handle = module.register_forward_pre_hook(pre, with_kwargs=True)
            else:
                handle = module.register_forward_hook(lambda module, args, out: replace(out))
        try:
            with torch.no_grad():
                ids = torch.tensor([ids])
                if self.kind == "bert":
                    hidden = self.model(input_ids=ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state[0]
                    vector = hidden.mean(0)
                    return vector / vector.norm()
                return self.model(input_ids=ids).logits[0, -1]
        finally:
            if handle is not None:
                handle.remove()

    def recorded(self, ids: list[int], site: str, layer: int) -> torch.Tensor:
        """B's value at the site: [pos, width]."""
        module, before = self._module(site, layer)
        kept = {}

        def keep(module, args, kwargs, out=None):
            kept["value"] = (self._hidden(args, kwargs) if before else out)[0].clone()

        if before:
            handle = module.register_forward_pre_hook(keep, with_kwargs=True)
        else:
            handle = module.register_forward_hook(lambda module, args, out: keep(module, (), {}, out))
        try:
            self.output(ids)
        finally:
            handle.remove()
        return kept["value"]

    def patched(self, a_ids, b_ids, cell) -> torch.Tensor:
        site, layer, head = cell["site"], cell["layer"], cell["head"]
        source = self.recorded(b_ids, site, layer)

        def replace(value):
            value = value.clone()
            if site == "head":
                heads, taken = value.unflatten(-1, (self.n_heads, -1)), source.unflatten(-1, (self.n_heads, -1))
                heads[0, cell["positions"], head] = taken[cell["sources"], head]
                return heads.flatten(-2)
            value[0, cell["positions"]] = source[cell["sources"]]
            return value

        return self.output(a_ids, site, layer, replace)


def effect(reference: Reference, vector, a_vector, b_vector, target) -> dict:
    if reference.kind == "bert":
        return {"value": float(vector @ b_vector), "to_a": float(vector @ a_vector)}
    if target["kind"] == "probability":
        return {"value": float(vector.double().softmax(-1)[target["token_ids"][0]])}
    first, second = target["token_ids"]
    return {"value": float(vector[first] - vector[second])}


@pytest.fixture(scope="module", params=["bert", "gpt2", "llama"])
def setup(request, tmp_path_factory):
    if request.param == "bert":
        loaded, folder = load_model(), packaged_model_path()
        model = AutoModel.from_pretrained(folder)
    else:
        folder = build(request.param, tmp_path_factory.mktemp(request.param))
        loaded = load_model(folder)
        model = AutoModelForCausalLM.from_pretrained(folder)
    with TestClient(create_app(loaded)) as client:
        yield client, Reference(model, request.param, model.config.num_attention_heads)


A, B = "the cat sat on the mat.", "the mat sat on the cat."  # the same tokens in any tokenizer
PAIR = {"text": "the bank of the river", "source": "the bank raised rates", "align": "end"}


def check(reference: Reference, body: dict) -> None:
    a_ids, b_ids = ([token["id"] for token in body[side]] for side in ("a_tokens", "b_tokens"))
    a_vector, b_vector = reference.output(a_ids), reference.output(b_ids)
    found = [(body[side], vector) for side, vector in (("a", a_vector), ("b", b_vector))]
    found += [(cell, reference.patched(a_ids, b_ids, cell)) for cell in body["cells"]]
    for answer, vector in found:
        expected = effect(reference, vector, a_vector, b_vector, body["target"])
        # cosines and probabilities of 1, or a difference of two logits
        atol = pass_tolerance(reference.model.config, max(1.0, 2 * largest(vector.detach())))
        assert {name: answer[name] for name in expected} == pytest.approx(expected, abs=atol), answer


@pytest.mark.parametrize("site", SITES)
def test_one_patch_at_every_position_and_at_one(setup, site):
    client, reference = setup
    one = {"layer": 1, "head": 2 if site == "head" else None}
    for position in (None, 2):
        response = client.post("/api/patch", json={**PAIR, "site": site, "position": position, **one})
        assert response.status_code == 200, response.text
        body = response.json()
        (cell,) = body["cells"]
        n_a, n_b = len(body["a_tokens"]), len(body["b_tokens"])
        assert cell["sources"] == [p - n_a + n_b for p in cell["positions"]]  # paired from the end
        check(reference, body)


@pytest.mark.parametrize("site", ["resid_pre", "attention_output", "ffn_output"])
def test_blocks_by_positions(setup, site):
    client, reference = setup
    body = client.post("/api/patch", json={**PAIR, "site": site, "sweep": "blocks_positions"}).json()
    n_a, n_b = len(body["a_tokens"]), len(body["b_tokens"])
    layers = reference.model.config.num_hidden_layers
    assert len(body["cells"]) == layers * min(n_a, n_b)
    check(reference, body)


def test_blocks_by_heads(setup):
    client, reference = setup
    body = client.post("/api/patch", json={**PAIR, "site": "head", "sweep": "blocks_heads", "position": 1}).json()
    config = reference.model.config
    assert [(cell["layer"], cell["head"]) for cell in body["cells"]] == [
        (layer, head) for layer in range(config.num_hidden_layers) for head in range(config.num_attention_heads)
    ]
    check(reference, body)


def test_chosen_decoder_targets(setup):
    client, reference = setup
    if reference.kind == "bert":
        pytest.skip("an encoder's target is its sentence vector")
    for tokens in ([5, 9], [7]):
        ask = {**PAIR, "site": "resid_pre", "layer": 1, "target_tokens": tokens}
        body = client.post("/api/patch", json=ask).json()
        assert body["target"]["token_ids"] == tokens
        assert body["target"]["kind"] == ("logit_difference" if len(tokens) == 2 else "probability")
        check(reference, body)


def hooks(client) -> list[int]:
    model = client.app.state.lab.engine.loaded.model
    return [len(module._forward_hooks) + len(module._forward_pre_hooks) for module in model.modules()]


def test_patching_b_into_b_changes_nothing(setup):
    client, _ = setup
    before = hooks(client)
    for site in SITES:
        sweep = "blocks_heads" if site == "head" else "blocks_positions"
        body = client.post("/api/patch", json={"text": A, "source": A, "site": site, "sweep": sweep}).json()
        assert {cell["value"] for cell in body["cells"]} == {body["a"]["value"]}, site
    assert hooks(client) == before  # ours all removed (transformers keeps its own)


def test_the_whole_residual_before_block_0_turns_a_into_b(setup):
    client, reference = setup
    body = client.post("/api/patch", json={"text": A, "source": B, "site": "resid_pre", "layer": 0}).json()
    assert len(body["a_tokens"]) == len(body["b_tokens"])
    (cell,) = body["cells"]
    assert abs(body["a"]["value"] - body["b"]["value"]) > 1e-4  # A and B differ
    atol = pass_tolerance(reference.model.config, max(1.0, 2 * abs(body["b"]["value"])))  # B's pass, in a batch
    assert cell["value"] == pytest.approx(body["b"]["value"], abs=atol)
    if reference.kind == "bert":
        assert cell["value"] == pytest.approx(1, abs=atol)


def test_different_lengths_pair_only_where_asked(setup):
    client, _ = setup
    response = client.post("/api/patch", json={**PAIR, "align": None, "site": "resid_pre", "layer": 0})
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "A has" in detail and "B has" in detail and "river" in detail and "align" in detail


def test_bad_requests_are_422(setup):
    client, reference = setup
    layers = reference.model.config.num_hidden_layers
    bad = [
        {"site": "resid_pre"},  # no block and no sweep
        {"site": "resid_pre", "layer": layers},
        {"site": "head", "layer": 0},  # no head
        {"site": "resid_pre", "layer": 0, "head": 0},
        {"site": "resid_pre", "sweep": "blocks_heads"},
        {"site": "resid_pre", "sweep": "blocks_positions", "position": 0},
        {"site": "resid_pre", "layer": 0, "position": 99},
        {"site": "mlp", "layer": 0},
    ]
    for ask in bad:
        assert client.post("/api/patch", json={**PAIR, **ask}).status_code == 422, ask


def test_a_sweep_past_the_bound_is_422(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_LAB_MAX_PATCH_TOKENS", "64")
    from app.settings import get_settings

    get_settings.cache_clear()
    try:
        loaded = load_model(build("gpt2", tmp_path / "gpt2"))
        with TestClient(create_app(loaded)) as client:
            ask = {**PAIR, "site": "head", "sweep": "blocks_heads"}
            response = client.post("/api/patch", json=ask)
            assert response.status_code == 422
            assert "64" in response.json()["detail"]
            assert client.post("/api/patch", json={**PAIR, "site": "head", "layer": 0, "head": 0}).status_code == 200
    finally:
        get_settings.cache_clear()


def test_a_patched_run_is_a_run_with_the_cells_numbers(setup):
    """A cell of a sweep, asked for as a run: its own id, kept in the store, and its output is the cell's."""
    client, reference = setup
    body = client.post("/api/patch", json={**PAIR, "site": "head", "sweep": "blocks_heads"}).json()
    cell = body["cells"][-1]
    patch = {"source": PAIR["source"], **{key: cell[key] for key in ("site", "layer", "head", "positions", "sources")}}
    plain = client.post("/api/analyze", json={"text": PAIR["text"]}).json()
    patched = client.post("/api/analyze", json={"text": PAIR["text"], "patch": patch}).json()
    assert patched["run_id"] != plain["run_id"] and patched["patch"] == patch
    assert client.app.state.lab.specs.get(patched["run_id"]).patch.source == PAIR["source"]
    a_ids = [token["id"] for token in body["a_tokens"]]
    b_ids = [token["id"] for token in body["b_tokens"]]
    if reference.kind == "bert":
        vector = torch.tensor(patched["pooled"]["embedding"])
        atol = pass_tolerance(reference.model.config)
        assert float(vector @ reference.output(b_ids)) == pytest.approx(cell["value"], abs=atol)
    else:
        last = len(a_ids) - 1
        found = client.get(f"/api/runs/{patched['run_id']}/tokens/{last}/next").json()
        expected = reference.patched(a_ids, b_ids, cell)
        best = {row["id"]: row["logit"] for row in found["candidates"]}
        atol = pass_tolerance(reference.model.config, largest(expected.detach()))
        assert best == pytest.approx({token: float(expected[token]) for token in best}, abs=atol)
    other = {**patch, "positions": [99], "sources": [0]}
    assert client.post("/api/analyze", json={"text": PAIR["text"], "patch": other}).status_code == 422


def test_a_long_sweep_takes_several_passes_with_the_same_numbers(setup):
    """Past BATCH_TOKENS a sweep is cut into passes, one turn at the gate each; the cells are the same."""
    client, reference = setup
    if reference.kind != "gpt2":
        pytest.skip("one family is enough for the slicing")
    text = " ".join(["the cat sat on the mat."] * 8)
    engine = client.app.state.lab.engine
    slices = patch_job(engine, text, text.replace("cat", "dog"), "resid_pre", sweep="blocks_positions", align="start")
    assert len(slices) - 1 > 2  # passes, then the answer
    ask = {"text": text, "source": text.replace("cat", "dog"), "site": "resid_pre", "sweep": "blocks_positions"}
    body = client.post("/api/patch", json={**ask, "align": "start"}).json()
    check(reference, body)


@pytest.mark.parametrize("family", sorted(BUILDERS))
def test_every_family_patches_b_into_b_exactly_and_turns_a_into_b(family, tmp_path):
    """Every family the lab reads: its hooks fire at every site (B into B changes nothing, to the bit), and
    the whole residual before block 0 taken from B gives B's output."""
    engine = Engine(load_model(build(family, tmp_path / family)), 1000)

    def answer(text, source, site, **ask):
        *passes, last = patch_job(engine, text, source, site, align="start", **ask)
        for one in passes:
            one()
        return last()

    for site in SITES:
        sweep = "blocks_heads" if site == "head" else "blocks_positions"
        same = answer(A, A, site, sweep=sweep)
        assert {cell["value"] for cell in same["cells"]} == {same["a"]["value"]}, site
    whole = answer(A, B, "resid_pre", layer=0)
    assert len(whole["a_tokens"]) == len(whole["b_tokens"])
    atol = pass_tolerance(engine.loaded.model.config, max(1.0, 2 * abs(whole["b"]["value"])))
    assert whole["cells"][0]["value"] == pytest.approx(whole["b"]["value"], abs=atol)


def test_a_site_modules_input_is_changed_whether_it_comes_by_position_or_by_name():
    """Patching and the scoreboard's removals change a site module's input hidden states: a caller may pass
    them by position or as `hidden_states` (the families tested here all pass them by position)."""
    states, mask = torch.zeros(1, 2, 4), torch.ones(1, 2)
    before = changing_input(lambda hidden: hidden + 1)
    args, kwargs = before(None, (states, mask), {"position_ids": None})
    # bit for bit: same shapes (the same sum)
    assert torch.equal(args[0], states + 1) and args[1] is mask and kwargs == {"position_ids": None}
    args, kwargs = before(None, (), {"hidden_states": states, "attention_mask": mask})
    # bit for bit: same shapes (the same sum)
    assert args == () and torch.equal(kwargs["hidden_states"], states + 1) and kwargs["attention_mask"] is mask
