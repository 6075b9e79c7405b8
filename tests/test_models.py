"""Several models in one lab: the default loaded at start, the others (tiny random GPT-2 and Llama-style
folders) on first use; each run names its model, and a model let go is loaded again when needed."""

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.engine.model import ModelLoadError, load_model
from app.main import create_app
from app.serving.models import Models
from app.settings import Settings, get_settings
from app.web.encoding import decode_attention
from tests.families import build, pegasus
from tests.float32 import largest, pass_tolerance

TEXT = "The cat sat on the mat."


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {name: build(name, tmp_path_factory.mktemp(name) / name) for name in ("gpt2", "llama")}


@pytest.fixture
def client(tiny, folders, monkeypatch):
    monkeypatch.setenv("ATTENTION_LAB_MODELS", ",".join(str(folder) for folder in folders.values()))
    monkeypatch.setenv("ATTENTION_LAB_MAX_LOADED_MODELS", "2")
    get_settings.cache_clear()
    with TestClient(create_app(tiny)) as client:
        yield client
    get_settings.cache_clear()


def test_the_models_setting_takes_commas():
    assert Settings(models=" /a/one, /b/two ,org/name@v1").models == ["/a/one", "/b/two", "org/name@v1"]


def test_other_models_load_on_first_use_and_name_their_runs(client, tiny, folders):
    listed = client.get("/api/models").json()
    assert listed["default"] == tiny.name
    assert [(m["name"], m["loaded"]) for m in listed["models"]] == [
        (tiny.name, True),
        ("gpt2", False),
        ("llama", False),
    ]
    assert client.get("/api/health").json()["models"] == [tiny.name, "gpt2", "llama"]

    default = client.post("/api/analyze", json={"text": TEXT}).json()
    gpt2 = client.post("/api/analyze", json={"text": TEXT, "model": "gpt2"}).json()
    assert gpt2["model"]["family"] == "GPT-2" and default["model"]["family"] == "BERT"
    assert gpt2["run_id"] != default["run_id"] and gpt2["mask"] == "causal"
    assert client.get("/api/models").json()["models"][1]["loaded"] is True
    assert client.get("/api/model", params={"name": "gpt2"}).json()["family"] == "GPT-2"

    got = client.get(f"/api/runs/{gpt2['run_id']}/attention", params={"dtype": "float32"})
    model = load_model(folders["gpt2"]).model
    ids = torch.tensor([[token["id"] for token in gpt2["tokens"]]])
    with torch.no_grad():
        expected = np.stack([a[0].numpy() for a in model(ids, output_attentions=True).attentions])
    atol = pass_tolerance(model.config)
    np.testing.assert_allclose(decode_attention(got.content, got.headers), expected, atol=atol)
    assert client.get(f"/api/runs/{gpt2['run_id']}/tokens/1/next").status_code == 200


def test_a_model_let_go_is_loaded_again_for_its_runs(client, tiny):
    gpt2 = client.post("/api/analyze", json={"text": TEXT, "model": "gpt2"}).json()
    client.post("/api/analyze", json={"text": TEXT, "model": "llama"})  # two loaded at most: GPT-2 goes
    loaded = {m["name"]: m["loaded"] for m in client.get("/api/models").json()["models"]}
    assert loaded == {tiny.name: True, "gpt2": False, "llama": True}
    layer = client.get(f"/api/runs/{gpt2['run_id']}/layers/1")
    assert layer.status_code == 200


def test_an_unknown_model_is_refused_naming_the_served_ones(client, tiny):
    refused = client.post("/api/analyze", json={"text": TEXT, "model": "bert-large"})
    assert refused.status_code == 422
    assert all(name in refused.json()["detail"] for name in (tiny.name, "gpt2", "llama"))
    assert client.get("/api/model", params={"name": "nope"}).status_code == 422


