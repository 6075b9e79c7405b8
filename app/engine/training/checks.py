"""Whether a training spec can be grown, and within a lab's bounds: InvalidInput naming the field, or the bound and
its setting, otherwise."""

from app.engine.errors import InvalidInput
from app.engine.training.data import MAX_POSITIONS, conditions, trained_periods
from app.engine.training.model import parameter_count
from app.engine.training.spec import ARCHITECTURES, MAX_CHECKPOINTS, RECIPES, Bounds, TrainingSpec

SETTING = "ATTENTION_LAB_MAX_TRAIN_"
BPE_ALPHABET = 257  # a byte-level BPE's 256 bytes and its end-of-text token come before any merge
UNBOUNDED = Bounds()


def vocab_size(spec: TrainingSpec) -> int:
    """The model's vocabulary: the syllables and [UNK], or the BPE's tokens."""
    return spec.vocab + 1 if spec.data == "repeats" else spec.vocab


def check(spec: TrainingSpec, bounds: Bounds = UNBOUNDED) -> int:
    """InvalidInput for a spec that cannot be grown or is past a bound; its model's weights otherwise."""
    if spec.architecture not in ARCHITECTURES:
        raise InvalidInput(f"architecture: {spec.architecture!r} is not one of {', '.join(ARCHITECTURES)}")
    if spec.data not in RECIPES:
        raise InvalidInput(f"data: {spec.data!r} is not one of {', '.join(RECIPES)}")
    wanted = "syllables" if spec.data == "repeats" else "bpe"
    if spec.tokenizer != wanted:
        raise InvalidInput(f"tokenizer: the {spec.data} recipe is read by the {wanted!r} tokenizer")
    if spec.hidden % spec.heads:
        raise InvalidInput(f"hidden: {spec.hidden} is not a multiple of heads ({spec.heads})")
    if spec.architecture == "llama" and spec.head_dim % 2:
        raise InvalidInput(f"hidden / heads: rotary positions turn pairs of dimensions; {spec.head_dim} is odd")
    _check_data(spec, bounds)
    if spec.steps < 1 or spec.checkpoint_every < 1:
        raise InvalidInput("steps and checkpoint_every: at least 1")
    _bound("steps", spec.steps, bounds.steps, "STEPS", "steps")
    if len(spec.checkpoint_steps) > MAX_CHECKPOINTS:
        raise InvalidInput(
            f"checkpoint_every: {spec.steps:,} steps every {spec.checkpoint_every:,} keep {len(spec.checkpoint_steps)} "
            f"checkpoints, past the {MAX_CHECKPOINTS} a training keeps; checkpoint_every at least "
            f"{-(-spec.steps // (MAX_CHECKPOINTS - 1)):,}"
        )
    weights = parameter_count(spec, vocab_size(spec))
    tokens = spec.batch * spec.length
    _bound("weights", weights, bounds.weights, "WEIGHTS", "the model's weights (layers, hidden, vocab)")
    _bound("batch × length", tokens, bounds.batch_tokens, "BATCH_TOKENS", "a step's tokens")
    _bound(
        "weights × batch × length",
        weights * tokens,
        bounds.weight_tokens,
        "WEIGHT_TOKENS",
        f"what a step costs: its {weights:,} weights × {tokens:,} tokens",
    )
    return weights


def _check_data(spec: TrainingSpec, bounds: Bounds) -> None:
    if not 8 <= spec.length <= MAX_POSITIONS:
        raise InvalidInput(f"length: {spec.length} tokens; a training sequence has 8 to {MAX_POSITIONS}")
    if spec.data == "text":
        if not spec.text.strip():
            raise InvalidInput("text: the text recipe needs a text to learn from")
        _bound("text", len(spec.text.encode()), bounds.text_bytes, "TEXT_BYTES", "the text's bytes (UTF-8)")
    elif spec.text:
        raise InvalidInput(f"text: the {spec.data} recipe reads no text (data 'text' does)")
    if spec.data != "repeats":
        if spec.vocab <= BPE_ALPHABET:
            raise InvalidInput(f"vocab: a byte-level BPE has more than {BPE_ALPHABET} tokens (its bytes and end token)")
    if spec.period - (0 if spec.fixed_period else spec.spread) < 2:
        raise InvalidInput("period - spread: the shortest period trained on is at least 2 tokens")
    if not spec.fixed_period and spec.spread < 4:
        raise InvalidInput("spread: at least 4, so that the held-out periods (period ± 3) lie among the trained ones")
    if spec.max_offset < 0:
        raise InvalidInput("max_offset: at least 0")
    if spec.fixed_period and spec.length < 2 * spec.period:
        raise InvalidInput(f"length: a fixed period of {spec.period} needs {2 * spec.period} tokens ([R][R])")
    if not spec.fixed_period and spec.length <= 2 * min(trained_periods(spec)):
        raise InvalidInput(f"length: more than twice the shortest period ({min(trained_periods(spec))}) is needed")
    distinct = max(condition.offset + condition.period for condition in conditions(spec))
    random_tokens = spec.vocab if spec.data == "repeats" else spec.vocab - 1
    if random_tokens < distinct:
        raise InvalidInput(
            f"vocab: the held-out sequences draw {distinct} distinct tokens (prefix and period), more than "
            f"{random_tokens}: a larger vocab, or a shorter period or spread"
        )


def _bound(field: str, value: int, bound: int | None, setting: str, what: str) -> None:
    if bound is not None and value > bound:
        raise InvalidInput(f"{field}: {what} {value:,}, past this lab's bound of {bound:,} ({SETTING}{setting})")
