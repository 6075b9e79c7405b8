"""The sentence vector as the model folder defines it: sentence-transformers' modules.json, its modules run in
order after the transformer (Pooling, Dense with its activation, Normalize), and the prompts its
config_sentence_transformers.json offers. A folder without modules.json is pooled by the family's default,
and nothing follows the pooling. Every step is the formula sentence-transformers computes, on one sequence
(no padding), so that the vector is what SentenceTransformer(folder).encode gives."""

import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

# The lab's pooling names, and sentence-transformers' for the same pooling.
POOLINGS = {
    "cls": "cls",
    "mean": "mean",
    "max": "max",
    "last": "lasttoken",
    "mean_sqrt_len": "mean_sqrt_len_tokens",
    "weighted_mean": "weightedmean",
}
# Pooling's config before sentence-transformers 5: one flag per mode.
FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_weightedmean_tokens": "weighted_mean",
    "pooling_mode_lasttoken": "last",
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class PipelineError(ValueError):
    """The folder's sentence-transformers files cannot be read, or hold a module the lab does not run."""


def pool(output: Tensor, strategy: str, skip: int = 0) -> Tensor:
    """One vector for the sentence from the last hidden states [pos, d_model] of one sequence, as
    sentence-transformers' Pooling computes it. `skip`: leading tokens left out (a prompt the folder's Pooling
    excludes, include_prompt false): every strategy but "last" pools the rest, weighted_mean with the
    weights of their positions."""
    if strategy == "last":
        return output[-1]
    skip = min(skip, len(output) - 1)
    kept = output[skip:]
    if strategy == "cls":
        return kept[0]
    if strategy == "max":
        return kept.max(dim=0).values
    if strategy == "mean_sqrt_len":
        return kept.sum(dim=0) / len(kept) ** 0.5
    if strategy == "weighted_mean":
        weights = torch.arange(skip + 1, len(output) + 1, dtype=output.dtype, device=output.device)  # position + 1
        return (kept * weights[:, None]).sum(dim=0) / weights.sum()
    return kept.mean(dim=0)


@dataclass(frozen=True)
class Dense:
    """y = activation(x · Wᵀ + b): sentence-transformers' Dense module."""

    weight: Tensor  # [out_features, in_features]
    bias: Tensor | None  # [out_features]
    activation: str  # the torch.nn module's class path its config names, e.g. torch.nn.modules.activation.Tanh

    def __call__(self, x: Tensor) -> Tensor:
        # A Dense module is float32 (sentence-transformers keeps it apart from the model): a bfloat16 or
        # float16 model's pooled vector is upcast to it, exactly.
        linear = torch.nn.functional.linear(x.to(self.weight.dtype), self.weight, self.bias)
        return torch_activation(self.activation)(linear)

    def to(self, device: torch.device, dtype: torch.dtype | None = None) -> "Dense":
        bias = None if self.bias is None else self.bias.to(device, dtype)
        return Dense(self.weight.to(device, dtype), bias, self.activation)

    @property
    def title(self) -> str:
        out_features, in_features = self.weight.shape
        name = self.activation.rsplit(".", 1)[-1]
        return f"Dense {in_features} → {out_features}" + ("" if name == "Identity" else f", then {name}")


@dataclass(frozen=True)
class Stage:
    module: str  # "Pooling", "Dense" or "Normalize"
    title: str  # as the page writes it: "mean pooling", "Dense 768 → 3072", "L2 normalisation"
    vector: Tensor  # [size]


