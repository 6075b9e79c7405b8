"""A model on a CUDA device: its passes run there, its numbers are transformers' eager ones on the device, and
its weights and the work done there are bounded by the device's memory. Skipped where torch sees no CUDA device."""

import pytest
import torch

from app.engine import names
from app.engine.model import ModelTooLarge, load_model
from app.engine.placement import Placement
from app.engine.runs import Engine
from app.serving.gate import PassGate
from app.serving.lab import Lab
from app.serving.memory import MemoryTooLarge
from tests.conftest import run_async, spec_store
from tests.test_dtypes import TEXT, bfloat16_shards, eager, parameters, run_ids

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
    run = engine.run(engine.spec(TEXT))
    assert all(values.device.type == "cpu" for values in run.activations.values())  # brought back once
    theirs = eager(sharded, torch.bfloat16, run_ids(run).cuda(), device="cuda")
    for layer in range(run.n_layers - 1):
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
    assert abs(lab.device_budget(engine).max_bytes - free * 7 // 8) < free // 100
    long = engine.spec("word " * 150)
    small = Lab(
        loaded,
        spec_store(tmp_path / "small"),
        PassGate(1, 64, 4, 30),
        max_chars=10_000,
        max_runs=8,
        max_cache_bytes=10**9,
        max_device_bytes=engine.pass_bytes([engine.length(long)]),
    )
    with pytest.raises(MemoryTooLarge, match="ATTENTION_LAB_MAX_DEVICE_BYTES"):
        run_async(small.submit(long))
    run = run_async(lab.submit(long))
    assert run.activations[names.attn(0, "q")].device.type == "cpu"
    assert lab.device_budget(engine).granted == 0