def test_a_bad_or_doubled_folder_stops_the_lab_at_start(tiny, folders, tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        Models(tiny, [tmp_path / "missing"], 100, None, 3)
    with pytest.raises(ModelLoadError, match="two models are named"):
        Models(tiny, [folders["gpt2"], folders["gpt2"]], 100, None, 3)


def test_the_page_offers_a_picker_and_renders_the_model_asked_for(client):
    page = client.get("/", params={"model": "llama"}).text
    assert 'id="model-picker"' in page and '<option value="llama" selected>' in page
    assert "Llama" in page and '<option value="causal">causal</option>' in page
    assert '<option value="bidirectional">' not in page


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_folder_saved_in_half_precision_is_read_in_float32(tmp_path, dtype):
    """Many decoders ship float16 or bfloat16 weights: the lab reads them as float32, and its weights and
    states are transformers' own for the same folder read in float32."""
    from transformers import AutoModelForCausalLM

    folder = build("llama", tmp_path / "half")
    AutoModelForCausalLM.from_pretrained(folder).to(dtype).save_pretrained(folder)
    assert AutoModelForCausalLM.from_pretrained(folder).dtype == dtype  # what transformers keeps by itself
    loaded = load_model(folder)
    assert all(parameter.dtype == torch.float32 for parameter in loaded.model.parameters())
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    ids = loaded.tokenizer(TEXT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        expected = reference(input_ids=ids, output_attentions=True, output_hidden_states=True)
    with TestClient(create_app(loaded)) as client:
        run = client.post("/api/analyze", json={"text": TEXT}).json()
        got = client.get(f"/api/runs/{run['run_id']}/attention", params={"dtype": "float32"})
        assert got.status_code == 200
        weights = decode_attention(got.content, got.headers)
        atol = pass_tolerance(reference.config)
        np.testing.assert_allclose(weights, np.stack([w[0].numpy() for w in expected.attentions]), atol=atol)
        last = expected.hidden_states[-1][0, -1].numpy()  # the last token, after the final norm: "last" pooling
        np.testing.assert_allclose(run["pooled"]["vector"], last, atol=pass_tolerance(reference.config, largest(last)))


def test_a_model_of_one_block_and_one_head_is_named_so(tmp_path, monkeypatch):
    import tests.families

    monkeypatch.setattr(
        tests.families, "SIZE", {**tests.families.SIZE, "num_hidden_layers": 1, "num_attention_heads": 1}
    )
    with TestClient(create_app(load_model(build("bert", tmp_path / "one")))) as client:
        page = client.get("/").text
    assert ">1 block × 1 head<" in page and "mean of 1 head<" in page


def test_a_run_reads_at_most_the_labs_token_limit(tmp_path, monkeypatch):
    """A model of 64 positions behind ATTENTION_LAB_MAX_TOKENS=16: a longer input is cut at 16 tokens, says
    so, and its numbers are transformers' own for those 16 tokens."""
    monkeypatch.setenv("ATTENTION_LAB_MAX_TOKENS", "16")
    get_settings.cache_clear()
    loaded = load_model(build("llama", tmp_path / "long"))
    text = " ".join([TEXT] * 10)
    with TestClient(create_app(loaded)) as client:
        model = client.get("/api/model").json()
        assert (model["max_tokens"], model["max_input_tokens"]) == (64, 16)
        run = client.post("/api/analyze", json={"text": text}).json()
        got = client.get(f"/api/runs/{run['run_id']}/attention", params={"dtype": "float32"})
    get_settings.cache_clear()
    ids = loaded.tokenizer(text)["input_ids"][:16]
    assert run["truncated"] and [token["id"] for token in run["tokens"]] == ids
    with torch.no_grad():
        expected = loaded.model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
    np.testing.assert_allclose(
        decode_attention(got.content, got.headers),
        np.stack([w[0].numpy() for w in expected]),
        atol=pass_tolerance(loaded.model.config),
    )


def test_views_of_a_model_load_nothing(client, tiny):
    """The page and GET /api/model read each model's shape, read once at start: cycling between the models
    (which used to force a load every 0.76 s) loads none."""
    lab = client.app.state.lab
    for _ in range(3):
        for name in ("gpt2", "llama", tiny.name):
            assert client.get("/api/model", params={"name": name}).json()["name"] == name
            assert client.get("/", params={"model": name}).status_code == 200
    assert [name for name in lab.models.names if lab.models.loaded(name)] == [tiny.name]


def test_loads_are_turns_and_one_address_causes_at_most_a_few_an_hour(tiny, folders, tmp_path):
    """A model not loaded is loaded at a turn of the gate, and counted against the address whose request
    needed it: past model_loads_per_hour that address is refused (429), and another is not."""
    from app.serving.gate import Client
    from app.serving.models import TooManyLoads
    from tests.conftest import make_lab, run_async

    lab = make_lab(tiny, tmp_path)
    lab.models = Models(tiny, list(folders.values()), 100, None, 2)
    lab.loads.per_hour = 2
    hog, other = Client("10.0.0.9"), Client("10.0.0.7")

    async def scenario():
        await lab.engine_for("gpt2", hog)
        await lab.engine_for("llama", hog)  # two loaded at most: GPT-2 goes
        await lab.engine_for("llama", hog)  # loaded already: no load
        with pytest.raises(TooManyLoads, match="this address has had 2 models loaded in the last hour"):
            await lab.engine_for("gpt2", hog)
        assert (await lab.engine_for("gpt2", other)).info["family"] == "GPT-2"

    run_async(scenario())
    lab.close()


def test_a_load_takes_the_gate_a_step_at_a_time_and_names_the_same_model(tiny, folders, tmp_path, monkeypatch):
    """A model's load is its weights, then its digest DIGEST_BYTES at a time, each step a turn of the gate (a
    learner waits for one step, not the whole load); the digest does not depend on the steps: the model
    loaded whole has the same one, so its runs keep their ids."""
    from app.engine import model as model_module
    from tests.conftest import make_lab, run_async

    whole = load_model(folders["llama"]).digest
    monkeypatch.setattr(model_module, "DIGEST_BYTES", 16 * 1024)
    lab = make_lab(tiny, tmp_path)
    lab.models = Models(tiny, [folders["llama"]], 100, None, 3)
    turns, admit = [], lab.gate.admit
    monkeypatch.setattr(lab.gate, "admit", lambda *args, **kwargs: turns.append(args) or admit(*args, **kwargs))
    engine = run_async(lab.engine_for("llama"))
    steps = 0
    for step in model_module.load_steps(folders["llama"]):
        step()
        steps += 1
    assert len(turns) == steps > 5  # the folder, the digest's head, its weights 16 KiB at a time, the engine
    assert engine.loaded.digest == whole
    lab.close()


def test_a_listed_model_the_lab_cannot_read_is_refused_when_asked_for(tiny, tmp_path, monkeypatch):
    """A Pegasus folder (an encoder-decoder the lab has no family for): its config reads, so the lab starts; its
    probe pass fails when it is first asked for."""
    folder = pegasus(tmp_path / "pegasus")
    monkeypatch.setenv("ATTENTION_LAB_MODELS", str(folder))
    get_settings.cache_clear()
    with TestClient(create_app(tiny)) as client:
        refused = client.post("/api/analyze", json={"text": TEXT, "model": "pegasus"})
        assert refused.status_code == 422 and "'pegasus' model the lab cannot read" in refused.json()["detail"]
        assert client.post("/api/analyze", json={"text": TEXT}).status_code == 200
    get_settings.cache_clear()
