"""Request and response bodies of the training router (app.web.training): a spec to grow a model from, and a
training's state, curves, checkpoints and head scores."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.engine.training.spec import BPE_VOCAB, REPEATS_VOCAB, TrainingSpec

Code = Annotated[str, Field(pattern=r"^[23456789A-Z]{6}$", description="A class's join code")]
PerHead = Annotated[list[list[float]], Field(description="[layer][head]")]
TrainingState = Literal["running", "paused", "stopped", "cancelled", "done", "failed"]
STATES = (
    "running: under way (it goes on when the page closes); paused: asked to pause, resumable; stopped: the server "
    "stopped (SIGTERM) or its worker went away, resumable from its last checkpoint; cancelled: called off, its "
    "checkpoints kept (starting the same spec again goes on from where it was); done; failed: see error"
)
DEFAULT = TrainingSpec()


class TrainingRequest(BaseModel):
    """A training spec: every field is optional, and {} is the induction recipe (a Llama-shaped attention-only
    decoder of 2 blocks × 2 heads, hidden 64, on repeated random sequences: a content-based induction head in a
    few hundred steps)."""

    model_config = ConfigDict(extra="forbid")

    architecture: Literal["llama", "gpt2"] = Field(DEFAULT.architecture, description="The model's shape")
    layers: int = Field(DEFAULT.layers, ge=1, le=12, description="Blocks")
    heads: int = Field(DEFAULT.heads, ge=1, le=32, description="Attention heads a block")
    hidden: int = Field(DEFAULT.hidden, ge=8, le=1024, description="Hidden size (a multiple of heads)")
    attention_only: bool = Field(DEFAULT.attention_only, description="No MLP: the blocks are attention alone")
    tied_embeddings: bool = Field(DEFAULT.tied_embeddings, description="The unembedding is the embedding")
    init_std: float = Field(DEFAULT.init_std, gt=0, le=1, description="The weights' initial standard deviation")
    data: Literal["repeats", "corpus", "text"] = Field(
        DEFAULT.data,
        description="repeats: [prefix][R][R][R]… of random syllables; corpus: the lab's own texts; text: `text`",
    )
    tokenizer: Literal["syllables", "bpe"] | None = Field(
        None, description="syllables for repeats; bpe (a byte-level BPE learnt from the text) for corpus and text"
    )
    vocab: int | None = Field(
        None,
        ge=8,
        le=16_384,
        description=f"Random tokens (repeats, default {REPEATS_VOCAB}) or the BPE's tokens (default {BPE_VOCAB})",
    )
    period: int = Field(DEFAULT.period, ge=2, le=256, description="repeats: the middle of the periods trained on")
    spread: int = Field(DEFAULT.spread, ge=0, le=128, description="repeats: periods period ± spread are trained on")
    fixed_period: bool = Field(
        DEFAULT.fixed_period,
        description="repeats: every sequence [R][R] of exactly `period` tokens and no prefix (the offset shortcut)",
    )
    max_offset: int = Field(DEFAULT.max_offset, ge=0, le=128, description="repeats: the random prefix's longest")
    text: str = Field(
        "",
        description="data text: the teacher's text (at most ATTENTION_LAB_MAX_TRAIN_TEXT_BYTES); every tenth line "
        "is held out",
    )
    length: int = Field(DEFAULT.length, ge=8, le=512, description="Tokens a training sequence")
    lr: float = Field(DEFAULT.lr, gt=0, le=1, description="AdamW's learning rate after the warm-up")
    warmup: int = Field(DEFAULT.warmup, ge=0, le=10_000_000, description="Steps of linear warm-up")
    beta1: float = Field(DEFAULT.beta1, ge=0, lt=1)
    beta2: float = Field(DEFAULT.beta2, ge=0, lt=1)
    weight_decay: float = Field(DEFAULT.weight_decay, ge=0, le=1, description="On matrices only")
    clip: float = Field(DEFAULT.clip, ge=0, le=1000, description="The gradients' global norm at most (0: none)")
    steps: int = Field(DEFAULT.steps, ge=1, le=10_000_000)
    batch: int = Field(DEFAULT.batch, ge=1, le=100_000, description="Sequences a step")
    seed: int = Field(DEFAULT.seed, ge=0, le=2**31 - 1, description="The weights' and the batches' generator")
    checkpoint_every: int = Field(
        DEFAULT.checkpoint_every, ge=1, le=10_000_000, description="Steps between checkpoints (each a served model)"
    )
    class_code: Code | None = Field(
        None,
        description="Start it in this class (with its teacher's X-Class-Secret): only the teacher then pauses, "
        "resumes or cancels it. While a class runs on the lab, only a teacher starts a training",
    )

    def spec_fields(self) -> dict:
        """The spec's fields given, for TrainingSpec.of (the others at their defaults, the recipe's where they
        depend on it)."""
        given = self.model_dump(exclude_unset=True, exclude={"class_code"})
        return {key: value for key, value in given.items() if value is not None}


class TrainingSpecFields(BaseModel):
    """The spec a training was started with, every field resolved: its hash is the train_id."""

    architecture: str
    layers: int
    heads: int
    hidden: int
    attention_only: bool
    tied_embeddings: bool
    init_std: float
    data: str
    tokenizer: str
    vocab: int
    period: int
    spread: int
    fixed_period: bool
    max_offset: int
    text: str
    length: int
    lr: float
    warmup: int
    beta1: float
    beta2: float
    weight_decay: float
    clip: float
    steps: int
    batch: int
    seed: int
    checkpoint_every: int


class ConditionScores(BaseModel):
    """The heads on one kind of held-out sequence, [prefix o][R][R] with R of P random tokens."""

    period: int = Field(description="P")
    offset: int = Field(description="o")
    trained: bool = Field(description="A fixed period's own condition, shown beside the held-out ones, never judged")
    prefix: PerHead = Field(
        description="Prefix-matching (induction) score: the second copy's mean attention to the token after each "
        "token's earlier occurrence"
    )
    peak_distance: list[list[int]] = Field(
        description="[layer][head]: the distance i - j the second copy attends to most (a content head: P - 1 at "
        "every P; an offset head: one distance at every P)"
    )
    peak_weight: PerHead = Field(description="The mean attention at that distance")
    first_copy_loss: float = Field(description="Next-token loss over the first copy (nats; about ln V)")
    in_context_loss: float = Field(description="Next-token loss over the second copy (nats)")


class HeadScores(BaseModel):
    """What the heads have learnt at a checkpoint (docs/training.md#the-scores)."""

    conditions: list[ConditionScores]
    previous: PerHead = Field(description="Previous-token score: mean attention from i to i - 1")
    prefix: PerHead = Field(description="Prefix-matching score, mean over the held-out conditions")
    prefix_min: PerHead = Field(description="Prefix-matching score, least over the held-out conditions")
    copying: PerHead = Field(description="Copying score of the OV circuit's eigenvalues, -1 to 1 (Olsson et al.)")
    self_copy: PerHead = Field(description="Share of tokens whose own logit the head raises most")
    in_context_loss: float = Field(description="The second copy's loss, mean over the held-out conditions (nats)")
    worst_in_context_loss: float = Field(description="… and its largest")
    first_copy_loss: float = Field(description="The first copy's loss, mean over the held-out conditions")
    held_out_loss: float | None = Field(description="corpus and text: the loss on the held-out lines (nats)")
    induction_head: list[int] = Field(description="[layer, head] of the head of the highest prefix_min")
    induction_score: float = Field(description="Its prefix_min")
    formed: bool = Field(description="An induction head: induction_score >= 0.5 and worst_in_context_loss < 1.0")


class Checkpoint(BaseModel):
    step: int
    model: str = Field(description="The name the lab serves it under (usable as `model` in every request)")
    bytes: int = Field(description="Its folder's bytes")
    scores: HeadScores


class PhaseChange(BaseModel):
    """Where the held-out in-context loss drops (once it has fallen 1 nat below its plateau)."""

    start: int = Field(description="The step it had fallen a tenth of the way")
    step: int = Field(description="… half the way: the phase change")
    end: int = Field(description="… nine tenths of the way")
    plateau_loss: float
    lowest_loss: float
    drop_nats: float
    formed: int | None = Field(description="The step an induction head formed, from which every checkpoint has one")


class TrainingAt(BaseModel):
    """Which training, and where it stands: what its status and the list both begin with."""

    train_id: str = Field(description="The spec's hash: the same spec is the same training")
    state: TrainingState = Field(description=STATES)
    step: int
    steps: int


class TrainingStatus(TrainingAt):
    spec: TrainingSpecFields
    class_code: str | None = Field(description="The class it was started in")
    started: float = Field(description="Unix time")
    loss: float | None = Field(description="The last step's training loss")
    seconds: float = Field(description="Spent in steps and checkpoints")
    weights: int = Field(description="The model's weights")
    memory_bytes: int = Field(description="Its peak memory from its shapes: weights, gradients, AdamW, activations")
    checkpoint_bytes: int = Field(description="Its checkpoints' folders, in all")
    losses: list[float] = Field(description="The training loss at every step")
    checkpoints: list[Checkpoint]
    phase_change: PhaseChange | None
    model: str | None = Field(description="The latest checkpoint's model name, once one is kept")
    error: str | None = Field(description="Why it failed")


class TrainingListed(TrainingAt):
    started: float
    class_code: str | None


class TrainingList(BaseModel):
    active: str | None = Field(description="The training under way in the lab (one at a time), if any")
    trainings: list[TrainingListed] = Field(description="The lab's trainings, the latest first (at most 50)")


class TrainingBounds(BaseModel):
    weights: int
    steps: int
    batch_tokens: int = Field(description="batch × length")
    weight_tokens: int = Field(description="weights × batch × length")
    text_bytes: int


class TrainingLimits(BaseModel):
    defaults: TrainingSpecFields = Field(description="The empty spec's fields: the induction recipe")
    bounds: TrainingBounds
    max_checkpoints: int
