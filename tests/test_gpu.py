"""A model on a CUDA device: its passes run there, its numbers are transformers' eager ones on the device, and
its weights and the work done there are bounded by the device's memory. Skipped where torch sees no CUDA device."""

import pytest
import torch
from fastapi.testclient import TestClient

from app.engine import names
from app.engine.choices import Placement
from app.engine.engine import Engine
from app.engine.model import ModelTooLarge, load_model
from app.main import create_app
from app.serving.gate import PassGate
from app.serving.lab import Lab
from app.serving.memory import MemoryTooLarge
from tests.conftest import run_async, spec_store
from tests.families import build
from tests.float32 import largest, pass_terms, tolerance
from tests.test_dtypes import (
    OTHER,
    TEXT,
    asked_of,
    assert_same_patches,
    assert_same_scoreboards,
    bfloat16_shards,
    eager,
    parameters,
    run_ids,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# bfloat16's spacing at 1 (2⁻⁷) halved: the weights computed on the CPU from the device's q and k may round
# the other way from the device's own kernels, by at most half a unit in the last place.
BFLOAT16_ROUNDING = 2**-8


@pytest.fixture(scope="module", params=["llama", "qwen3", "modernbert"])
def sharded(request, tmp_path_factory):
    return bfloat16_shards(request.param, tmp_path_factory.mktemp(request.param))


def test_auto_reads_the_checkpoint_s_own_dtype_on_the_first_gpu(sharded):
    loaded = load_model(sharded)
    assert (loaded.dtype, str(loaded.device)) == ("bfloat16", "cuda:0")
    assert all(weight.device.type == "cuda" for weight in loaded.model.parameters())


def test_a_run_on_the_gpu_is_its_eager_pass_on_the_device(sharded):
    loaded = load_model(sharded, placement=Placement(dtype="bfloat16", device="cuda"))
    engine = Engine(loaded, 1000)
    run = engine.compute(engine.spec(TEXT))
    assert all(values.device.type == "cpu" for values in run.activations.values())  # brought back once
    theirs = eager(sharded, torch.bfloat16, run_ids(run).cuda(), device="cuda")
    for layer in range(run.n_layers - 1):
        # bit for bit: same shapes (the lab's lone pass and transformers' own on the device)
        assert torch.equal(run.activations[names.block(layer, "output")], theirs.hidden_states[layer + 1][0].cpu())
    for layer in range(run.n_layers):
        mine, device = run.weights(layer).float(), theirs.attentions[layer][0].float().cpu()
        assert torch.allclose(mine, device, rtol=BFLOAT16_ROUNDING, atol=BFLOAT16_ROUNDING), layer


def test_a_model_past_the_device_s_free_memory_is_refused(sharded, monkeypatch):
    free = parameters(sharded) * 2 - 1  # a byte short of its bfloat16 weights
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, free))
    with pytest.raises(ModelTooLarge, match="cuda:0's free memory"):
        load_model(sharded, placement=Placement(dtype="bfloat16", device="cuda"))


