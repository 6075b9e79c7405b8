"""A model in the dtype and on the device it was chosen for (app.engine.placement): the settings that choose
them, checkpoints saved in bfloat16 and sharded, and the lab's numbers against transformers' own eager pass in
the same dtype."""

import copy
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from app.engine import measures, names
from app.engine.attribution import attribution_job
from app.engine.choices import Placement, PlacementError, split_choice
from app.engine.engine import Engine
from app.engine.model import ModelTooLarge, adopt, load_model, upcast
from app.main import create_app
from app.serving.models import Models
from app.settings import SettingsError, get_settings
from app.web.encoding import decode_attention
from tests.families import POSITIONS, build
from tests.float32 import largest, pass_terms, tolerance

ROOT = Path(__file__).resolve().parents[1]


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
    return AutoModelForCausalLM if config.architectures[0].endswith(("ForCausalLM", "LMHeadModel")) else AutoModel


def bfloat16_shards(family: str, folder: Path) -> Path:
    """A tiny model of the family saved as today's checkpoints come: bfloat16, in shards with their index."""
    build(family, folder)
    model = model_class(folder).from_pretrained(folder, dtype=torch.float32)
    (folder / "model.safetensors").unlink()
    model.to(torch.bfloat16).save_pretrained(folder, max_shard_size=SHARD)
    return folder


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Callable[[str], Path]:
    """A family's bfloat16 sharded checkpoint, built once for the module: the tests read it and never change it
    (one that deletes a folder deletes its own copy)."""

    @functools.cache
    def of(family: str) -> Path:
        return bfloat16_shards(family, tmp_path_factory.mktemp(family))

    return of


@pytest.fixture(scope="module", params=CHECKPOINT_FAMILIES)
def sharded(request, shards) -> tuple[str, Path]:
    return request.param, shards(request.param)


def eager(folder: Path, dtype: torch.dtype, input_ids: torch.Tensor, device: str = "cpu"):
    """transformers' own eager pass of the folder in `dtype` on `device`: its weights and hidden states."""
    model = model_class(folder).from_pretrained(folder, dtype=dtype, attn_implementation="eager").to(device).eval()
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
    run = Engine(loaded, 1000).compute(Engine(loaded, 1000).spec(TEXT))
    theirs = eager(folder, dtype, run_ids(run))
    for layer in range(run.n_layers):
        weights = run.weights(layer)
        assert weights.dtype == dtype
        # bit for bit: same shapes (the lab's lone pass and transformers' own, in the same dtype)
        assert torch.equal(weights, theirs.attentions[layer][0]), (family, layer)
        # bit for bit: same shapes (as above)
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
    run = Engine(loaded, 1000).compute(Engine(loaded, 1000).spec(TEXT))
    got = client.get(f"/api/runs/{run_id}/attention", params={"dtype": "float32"})
    assert got.status_code == 200
    sent = torch.from_numpy(decode_attention(got.content, got.headers).copy())
    # bit for bit: read back (the served run's numbers, sent as float32)
    assert torch.equal(sent, torch.stack([run.weights(layer) for layer in range(run.n_layers)]).float())
    head = client.get(f"/api/runs/{run_id}/layers/1/heads/0").json()
    # bit for bit: read back
    assert torch.equal(torch.tensor(head["q"]), run.activations[names.attn(1, "q")][0].float())
    for path in ("layers/1", "embeddings", "tokens/2", "head-stats", "tokens/2/rollout", "pooled"):
        assert client.get(f"/api/runs/{run_id}/{path}").status_code == 200, path
    if loaded.has_lm_head:
        assert client.get(f"/api/runs/{run_id}/tokens/2/next").status_code == 200