@dataclass(frozen=True)
class SentencePipeline:
    """What follows the transformer, in the folder's order: "pooling" first, then Dense modules or
    "normalize"."""

    steps: tuple[str | Dense, ...] = ("pooling",)
    pooling: str | None = None  # the folder's own pooling (None: it names none, the family's default holds)
    include_prompt: bool = True  # false: the pooling leaves the prompt's tokens out
    prompts: dict[str, str] = field(default_factory=dict)  # name → the text put before the input
    default_prompt: str | None = None  # the prompt sentence-transformers applies when none is named
    max_seq_length: int | None = None  # the transformer module's: the pooling reads no more tokens
    transformer: str = ""  # the folder of the transformer's files, inside the model's folder

    def stages(self, output: Tensor, strategy: str, skip: int = 0) -> list[Stage]:
        """Each step's vector from the last hidden states [pos, d_model], the pooling by `strategy` (the
        folder's own unless another is asked for) leaving out the first `skip` tokens (pool)."""
        stages = []
        vector = output
        for step in self.steps:
            if step == "pooling":
                vector = pool(output, strategy, skip)
                stages.append(Stage("Pooling", f"{strategy.replace('_', ' ')} pooling", vector))
            elif step == "normalize":
                vector = torch.nn.functional.normalize(vector, p=2, dim=-1)
                stages.append(Stage("Normalize", "L2 normalisation", vector))
            else:
                vector = step(vector)
                stages.append(Stage("Dense", step.title, vector))
        return stages

    def to(self, device: torch.device, dtype: torch.dtype | None = None) -> "SentencePipeline":
        """The pipeline with its Dense weights on `device` (a model's: the steps run on its hidden states where
        they are), in `dtype` where one is given (their own float32 by default)."""
        steps = tuple(step.to(device, dtype) if isinstance(step, Dense) else step for step in self.steps)
        return dataclasses.replace(self, steps=steps)

    def describe(self) -> list[dict]:
        """The steps as data, for the model's digest and for /api/model: what changes the vector."""
        described = []
        for step in self.steps:
            about = dict.fromkeys(("pooling", "include_prompt", "shape", "bias", "activation"))
            if step == "pooling":
                about.update(module="Pooling", pooling=self.pooling, include_prompt=self.include_prompt)
            elif step == "normalize":
                about.update(module="Normalize")
            else:
                shape, bias = list(step.weight.shape), step.bias is not None
                about.update(module="Dense", shape=shape, bias=bias, activation=step.activation)
            described.append(about)
        return described

    def tensors(self) -> list[Tensor]:
        """The Dense layers' weights and biases, in order: the model's digest counts them."""
        dense = [step for step in self.steps if isinstance(step, Dense)]
        return [tensor for step in dense for tensor in (step.weight, step.bias) if tensor is not None]


def read_pipeline(folder: Path) -> SentencePipeline:
    """The folder's sentence-transformers pipeline: modules.json's modules in order, each module's config
    (and a Dense module's weights), config_sentence_transformers.json's prompts and the transformer's
    sentence_bert_config.json. A folder without modules.json: the pooling alone, as its 1_Pooling config or
    the family's default says."""
    modules = _json(folder / "modules.json")
    settings = _json(folder / "config_sentence_transformers.json") or {}
    prompts = settings.get("prompts") or {}
    default_prompt = settings.get("default_prompt_name") or None
    if default_prompt is not None and default_prompt not in prompts:
        raise PipelineError(f"{folder}: default_prompt_name {default_prompt!r} is not one of its prompts")
    if modules is None:
        pooling = _pooling(_json(folder / "1_Pooling" / "config.json") or {}, folder / "1_Pooling")
        return SentencePipeline(
            pooling=pooling[0],
            include_prompt=pooling[1],
            prompts=prompts,
            default_prompt=default_prompt,
            max_seq_length=_max_seq_length(folder),
        )
    steps, pooling, include_prompt, transformer = [], None, True, ""
    for module in sorted(modules, key=lambda module: module.get("idx", 0)):
        kind, path = module.get("type", "").rsplit(".", 1)[-1], folder / module.get("path", "")
        if kind not in ("Transformer", "Pooling", "Dense", "Normalize"):
            raise PipelineError(
                f"{folder}/modules.json holds a {module.get('type')!r} module, which the lab does not run "
                "(it runs Transformer, Pooling, Dense and Normalize)"
            )
        if (kind == "Transformer") != (not steps) or (kind in ("Dense", "Normalize")) != ("pooling" in steps):
            raise PipelineError(f"{folder}/modules.json: the lab runs Transformer, Pooling, then Dense and Normalize")
        if kind == "Transformer":
            transformer = module.get("path", "")
            steps.append("transformer")
        elif kind == "Pooling":
            pooling, include_prompt = _pooling(_json(path / "config.json") or {}, path)
            steps.append("pooling")
        elif kind == "Dense":
            steps.append(_dense(path))
        else:
            steps.append("normalize")
    steps = steps[1:]  # the transformer is the model itself
    if "pooling" not in steps:
        raise PipelineError(f"{folder}/modules.json has no Pooling module: the lab shows one vector per sentence")
    return SentencePipeline(
        steps=tuple(steps),
        pooling=pooling,
        include_prompt=include_prompt,
        prompts=prompts,
        default_prompt=default_prompt,
        max_seq_length=_max_seq_length(folder / transformer),
        transformer=transformer,
    )


