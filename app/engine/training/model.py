"""The model a training grows, built by transformers' own classes so that `AutoModelForCausalLM.from_pretrained`
and the lab's model loading read its checkpoints, and initialised from the training's own generator (never the
global one); and its checkpoints: folders named by their weights' digest, with their tokenizer and a model card
saying the spec."""

import hashlib
import json
import math
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel
from transformers import logging as transformers_logging
from transformers.initialization import no_init_weights

from app.engine.training.data import MAX_POSITIONS, generator, longest_test
from app.engine.training.spec import TrainingSpec

MODEL_PREFIX = "grown-"  # a grown model's name: this and its digest's first DIGEST_CHARS hex digits
DIGEST_CHARS = 16
GROWN = re.compile(rf"{MODEL_PREFIX}[0-9a-f]{{{DIGEST_CHARS}}}")
GROWN_ABOUT = "grown.json"  # in a checkpoint's folder: the training and step that kept it first
CARD_TEXT_CHARS = 400  # a teacher's text past this is shown cut in a model card


def build(spec: TrainingSpec, vocab_size: int) -> PreTrainedModel:
    """The spec's model at step 0: its weights drawn from a generator seeded by the spec's seed, as transformers
    would draw them (normal(0, init_std); GPT-2's output projections scaled by 1/sqrt(2 layers); norms at one,
    biases at zero). Attention-only: Llama's MLP has width 0 (it adds exact zeros); GPT-2's cannot (its Conv1D
    reshapes to width 0 and fails), so it has width 1, zeroed and frozen: it adds exact zeros too."""
    config = model_config(spec, vocab_size)
    with no_init_weights(), quiet():
        model = (LlamaForCausalLM if spec.architecture == "llama" else GPT2LMHeadModel)(config)
    draw = generator(spec.seed, "weights")
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.endswith("norm.weight") or (".ln_" in name and name.endswith(".weight")):
                weight.fill_(1.0)
            elif name.endswith(".bias"):
                weight.zero_()
            elif spec.architecture == "gpt2" and spec.attention_only and ".mlp." in name:
                weight.zero_()
            else:
                std = spec.init_std
                if name.endswith("c_proj.weight"):
                    std /= math.sqrt(2 * spec.layers)
                weight.normal_(0.0, std, generator=draw)
    if spec.architecture == "gpt2" and spec.attention_only:
        for block in model.transformer.h:
            block.mlp.requires_grad_(False)
    return model


def model_config(spec: TrainingSpec, vocab_size: int):
    if spec.architecture == "llama":
        return LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=spec.hidden,
            intermediate_size=0 if spec.attention_only else spec.mlp_width,
            num_hidden_layers=spec.layers,
            num_attention_heads=spec.heads,
            num_key_value_heads=spec.heads,
            max_position_embeddings=MAX_POSITIONS,
            tie_word_embeddings=spec.tied_embeddings,
            initializer_range=spec.init_std,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
    return GPT2Config(
        vocab_size=vocab_size,
        # learned positions: the held-out sequences are longer than the trained ones, so the table covers them
        # (its rows past `length` are never trained)
        n_positions=max(spec.length, longest_test(spec)),
        n_embd=spec.hidden,
        n_layer=spec.layers,
        n_head=spec.heads,
        n_inner=1 if spec.attention_only else spec.mlp_width,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=spec.tied_embeddings,
        initializer_range=spec.init_std,
        bos_token_id=None,
        eos_token_id=None,
    )


class quiet:
    """transformers' warnings and progress bars off while a model is built (a zero-width MLP's "zero-element tensors"
    notice) or saved."""

    def __enter__(self):
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
        self.level = transformers_logging.get_verbosity()
        self.bars = transformers_logging.is_progress_bar_enabled()
        transformers_logging.set_verbosity_error()
        transformers_logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bar

    def __exit__(self, *exc):
        transformers_logging.set_verbosity(self.level)
        if self.bars:
            transformers_logging.enable_progress_bar()
        self.warnings.__exit__(*exc)