def test_the_attention_answer_says_what_each_measure_was_computed_in(bfloat16_client, client):
    """The weights are the model's bfloat16 numbers; ALTI and the norm measure are computed in float32 from them
    (X-Attention-Computed-In, and the same in analyze's embedded first view). A float32 model says float32."""
    _, _, half = bfloat16_client
    for lab, weights_in in ((half, "bfloat16"), (client, "float32")):
        view = {"dtype": "float32", "layer": 0, "head": 0}
        answer = lab.post("/api/analyze", json={"text": TEXT, "attention": view}).json()
        assert answer["attention"]["computed_in"] == weights_in
        for measure, computed_in in (("weights", weights_in), ("norm", "float32"), ("alti", "float32")):
            got = lab.get(f"/api/runs/{answer['run_id']}/attention", params={"measure": measure, "layer": 0})
            assert got.headers["X-Attention-Computed-In"] == computed_in, measure


def parameters(folder: Path) -> int:
    return sum(weight.numel() for weight in model_class(folder).from_pretrained(folder).parameters())


def test_auto_reads_bfloat16_on_the_cpu_where_float32_would_not_fit_the_budget(sharded):
    _, folder = sharded
    count = parameters(folder)
    assert load_model(folder, placement=Placement(host_budget_bytes=count * 4)).dtype == "float32"
    assert load_model(folder, placement=Placement(host_budget_bytes=count * 3)).dtype == "bfloat16"


def test_a_model_whose_weights_pass_the_budget_is_refused_with_its_size_and_the_budget(sharded):
    _, folder = sharded
    count = parameters(folder)
    with pytest.raises(ModelTooLarge) as refused:
        load_model(folder, placement=Placement(dtype="float32", host_budget_bytes=count * 3))
    size, budget = f"{count * 4 / 1024**3:.2f} GiB", f"{count * 3 / 1024**3:.2f} GiB"
    assert str(refused.value) == (
        f"model folder {folder}: its {count:,} weights take {size} in float32, past the host's memory budget, "
        f"ATTENTION_LAB_MAX_STORE_BYTES, {budget}"
    )


def test_a_listed_model_reads_in_the_dtype_it_chooses_and_is_named_with_it(sharded, tmp_path):
    _, folder = sharded
    default = load_model(folder, placement=Placement(dtype="float32"))
    models = Models(default, [f"{folder}?dtype=bfloat16"], 1000, None, 3, placement=Placement(dtype="float32"))
    assert models.names == [folder.name, f"{folder.name}?dtype=bfloat16"]
    assert [models.info(name)["dtype"] for name in models.names] == ["float32", "bfloat16"]


# Llama-3.2-1B's kind of shape at half its width (head_dim 64, four query heads to a K/V head, a tied embedding), two
# blocks and a quarter of its vocabulary: 64 M weights, 256 MB in float32. The claim is a ratio of memories, the
# same at any size where the weights are most of what the process grows by: here about 93 % in float32 (18 MB
# beside them), as for the 1B shape's 189 M weights, which took twice the time to build, save and read.
LLAMA = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "vocab_size": 32_768,
    "tie_word_embeddings": True,
}
RSS = """
import gc, sys
from app.engine.model import load_model
from app.engine.choices import Placement

def status(field):
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith(field))

held, peak = status("VmRSS"), status("VmHWM")
loaded = load_model(sys.argv[1], placement=Placement(dtype=sys.argv[2]))
gc.collect()
print(status("VmRSS") - held, status("VmHWM") - peak)
"""