def _json(path: Path):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise PipelineError(f"{path} could not be read: {error}") from error


def _pooling(config: dict, where: Path) -> tuple[str | None, bool]:
    """The lab's name of the pooling the config names (sentence-transformers' pooling_mode, or its older
    flags), and whether the prompt's tokens are pooled too."""
    mode = config.get("pooling_mode")
    if mode is None:
        modes = [strategy for flag, strategy in FLAGS.items() if config.get(flag)]
    else:
        named = [mode] if isinstance(mode, str) else list(mode)
        ours = {theirs: lab for lab, theirs in POOLINGS.items()}
        unknown = [name for name in named if name not in ours]
        if unknown:
            raise PipelineError(f"{where}: pooling mode {unknown[0]!r} is not one sentence-transformers has")
        modes = [ours[name] for name in named]
    if len(modes) > 1:
        raise PipelineError(f"{where} concatenates {' and '.join(modes)} pooling: the lab pools one way at a time")
    return (modes[0] if modes else None), config.get("include_prompt", True) is not False


def _dense(path: Path) -> Dense:
    config = _json(path / "config.json")
    if config is None:
        raise PipelineError(f"{path}: a Dense module without its config.json")
    if config.get("use_residual") or config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
        raise PipelineError(f"{path}: a Dense module with a residual or another input, which the lab does not run")
    activation = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    torch_activation(activation)  # an activation that is not a torch.nn module stops here, not at the first run
    found = next((path / name for name in WEIGHT_FILES if (path / name).is_file()), None)
    if found is None:
        raise PipelineError(f"{path}: a Dense module without its weights ({' or '.join(WEIGHT_FILES)})")
    try:
        if found.suffix == ".safetensors":
            from safetensors.torch import load_file

            weights = load_file(found)
        else:
            weights = torch.load(found, map_location="cpu", weights_only=True)
    except Exception as error:
        raise PipelineError(f"{found} could not be read: {error}") from error
    weight = weights["linear.weight"].float()
    if list(weight.shape) != [config.get("out_features"), config.get("in_features")]:
        raise PipelineError(f"{found}: its weights are {list(weight.shape)}, not what its config says")
    bias = weights.get("linear.bias")
    return Dense(weight, None if bias is None else bias.float(), activation)


def torch_activation(path: str, what: str = "a Dense activation") -> torch.nn.Module:
    """A torch.nn module by its class path, as sentence-transformers writes it; nothing else is imported."""
    module, _, name = path.rpartition(".")
    if not module.startswith("torch.nn"):
        raise PipelineError(f"{what} {path!r}: the lab runs torch.nn's only")
    found = getattr(importlib.import_module(module), name, None)
    if not (isinstance(found, type) and issubclass(found, torch.nn.Module)):
        raise PipelineError(f"{what} {path!r}, which is not a torch.nn module")
    try:
        return found()
    except TypeError as error:
        raise PipelineError(f"{what} {path!r} that takes arguments: {error}") from error


def _max_seq_length(folder: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length: sentence-transformers cuts its input there."""
    length = (_json(folder / "sentence_bert_config.json") or {}).get("max_seq_length")
    return length if isinstance(length, int) and length > 0 else None