def parameter_count(spec: TrainingSpec, vocab_size: int) -> int:
    """The model's weights, from its shape (on the meta device: nothing allocated)."""
    with torch.device("meta"), quiet():
        model = (LlamaForCausalLM if spec.architecture == "llama" else GPT2LMHeadModel)(model_config(spec, vocab_size))
    return sum(weight.numel() for weight in model.parameters())


def weights_digest(model: PreTrainedModel) -> str:
    """sha256 of the weights (name, dtype, shape, bytes, by name): what names a checkpoint."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name} {tensor.dtype} {tuple(tensor.shape)}".encode())
        digest.update(memoryview(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return digest.hexdigest()


def model_name(digest: str) -> str:
    return MODEL_PREFIX + digest[:DIGEST_CHARS]


def is_grown(name: str) -> bool:
    return GROWN.fullmatch(name) is not None


def save_checkpoint(model: PreTrainedModel, tokenizer, models_dir: Path, card: str, about: dict) -> tuple[str, int]:
    """The model as a folder under `models_dir` named by its weights' digest (grown-<16 hex digits>): its config,
    weights (safetensors), tokenizer, model card and `about` (GROWN_ABOUT: which training and step). Written
    beside, then renamed into place, so a reader never sees half a folder; the same weights again are the same
    folder, kept as it is (a step 0 is shared by every training of its shape and seed). Returns its name and
    bytes."""
    name = model_name(weights_digest(model))
    folder = models_dir / name
    if not folder.is_dir():
        models_dir.mkdir(parents=True, exist_ok=True)
        writing = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=models_dir))
        try:
            with quiet():
                model.save_pretrained(writing)
            tokenizer.save_pretrained(writing)
            (writing / "README.md").write_text(card)
            (writing / GROWN_ABOUT).write_text(json.dumps(about))
            os.replace(writing, folder)
        except OSError:
            shutil.rmtree(writing, ignore_errors=True)
            if not folder.is_dir():
                raise
    return name, folder_bytes(folder)


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.iterdir() if path.is_file())


def model_card(spec: TrainingSpec, step: int, scores: dict | None) -> str:
    """A checkpoint's README.md: what it is, the spec that grew it (enough to grow it again), and its scores."""
    front = "---\nlibrary_name: transformers\npipeline_tag: text-generation\ntags:\n- attention-lab\n- grown\n---\n"
    shape = f"a {spec.architecture} decoder of {spec.layers} blocks of {spec.heads} heads, hidden {spec.hidden}" + (
        ", attention only" if spec.attention_only else ""
    )
    described = json.loads(spec.canonical())["training"]
    if len(spec.text) > CARD_TEXT_CHARS:  # the training's folder keeps the whole text; the card says which
        sha = hashlib.sha256(spec.text.encode()).hexdigest()
        described["text"] = f"{spec.text[:CARD_TEXT_CHARS]}… ({len(spec.text):,} characters, sha256 {sha})"
    data = {
        "repeats": f"repeated random sequences of {spec.vocab} syllables"
        + (f" (a fixed period of {spec.period})" if spec.fixed_period else f" (periods {spec.period} ± {spec.spread})"),
        "corpus": "the lab's own corpus (a byte-level BPE trained on it)",
        "text": "a teacher's text (a byte-level BPE trained on it)",
    }[spec.data]
    lines = [
        front,
        f"# Grown in Attention Lab: step {step} of {spec.steps}\n",
        f"{shape}, trained on {data} from seed {spec.seed}; training {spec.train_id}.\n",
        "Load it with `AutoModelForCausalLM.from_pretrained(folder)` and `AutoTokenizer.from_pretrained(folder)`, "
        "or list it among the lab's models.\n",
        "## The spec\n",
        "Everything that changes the weights; the same spec grows the same weights bit for bit:\n",
        "```json\n" + json.dumps(described, indent=2, ensure_ascii=False) + "\n```\n",
    ]
    if scores:
        lines += ["## Its heads at this step\n", "```json\n" + json.dumps(scores, indent=2) + "\n```\n"]
    return "\n".join(lines)