def test_a_sharded_llama_in_bfloat16_takes_about_half_the_memory_of_float32(tmp_path):
    """The RSS a fresh process holds once a bfloat16 sharded checkpoint is loaded, above what it held after its
    imports, read in float32 and in bfloat16: about half. The peak while loading is given too: a bfloat16 read
    maps the shards' pages as the model's own, a float32 one holds them beside its converted copies until it
    ends (about 1.5 times float32's weights). The two reads are two processes side by side: each measures its
    own RSS, and their imports take one core each."""
    folder = tmp_path / "llama-shape"
    build("llama", folder)  # its tokenizer
    (folder / "model.safetensors").unlink()
    config = LlamaConfig(**LLAMA, max_position_embeddings=POSITIONS, bos_token_id=0, eos_token_id=1)
    AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).save_pretrained(folder, max_shard_size="50MB")
    assert (folder / "model.safetensors.index.json").exists()
    weights = parameters_of(config)
    reads = {
        dtype: subprocess.Popen(
            [sys.executable, "-c", RSS, str(folder), dtype], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for dtype in ("float32", "bfloat16")
    }
    grown = {}
    for dtype, read in reads.items():
        out, _ = read.communicate(timeout=300)
        assert read.returncode == 0, dtype
        grown[dtype] = [int(value) for value in out.split()[-2:]]  # held, peak
    print(f"{weights:,} weights; RSS grown by (held, peak): {grown}")
    assert grown["float32"][0] >= weights * 4
    assert 0.4 <= grown["bfloat16"][0] / grown["float32"][0] <= 0.65, grown


def parameters_of(config) -> int:
    with torch.device("meta"):
        return sum(weight.numel() for weight in AutoModelForCausalLM.from_config(config).parameters())


def upcast_copy(run, model):
    """The run as a float32 pass would hold the bfloat16 one's numbers: every activation and every block of
    weights upcast (exactly), beside a float32 copy of the model."""
    activations = {name: values.float() for name, values in run.activations.items()}
    for layer in range(run.n_layers):
        activations[names.attn(layer, "weights")] = run.weights(layer).float()
    return replace(run, activations=activations), copy.deepcopy(model).float()


def test_alti_of_a_bfloat16_run_is_its_float32_computation_on_the_upcast_numbers(sharded):
    _, folder = sharded
    loaded = load_model(folder, placement=Placement(dtype="bfloat16"))
    run = Engine(loaded, 1000).compute(Engine(loaded, 1000).spec(TEXT))
    upcast, float32_model = upcast_copy(run, loaded.model)
    for layer in range(run.n_layers):
        ours = [piece() for piece in measures.alti_slices(run, loaded.model, layer)][-1]
        theirs = [piece() for piece in measures.alti_slices(upcast, float32_model, layer)][-1]
        assert ours.dtype == torch.float32
        assert torch.equal(ours, theirs), layer  # bit for bit: same shapes (one computation, the same numbers)
        # bit for bit: same shapes (as above)
        assert torch.equal(measures.norm(run, loaded.model, layer), measures.norm(upcast, float32_model, layer))


OTHER = "A dog lay on the rug."
UPCAST_FAMILIES = ["llama", "modernbert"]  # a decoder and an encoder


def float32_of(folder: Path, into: Path) -> Path:
    """The bfloat16 checkpoint's weights upcast (model.float()) and saved as a float32 checkpoint of their own,
    beside the same tokenizer: a model the lab reads in float32, for the independent float32 computation."""
    shutil.copytree(folder, into, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    model_class(folder).from_pretrained(folder, dtype=torch.bfloat16).float().save_pretrained(into)
    return into


@pytest.fixture(scope="module", params=UPCAST_FAMILIES)
def half_and_float32(request, shards, tmp_path_factory):
    """A lab serving the bfloat16 checkpoint in bfloat16, and one serving its upcast weights in float32."""
    family = request.param
    folder = shards(family)
    upcast = float32_of(folder, tmp_path_factory.mktemp(f"{family}-float32") / family)
    half = load_model(folder, placement=Placement(dtype="bfloat16"))
    full = load_model(upcast, placement=Placement(dtype="float32"))
    with TestClient(create_app(half)) as half_client, TestClient(create_app(full)) as full_client:
        yield half, half_client, full_client


def asked_of(loaded) -> dict:
    """What a measure's output is: a decoder's next-token logit, an encoder's similarity to OTHER."""
    return {"target": "next_token"} if loaded.family.decoder else {"other": OTHER}


@pytest.mark.parametrize("method", ["integrated_gradients", "gradient_x_input"])
def test_attribution_of_a_bfloat16_model_is_the_float32_computation_on_its_upcast_weights(half_and_float32, method):
    """Through the API: the bfloat16 model's attributions are those of the float32 lab reading its weights
    upcast, within float32's rounding of a pass forward and back (tests.float32), and say so; computed in
    bfloat16 they are further apart than that."""
    half, half_client, full_client = half_and_float32
    ask = {"text": TEXT, "method": method, "steps": 16, **asked_of(half)}
    ours = half_client.post("/api/attribution", json=ask).json()
    theirs = full_client.post("/api/attribution", json=ask).json()
    assert (ours["computed_in"], ours["model_dtype"]) == ("float32", "bfloat16")
    assert (theirs["computed_in"], theirs["model_dtype"]) == ("float32", "float32")
    assert ours["target"] == theirs["target"]
    atol = tolerance(2 * pass_terms(half.model.config), largest(theirs["attributions"]))
    assert torch.allclose(torch.tensor(ours["attributions"]), torch.tensor(theirs["attributions"]), rtol=0, atol=atol)
    for number in ("output", "baseline_output"):
        assert ours[number] == pytest.approx(theirs[number], abs=tolerance(pass_terms(half.model.config)))
    engine = Engine(half, 1000)
    in_bfloat16 = [piece() for piece in attribution_job(engine, **ask)][-1]
    assert in_bfloat16["computed_in"] == "bfloat16"
    assert (in_bfloat16["attributions"].float() - torch.tensor(theirs["attributions"])).abs().max() > atol


@pytest.mark.parametrize(
    "patch", [{"site": "head", "sweep": "blocks_heads"}, {"site": "resid_pre", "sweep": "blocks_positions"}]
)
def test_patching_a_bfloat16_model_is_the_float32_computation_on_its_upcast_weights(half_and_float32, patch):
    half, half_client, full_client = half_and_float32
    ask = {"text": TEXT, "source": "The dog sat on the rug.", "align": "end", **patch}
    ours = half_client.post("/api/patch", json=ask).json()
    theirs = full_client.post("/api/patch", json=ask).json()
    assert (ours["computed_in"], ours["model_dtype"], theirs["model_dtype"]) == ("float32", "bfloat16", "float32")
    assert ours["target"] == theirs["target"]
    assert_same_patches(half.model.config, ours, theirs)


def assert_same_patches(config, ours: dict, theirs: dict) -> None:
    """Two patching answers' effects (A, B and every cell, each value and its share of B − A) agree within
    float32's rounding of a pass forward."""
    effects = lambda answer: [answer["a"], answer["b"], *answer["cells"]]  # noqa: E731
    values = [
        [effect[key] for effect in effects(answer) for key in ("value", "to_a") if effect.get(key) is not None]
        for answer in (ours, theirs)
    ]
    atol = tolerance(pass_terms(config), largest(values[1]))
    assert torch.allclose(torch.tensor(values[0]), torch.tensor(values[1]), rtol=0, atol=atol)


def test_the_scoreboard_of_a_bfloat16_model_is_the_float32_computation_on_its_upcast_weights(half_and_float32):
    """F, each removal's effect and its first-order term are the float32 lab's on the upcast weights (its own
    pass's contributions taken out), within float32's rounding: F and an effect a pass forward (an effect the
    difference of two), a first-order term a pass forward and back. The weights account is the bfloat16 run's."""
    half, half_client, full_client = half_and_float32
    ask = {"text": TEXT, "query": 6, **({} if half.family.decoder else {"other": OTHER})}
    ours = half_client.post("/api/scoreboard", json=ask).json()
    theirs = full_client.post("/api/scoreboard", json=ask).json()
    assert (ours["computed_in"], ours["model_dtype"], theirs["model_dtype"]) == ("float32", "bfloat16", "float32")
    assert_same_scoreboards(half.model.config, ours, theirs)
    run = Engine(half, 1000).compute(Engine(half, 1000).spec(TEXT))
    weights = [run.weights(head["layer"])[head["head"], 6, ours["keys"]].double() for head in ours["heads"]]
    assert all(  # bit for bit: read back (the run's weights as the scoreboard sent them)
        torch.equal(torch.tensor(head["values"]["weights"]), w) for head, w in zip(ours["heads"], weights, strict=True)
    )


def assert_same_scoreboards(config, ours: dict, theirs: dict) -> None:
    """Two scoreboards' F, each removal's effect and its first-order term agree within float32's rounding: F and
    an effect a pass forward (an effect the difference of two), a first-order term a pass forward and back."""
    assert ours["target"]["kind"] == theirs["target"]["kind"] and ours["keys"] == theirs["keys"]
    value = theirs["target"]["value"]
    assert ours["target"]["value"] == pytest.approx(value, abs=tolerance(pass_terms(config), abs(value)))
    for mine, other in zip(ours["heads"], theirs["heads"], strict=True):
        for account, terms in (("intervention", pass_terms(config)), ("gradient", 2 * pass_terms(config))):
            expected = torch.tensor(other["values"][account], dtype=torch.float64)
            atol = 2 * tolerance(terms, max(abs(value), largest(expected)))
            assert torch.allclose(torch.tensor(mine["values"][account], dtype=torch.float64), expected, atol=atol)


@pytest.mark.parametrize("family", [*CHECKPOINT_FAMILIES, "gpt2"])  # GPT-2: an LM head tied to its embedding
def test_the_float32_copy_is_the_folder_read_again_and_upcast_bit_for_bit(family, shards):
    """upcast builds its copy from the served model itself: the same weights and buffers (RoPE's inv_freq, not in
    the state_dict) as the folder read again in bfloat16 and upcast, the same pass, and its config its own."""
    folder = shards(family)
    loaded = load_model(folder, placement=Placement(dtype="bfloat16"))
    ours = upcast(loaded)
    read_again = type(loaded.model).from_pretrained(folder, attn_implementation="eager", dtype=torch.bfloat16)
    theirs = read_again.float()
    for own, read in (
        (ours.state_dict(), theirs.state_dict()),
        (dict(ours.named_buffers()), dict(theirs.named_buffers())),
    ):
        assert own.keys() == read.keys()
        # bit for bit: no rounding (bfloat16 weights upcast to float32 exactly)
        assert all(own[name].dtype == torch.float32 and torch.equal(own[name], read[name]) for name in own)
    if family == "gpt2":
        for model in (ours, theirs):
            assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()
    assert (ours.training, ours.config._attn_implementation) == (False, "eager")
    assert ours.config is not loaded.model.config
    ids = torch.tensor([[1, 5, 9, 3, 7, 2]])
    with torch.inference_mode():
        mine, read = (
            model(input_ids=ids, output_hidden_states=True, output_attentions=True) for model in (ours, theirs)
        )
    # bit for bit: same shapes (one model class, the same weights, the same input)
    assert all(torch.equal(a, b) for a, b in zip(mine.hidden_states, read.hidden_states, strict=True))
    # bit for bit: same shapes (as above)
    assert all(torch.equal(a, b) for a, b in zip(mine.attentions, read.attentions, strict=True))


@pytest.mark.parametrize("method", ["integrated_gradients", "gradient_x_input"])
def test_a_bfloat16_model_adopted_without_a_folder_computes_on_its_float32_copy(sharded, method, tmp_path):
    """A model object whose folder is gone (a notebook's): its attributions are those of the float32 model
    built from its upcast weights, bit for bit, where reading its folder again failed partway."""
    family, folder = sharded
    gone = shutil.copytree(folder, tmp_path / family)
    model = model_class(gone).from_pretrained(gone, dtype=torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(gone)
    shutil.rmtree(gone)
    half = adopt(model, tokenizer)
    full = adopt(copy.deepcopy(model).float(), tokenizer)
    ask = {"text": TEXT, "method": method, "steps": 16, **asked_of(half)}
    with TestClient(create_app(half)) as half_client, TestClient(create_app(full)) as full_client:
        ours = half_client.post("/api/attribution", json=ask)
        theirs = full_client.post("/api/attribution", json=ask)
    assert ours.status_code == 200, ours.text
    ours, theirs = ours.json(), theirs.json()
    assert (ours["computed_in"], ours["model_dtype"], theirs["model_dtype"]) == ("float32", "bfloat16", "float32")
    assert (ours["target"], ours["attributions"], ours["output"]) == (
        theirs["target"],
        theirs["attributions"],
        theirs["output"],
    )
