"""A model in the dtype and on the device it was chosen for (app.engine.placement): the settings that choose
them, checkpoints saved in bfloat16 and sharded, and the lab's numbers against transformers' own eager pass in
the same dtype."""

import json
import os
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from app.engine import names
from app.engine.model import load_model
from app.engine.placement import Placement, PlacementError, split_choice
from app.engine.runs import Engine
from app.main import create_app
from app.settings import SettingsError, get_settings
from app.web.encoding import decode_attention
from tests.families import build


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("org/name", ("org/name", {})),
        ("org/name@v1?dtype=bfloat16", ("org/name@v1", {"dtype": "bfloat16"})),
        ("/models/llama?device=cuda:1&dtype=float16", ("/models/llama", {"device": "cuda:1", "dtype": "float16"})),
    ],
)
def test_a_model_reference_may_choose_its_dtype_and_device(reference, expected):
    assert split_choice(reference) == expected


@pytest.mark.parametrize("reference", ["a?dtype=int8", "a?device=gpu", "a?colour=red", "a?dtype"])
def test_a_model_reference_choosing_what_it_may_not_is_refused(reference):
    with pytest.raises(PlacementError):
        split_choice(reference)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("DTYPE", "float64", "ATTENTION_LAB_DTYPE=float64: dtype 'float64': valid: auto, float32, bfloat16, float16"),
        ("DEVICE", "gpu", "ATTENTION_LAB_DEVICE=gpu: device 'gpu': valid: auto, cpu, cuda, cuda:N, mps"),
        (
            "MODELS",
            "a,b?dtype=int8",
            "ATTENTION_LAB_MODELS=a,b?dtype=int8: dtype 'int8': valid: auto, float32, bfloat16, float16",
        ),
        (
            "MODEL_PATH",
            "a?device=tpu",
            "ATTENTION_LAB_MODEL_PATH=a?device=tpu: device 'tpu': valid: auto, cpu, cuda, cuda:N, mps",
        ),
    ],
)
def test_a_bad_dtype_or_device_stops_the_lab_in_one_line(monkeypatch, name, value, expected):
    monkeypatch.setitem(os.environ, f"ATTENTION_LAB_{name}", value)
    get_settings.cache_clear()
    try:
        with pytest.raises(SettingsError) as error:
            get_settings()
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert str(error.value) == f"bad setting {expected}"


def test_dtype_and_device_are_auto_by_default():
    settings = get_settings()
    assert (settings.dtype, settings.device) == ("auto", "auto")


SHARD = "40KB"  # a tiny model's bfloat16 weights in several shards, as a big checkpoint comes
TEXT = "The cat sat on the mat."
CHECKPOINT_FAMILIES = ["llama", "qwen3", "modernbert"]


def model_class(folder: Path):
    config = AutoConfig.from_pretrained(folder)
    return AutoModelForCausalLM if config.architectures[0].endswith("ForCausalLM") else AutoModel


def bfloat16_shards(family: str, folder: Path) -> Path:
    """A tiny model of the family saved as today's checkpoints come: bfloat16, in shards with their index."""
    build(family, folder)
    model = model_class(folder).from_pretrained(folder, dtype=torch.float32)
    (folder / "model.safetensors").unlink()
    model.to(torch.bfloat16).save_pretrained(folder, max_shard_size=SHARD)
    return folder


@pytest.fixture(scope="module", params=CHECKPOINT_FAMILIES)
def sharded(request, tmp_path_factory) -> tuple[str, Path]:
    return request.param, bfloat16_shards(request.param, tmp_path_factory.mktemp(request.param))


def eager(folder: Path, dtype: torch.dtype, input_ids: torch.Tensor):
    """transformers' own eager pass of the folder in `dtype`: its weights and hidden states."""
    model = model_class(folder).from_pretrained(folder, dtype=dtype, attn_implementation="eager").eval()
    with torch.inference_mode():
        return model(input_ids=input_ids[None], output_attentions=True, output_hidden_states=True)


def test_the_checkpoint_is_bfloat16_in_several_shards_with_an_index(sharded):
    _, folder = sharded
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and all((folder / shard).exists() for shard in shards)
    assert AutoConfig.from_pretrained(folder).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("choice", "dtype"),
    [("auto", torch.float32), ("bfloat16", torch.bfloat16), ("float32", torch.float32), ("float16", torch.float16)],
)
def test_the_lab_s_numbers_are_transformers_eager_ones_in_the_same_dtype(sharded, choice, dtype):
    """Bit for bit: the lab records what the model's modules compute, and computes the weights from q and k
    as the eager attention does (scores in the dtype, softmax in float32, rounded to the dtype). `auto` on the
    CPU with no budget reads float32."""
    family, folder = sharded
    loaded = load_model(folder, placement=Placement(dtype=choice))
    assert loaded.model.dtype == dtype and loaded.dtype == str(dtype).removeprefix("torch.")
    run = Engine(loaded, 1000).run(Engine(loaded, 1000).spec(TEXT))
    theirs = eager(folder, dtype, run_ids(run))
    for layer in range(run.n_layers):
        weights = run.weights(layer)
        assert weights.dtype == dtype
        assert torch.equal(weights, theirs.attentions[layer][0]), (family, layer)
        assert torch.equal(run.activations[names.block(layer, "output")], theirs.hidden_states[layer + 1][0]) or (
            layer == run.n_layers - 1  # a pre-norm model's last hidden state is after its final norm
        )
    for name, values in run.activations.items():
        assert values.dtype == dtype, name


def run_ids(run) -> torch.Tensor:
    return torch.tensor([token.id for token in run.tokens])


@pytest.fixture(scope="module")
def bfloat16_client(sharded):
    family, folder = sharded
    loaded = load_model(folder, placement=Placement(dtype="bfloat16"))
    with TestClient(create_app(loaded)) as client:
        yield family, loaded, client


def test_every_answer_of_a_bfloat16_run_is_its_own_numbers_sent_exactly(bfloat16_client):
    """The model says its dtype, and the views send the bfloat16 numbers as float32, which holds them exactly."""
    family, loaded, client = bfloat16_client
    answer = client.post("/api/analyze", json={"text": TEXT}).json()
    assert (answer["model"]["dtype"], answer["model"]["device"]) == ("bfloat16", "cpu")
    assert client.get("/api/model").json()["dtype"] == "bfloat16"
    run_id = answer["run_id"]
    run = Engine(loaded, 1000).run(Engine(loaded, 1000).spec(TEXT))
    got = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32"})
    assert got.status_code == 200
    sent = torch.from_numpy(decode_attention(got.content, got.headers).copy())
    assert torch.equal(sent, torch.stack([run.weights(layer) for layer in range(run.n_layers)]).float())
    head = client.get(f"/api/runs/{run_id}/layers/1/heads/0").json()
    assert torch.equal(torch.tensor(head["q"]), run.activations[names.attn(1, "q")][0].float())
    for path in ("layers/1", "embeddings", "tokens/2", "head-stats", "tokens/2/rollout", "pooled"):
        assert client.get(f"/api/runs/{run_id}/{path}").status_code == 200, path
    if loaded.has_lm_head:
        assert client.get(f"/api/runs/{run_id}/tokens/2/next").status_code == 200