def test_the_gpus_budget_is_its_free_memory_and_bounds_the_work_done_there(sharded, tmp_path):
    """Work on a model on the GPU takes its peak from the device's own budget (ATTENTION_LAB_MAX_DEVICE_BYTES,
    by default its free memory less an eighth), apart from the host's."""
    loaded = load_model(sharded, placement=Placement(dtype="bfloat16", device="cuda"))
    free = torch.cuda.mem_get_info(loaded.device)[0]
    lab = Lab(loaded, spec_store(tmp_path), PassGate(1, 64, 4, 30), max_chars=10_000, max_runs=8, max_cache_bytes=10**9)
    engine = lab.models.loaded(lab.models.default)
    assert abs(lab.works.device_budget(engine).max_bytes - free * 7 // 8) < free // 100
    long = engine.spec("word " * 150)
    small = Lab(
        loaded,
        spec_store(tmp_path / "small"),
        PassGate(1, 64, 4, 30),
        max_chars=10_000,
        max_runs=8,
        max_cache_bytes=10**9,
        max_device_bytes=engine.footprint.pass_bytes([engine.length(long)]),
    )
    with pytest.raises(MemoryTooLarge, match="ATTENTION_LAB_MAX_DEVICE_BYTES"):
        run_async(small.serve_spec(long))
    run = run_async(lab.serve_spec(long))
    assert run.activations[names.attn(0, "q")].device.type == "cpu"
    assert lab.works.device_budget(engine).granted == 0


MEASURE_FAMILIES = ["llama", "embeddinggemma"]  # a decoder with RoPE, an encoder with Dense steps after its pooling
MEASURE_DTYPES = ["float32", "bfloat16"]  # computed on the model itself, and on its float32 copy


@pytest.fixture(scope="module", params=[(family, dtype) for family in MEASURE_FAMILIES for dtype in MEASURE_DTYPES])
def gpu_and_cpu(request, tmp_path_factory):
    """One folder served by two labs in the same dtype, on cuda:0 and on the CPU. A bfloat16 lab computes the
    measures on its float32 copy, made on its own device."""
    family, dtype = request.param
    folder = build(family, tmp_path_factory.mktemp(family))
    gpu, cpu = (load_model(folder, placement=Placement(dtype=dtype, device=device)) for device in ("cuda:0", "cpu"))
    assert str(gpu.device) == "cuda:0"
    with TestClient(create_app(gpu)) as gpu_client, TestClient(create_app(cpu)) as cpu_client:
        yield gpu, gpu_client, cpu_client


def both(gpu_and_cpu, path: str, ask: dict) -> tuple[dict, dict]:
    _, gpu_client, cpu_client = gpu_and_cpu
    answers = [client.post(path, json=ask) for client in (gpu_client, cpu_client)]
    assert [answer.status_code for answer in answers] == [200, 200], [answer.text for answer in answers]
    return answers[0].json(), answers[1].json()


@pytest.mark.parametrize("method", ["integrated_gradients", "gradient_x_input"])
def test_attribution_on_the_gpu_is_the_cpu_s_within_float32_rounding(gpu_and_cpu, method):
    """Its inputs, its baseline and the Dense steps' weights are made on the device, its answer brought back."""
    loaded = gpu_and_cpu[0]
    ask = {"text": TEXT, "method": method, "steps": 16, **asked_of(loaded)}
    ours, theirs = both(gpu_and_cpu, "/api/attribution", ask)
    assert ours["target"] == theirs["target"] and ours["computed_in"] == theirs["computed_in"] == "float32"
    atol = tolerance(2 * pass_terms(loaded.model.config), largest(theirs["attributions"]))
    assert torch.allclose(torch.tensor(ours["attributions"]), torch.tensor(theirs["attributions"]), rtol=0, atol=atol)
    for number in ("output", "baseline_output"):
        assert ours[number] == pytest.approx(theirs[number], abs=tolerance(pass_terms(loaded.model.config)))


@pytest.mark.parametrize(
    "patch", [{"site": "head", "sweep": "blocks_heads"}, {"site": "resid_pre", "sweep": "blocks_positions"}]
)
def test_patching_on_the_gpu_is_the_cpu_s_within_float32_rounding(gpu_and_cpu, patch):
    loaded = gpu_and_cpu[0]
    ask = {"text": TEXT, "source": "The dog sat on the rug.", "align": "end", **patch}
    ours, theirs = both(gpu_and_cpu, "/api/patch", ask)
    assert ours["target"] == theirs["target"] and ours["computed_in"] == theirs["computed_in"] == "float32"
    assert_same_patches(loaded.model.config, ours, theirs)


def test_the_scoreboard_on_the_gpu_is_the_cpu_s_within_float32_rounding(gpu_and_cpu):
    """F, each removal's effect and its first-order term: its zeros at each head's context are made on the
    device, its gradients and effects brought back."""
    loaded = gpu_and_cpu[0]
    ask = {"text": TEXT, "query": 6, **({} if loaded.family.decoder else {"other": OTHER})}
    ours, theirs = both(gpu_and_cpu, "/api/scoreboard", ask)
    assert_same_scoreboards(loaded.model.config, ours, theirs)
