"""A training named by what it is: everything that changes its weights in one frozen spec, whose hash is its id
(as a run's, app.engine.spec). The empty spec is the induction recipe: a Llama-shaped attention-only decoder of 2
blocks of 2 heads, hidden 64, that grows a content-based induction head on repeated random sequences in a few
hundred steps (/work/research/induction/REPORT.md; the defaults' reasons are beside each field)."""

import base64
import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields, replace
from functools import cached_property

TRAIN_ID = re.compile(r"[a-z2-7]{26}")
ARCHITECTURES = ("llama", "gpt2")
RECIPES = ("repeats", "corpus", "text")
TOKENIZERS = ("syllables", "bpe")
# A random-token recipe's vocabulary by default, and a BPE's (the lab's corpus or a teacher's text).
REPEATS_VOCAB = 64
BPE_VOCAB = 512


@dataclass(frozen=True)
class TrainingSpec:
    """The only description of a training: two requests with the same spec are the same training, and grow the
    same weights bit for bit on any worker."""

    # The model: a shape the lab reads (app.engine.families), built by transformers' own classes.
    architecture: str = "llama"  # RoPE heads generalise to periods and offsets never trained on; GPT-2's learned
    # positions grew offset heads in every run of the research (REPORT.md, sweep 2)
    layers: int = 2
    heads: int = 2  # 2 heads of 32 dims formed the head in fewer and cheaper steps than 4 of 16
    hidden: int = 64
    attention_only: bool = True  # Llama: no MLP (intermediate_size 0); GPT-2: an MLP of width 1, zeroed, frozen
    tied_embeddings: bool = False
    init_std: float = 0.05  # initializer_range: 0.05 gave sharper heads (prefix 0.87-0.90) than 0.02
    # The data.
    data: str = "repeats"  # "repeats": [prefix][R][R][R]…; "corpus": the lab's own texts; "text": a teacher's
    tokenizer: str = "syllables"  # "syllables" for repeats; "bpe": a byte-level BPE trained on the text
    vocab: int = REPEATS_VOCAB  # random tokens (repeats), or the BPE's vocabulary (corpus, text)
    period: int = 16  # repeats: the middle of the periods trained on ...
    spread: int = 8  # ... and how far either side: 8..24 (held out: period ± 3, and period + spread + 3)
    fixed_period: bool = False  # every sequence [R][R] of exactly `period` tokens, no prefix: the offset shortcut
    max_offset: int = 16  # repeats: the random prefix's longest length (held out: 3, 5, 7)
    text: str = ""  # data "text": the teacher's text
    length: int = 32  # tokens a training sequence (test sequences run longer: RoPE carries over)
    # The optimizer: AdamW, warmed up linearly, then constant.
    lr: float = 3e-3  # 1e-2 and 5e-3 fell for the offset shortcut; 2e-3 took longer
    warmup: int = 50
    beta1: float = 0.9
    beta2: float = 0.99
    weight_decay: float = 0.0
    clip: float = 1.0  # the gradients' global norm, at most (0: none)
    steps: int = 600
    batch: int = 64  # sequences a step: 64 of 32 tokens formed the head in 300-350 steps
    seed: int = 0
    checkpoint_every: int = 25  # steps between checkpoints (each a folder the lab serves) and head scores

    @cached_property
    def train_id(self) -> str:
        digest = hashlib.sha256(self.canonical().encode()).digest()[:16]
        return base64.b32encode(digest).decode().rstrip("=").lower()

    def canonical(self) -> str:
        """Sorted-keys JSON of every field: the text its id is the hash of, and what its folder keeps."""
        return json.dumps({"training": asdict(self)}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_canonical(cls, canonical: str) -> "TrainingSpec":
        return cls(**json.loads(canonical)["training"])

    @classmethod
    def of(cls, **given) -> "TrainingSpec":
        """A spec from the fields a request gives, the others at their defaults, the recipe's own where they
        depend on it (a corpus or a text is read by a BPE of 512 tokens): never "the recipe's default"."""
        unknown = set(given) - {field.name for field in fields(cls)}
        if unknown:
            raise TypeError(f"no field {', '.join(sorted(unknown))} in a training spec")
        data = given.get("data", cls.data)
        if data != "repeats":
            given = {"tokenizer": "bpe", "vocab": BPE_VOCAB, **given}
        return replace(cls(), **given)

    @property
    def checkpoint_steps(self) -> list[int]:
        """The steps a checkpoint is kept at: 0, every checkpoint_every, and the last."""
        return sorted({*range(0, self.steps, self.checkpoint_every), self.steps})

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def mlp_width(self) -> int:
        return 4 * self.hidden


@dataclass(frozen=True)
class Bounds:
    """What a lab lets one training take (its settings, app.settings: ATTENTION_LAB_MAX_TRAIN_*); None: no bound."""

    weights: int | None = None  # the model's weights (MAX_TRAIN_WEIGHTS)
    steps: int | None = None  # steps (MAX_TRAIN_STEPS)
    batch_tokens: int | None = None  # a step's sequences × their length (MAX_TRAIN_BATCH_TOKENS)
    weight_tokens: int | None = None  # weights × a step's tokens: what one step costs (MAX_TRAIN_WEIGHT_TOKENS)
    text_bytes: int | None = None  # a teacher's text, in UTF-8 bytes (MAX_TRAIN_TEXT_BYTES)


MAX_CHECKPOINTS = 200  # checkpoints a training keeps: each is a folder the lab serves, a few hundred KB here
