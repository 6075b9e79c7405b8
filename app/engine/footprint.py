"""What the engine's work holds in memory at its peak, in bytes, stated from its shapes before it runs: the
promise a server asks its memory budget for (app.serving.memory). A run kept, padded passes, a pooling's own
pass, a pass with gradients. What a run keeps is read once from what one short input records (kept_bytes); the
rest follows from the model's config."""

from collections.abc import Callable

from app.engine.capture import FUSED_FROM_BYTES, LOGIT_ROWS, MADE_WEIGHTS_BYTES, NEXT_TOKENS, head_dim
from app.engine.model import LoadedModel
from app.engine.spec import RunSpec


def kept_bytes(loaded: LoadedModel, tokenize: Callable, capture: Callable) -> tuple[float, float, float]:
    """What a run keeps, in bytes, as c0 + c1·n + c2·n² of its n tokens, read from the shapes of what one
    short input records: each storage's bytes over n to the power of its tensor's dimensions of length n
    (n unlike any of the model's widths), as recorded tensors grow with the tokens, or their square
    (a model without an adapter keeps its weights). `tokenize` and `capture`: the engine's (Engine.tokenize,
    and its pass of specs, [(activations, candidates, padded_to)])."""
    config = loaded.model.config
    widths = {1, 2, NEXT_TOKENS, config.num_attention_heads, head_dim(config), config.hidden_size}
    text = "a"
    while len(tokens := tokenize(text)[0]) in widths | {getattr(config, "num_key_value_heads", 1)}:
        text += " a"
    n = len(tokens)
    spec = RunSpec(loaded.name, loaded.digest, text, mask=loaded.family.native_mask)
    activations, candidates, _ = capture([spec], [tokens])[0]
    kept, seen = [0.0, 0.0, 0.0], set()
    for tensor in [*activations.values(), *(candidates or ())]:
        storage = tensor.untyped_storage()
        if storage.data_ptr() in seen:
            continue
        seen.add(storage.data_ptr())
        power = min(2, sum(size == n for size in tensor.shape))
        kept[power] += storage.nbytes() / n**power
    return tuple(kept)


class Footprint:
    """One model's memory for each kind of its work (Engine.footprint)."""

    def __init__(self, loaded: LoadedModel, batch_tokens: int, kept: tuple[float, float, float]):
        """`batch_tokens`: the padded tokens of one pass (Engine.compute_batch's bound); `kept`: kept_bytes."""
        self.loaded = loaded
        self.batch_tokens = batch_tokens
        self.kept = kept

    def run_bytes(self, tokens: int) -> int:
        """The bytes a run of `tokens` tokens keeps (its Run.storages), stated before its pass."""
        c0, c1, c2 = self.kept
        return int(c0 + c1 * tokens + c2 * tokens**2) + 1

    def pass_bytes(self, lengths: list[int]) -> int:
        """The memory padded passes of inputs of these lengths take at their peak, stated before they run
        (Engine.compute_batch): the runs they keep, padded to the longest; the weights an eager pass hands on to the
        block cache (capture.MADE_WEIGHTS_BYTES); and what one block computes and lets go: its attention's
        scores and weights where eager (below capture.FUSED_FROM_BYTES), the masks, its FFN's inner rows and a
        few hidden states, and the LM head's logits, LOGIT_ROWS positions at a time."""
        batch, longest = len(lengths), max(lengths)
        per_pass = min(batch, self.batch_tokens // longest + 1)
        return batch * self.run_bytes(longest) + self.transient_bytes(per_pass, longest)

    def pooling_bytes(self) -> int:
        """The memory of a pooling's own pass (Engine.pooling_pass), stated before it runs: what it computes and
        lets go, and the last hidden states the run keeps."""
        tokens = self.loaded.max_seq_length
        return self.transient_bytes(1, tokens) + tokens * self.loaded.model.config.hidden_size * 4

    def transient_bytes(self, batch: int, tokens: int) -> int:
        """What one padded pass of batch × tokens computes and lets go, beside what it keeps (pass_bytes)."""
        config = self.loaded.model.config
        heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
        inner = getattr(config, "intermediate_size", None) or 4 * hidden
        block = batch * heads * tokens**2 * 4
        eager = 3 * block if block <= FUSED_FROM_BYTES else 0
        made = layers * block if block * layers <= MADE_WEIGHTS_BYTES else 0
        # The masks an encoder's padded or causal pass is given (capture.model_inputs), and a decoder's eager one
        # builds; a decoder's fused attention makes none.
        masks = batch * tokens**2 * 4 if eager or not self.loaded.family.decoder else 0
        rows = batch * tokens * (3 * inner + 8 * hidden) * 4
        logits = min(tokens, LOGIT_ROWS) * config.vocab_size * 4 * 4 if self.loaded.has_lm_head else 0
        return eager + made + masks + rows + logits

    def backward_bytes(self, batch: int, tokens: int) -> int:
        """What a pass with gradients (Integrated Gradients, the scoreboard's gradients) holds at its peak: every
        block's activations kept for the backward pass (their FFN rows and hidden states, their attention's
        scores and weights), twice for the gradients, and the LM head's logits."""
        config = self.loaded.model.config
        heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
        inner = getattr(config, "intermediate_size", None) or 4 * hidden
        block = batch * tokens * (3 * inner + 8 * hidden) * 4 + 3 * batch * heads * tokens**2 * 4
        logits = tokens * config.vocab_size * 4 * 2 if self.loaded.has_lm_head else 0
        return 2 * layers * block + logits
