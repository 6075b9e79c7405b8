"""A run of the model on one input: its tokens, what one forward pass recorded of it, and its numbers served by
name (each activation by its one name, app.engine.names). Runs are made by the engine (app.engine.engine)."""

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from app.engine import names
from app.engine.blocks import BlockCache
from app.engine.capture import Scoring, additive_mask, attention_scores, padded_mask, softmax_weights
from app.engine.errors import BlockTooLarge, NeedsAdapter, OutOfRange
from app.engine.families.attention_only import reason
from app.engine.families.base import Family
from app.engine.sentence import SentencePipeline, Stage
from app.engine.spec import RunSpec

# The blocks of weights an engine keeps computed (Run.weights), in bytes, where no lab gives it its own bound.
BLOCK_BYTES = 512 * 1024**2
# The largest block of weights a view may make whole (every head's every row): 8 heads at 4,096 tokens. Past
# it, views read rows (Run.weight_rows): a window of cells, a pooled overview (app.engine.cells), a query's row.
WHOLE_BLOCK_BYTES = 512 * 1024**2
# Query rows computed at once (Run.score_rows), in chunks that start at multiples of this many: a row is computed
# alike whichever rows are asked with it, and a chunk's scores stay small. They equal the whole block's to float32
# rounding, not bit for bit: a chunk is a product of another shape, whose sums may differ in the last bit.
ROW_CHUNK = 64


@dataclass(frozen=True)
class Token:
    index: int
    text: str
    label: str  # how every view names it (app.engine.labels): the text, and its position where the text repeats
    id: int
    special: bool  # any of the tokenizer's special ids, typed ones ([SEP], [MASK]) and [UNK] included
    added: bool  # put in by the tokenizer around the text ([CLS]/[SEP], <s>/</s>), not read from it
    start: int  # offsets are Unicode code points into the token's own segment: text (A) or text_pair (B)
    end: int
    token_type: int
    segment: str  # "A" or "B"
    # Read from the model's prompt put before the text, not from the text: its offsets index the prompt.
    prompt: bool = False


@dataclass
class Run:
    spec: RunSpec  # what was run: the numbers below follow from it and the model
    tokens: list[Token]
    truncated: bool
    activations: dict[str, Tensor]  # in the model's dtype, on the CPU, named as in app.engine.capture
    # The model's last hidden states (the last block's output; after the final norm in a pre-norm model)
    # for the input its pooling reads: the whole input, or its first max_seq_length tokens, which take a
    # pass of their own (Engine.pooling_pass; None until it is computed). [pooled_tokens, d_model]
    pooled_output: Tensor | None
    n_layers: int
    n_heads: int
    family: Family
    scoring: tuple[Scoring, ...]  # each block's scale of q·k and sliding window (capture.block_scoring)
    # The LM head's best next tokens after each position, best first: ids, logits and probabilities,
    # [pos, NEXT_TOKENS] each; None for a model without an LM head.
    next_tokens: tuple[Tensor, Tensor, Tensor] | None = None
    pipeline: SentencePipeline = SentencePipeline()  # what follows the pooling (app.engine.sentence)
    prompt_tokens: int = 0  # the prompt's length as sentence-transformers counts it: a Pooling may leave it out
    # Where its blocks of weights are kept once computed (Run.weights): the engine's, shared by its runs.
    blocks: BlockCache = field(default_factory=lambda: BlockCache(BLOCK_BYTES))
    # The padded length of the pass that computed it, where that pass padded it and handed on the weights it
    # made (capture_batch's weights_made): a block computed again is computed at that length (Run.weights),
    # so that it is bit for bit the one the pass made. None: computed at its own length.
    padded_to: int | None = None
    # The memory the run holds: {storage address: bytes}. Runs computed in one batch hold parts of the same
    # tensors; a cache counts each storage once.
    storages: dict[int, int] = field(init=False)

    def __post_init__(self):
        held = [*self.activations.values(), *self._pooled_outputs(), *(self.next_tokens or ())]
        self.storages = {
            storage.data_ptr(): storage.nbytes() for storage in (tensor.untyped_storage() for tensor in held)
        }

    def _pooled_outputs(self) -> list[Tensor]:
        return [] if self.pooled_output is None else [self.pooled_output]

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def pooling_pass_due(self) -> bool:
        """Whether the sentence vector still needs its own pass (Engine.pooling_pass): the input is longer
        than the model's pooling reads."""
        return self.pooled_output is None

    def with_pooled_output(self, states: Tensor) -> "Run":
        """This run with the last hidden states of its pooling's own pass: a new Run, so that a cache counts
        its bytes anew."""
        return replace(self, pooled_output=states)

    @property
    def pooled(self) -> Tensor:
        """The pooling's vector: [d_model]."""
        return self.stages[0].vector

    @property
    def embedding(self) -> Tensor:
        """The sentence vector the model's pipeline makes (after its Dense and Normalize modules, where it
        has them): what sentence-transformers' encode returns. [size]"""
        return self.stages[-1].vector

    @property
    def stages(self) -> list[Stage]:
        """The sentence vector at each module after the transformer: the pooling first."""
        if self.pooling_pass_due:
            raise RuntimeError("the sentence vector of this input takes a pass of its own: Engine.pooling_pass")
        return self.pipeline.stages(self.pooled_output, self.spec.pooling, self.pooling_skip)

    @property
    def pooling_skip(self) -> int:
        """The leading tokens the pooling leaves out: the prompt's, where the folder's Pooling excludes it."""
        return 0 if self.pipeline.include_prompt else self.prompt_tokens

    @property
    def pooled_tokens(self) -> int:
        return len(self.pooled_output)

    def ablated(self, layer: int, head: int) -> bool:
        return (layer, head) in self.spec.ablated

    def head(self, layer: int, head: int) -> dict[str, Tensor]:
        """q, k, v, scores, weights and context (weights·V, what the head computes), and what W_O receives
        from it: the context, or zeros for a head switched off."""
        self.check_adapter()
        self._check(layer, head)
        self.check_whole_block()
        attn = {name: self.activations[names.attn(layer, name)][head] for name in ("q", "k", "v")}
        context = self.activations[names.attn(layer, "context")][head]
        return {
            **attn,
            "scores": self.scores(layer, head),  # [query_pos, key_pos]
            "weights": self.weights(layer)[head],
            "context": context,
            "context_to_output": torch.zeros_like(context) if self.ablated(layer, head) else context,
        }

    def scores(self, layer: int, head: int | slice | list[int] = slice(None), queries: range | None = None) -> Tensor:
        """What the block's softmax reads: QKᵀ · scale + the position bias where the model adds one + the
        mask, from the recorded q and k (rotated, grouped K/V heads repeated). [head, query, key], or
        [query, key] for one head; `queries`: only these rows (every query by default)."""
        rows = slice(None) if queries is None else slice(queries.start, queries.stop)
        if isinstance(head, list) and head == list(range(head[0], head[-1] + 1)):
            head = slice(head[0], head[-1] + 1)  # a view of consecutive heads, not a copy of their k
        q = self.activations[names.attn(layer, "q")][:, rows][head]
        k = self.activations[names.attn(layer, "k")][head]
        scoring = self.scoring[layer]
        mask = additive_mask(self.spec.mask, len(self.tokens), scoring.window, queries, q.dtype)
        bias = self.activations.get(names.attn(layer, "position_bias"))
        return attention_scores(q, k, mask, scoring.scale, None if bias is None else bias[:, rows][head])

    @property
    def dtype(self) -> torch.dtype:
        """What the model computed the run in: its numbers (and the weights computed from them) are in it."""
        return self.activations[names.attn(0, "weights" if self.family.attention_only else "q")].dtype

    def weights(self, layer: int) -> Tensor:
        """Block `layer`'s attention weights, softmax(scores) as the model's eager attention computes them (in
        float32, then rounded to the model's dtype, softmax_weights): kept in the engine's block cache,
        computed from q and k when it does not hold them.
        A model without an adapter keeps its own output_attentions. A block past WHOLE_BLOCK_BYTES is not
        made at all (BlockTooLarge): its views read rows (weight_rows). [head, query, key]"""
        kept = self.activations.get(names.attn(layer, "weights"))
        if kept is not None:
            return kept
        self._check(layer)
        self.check_whole_block()

        @torch.inference_mode()
        def compute() -> Tensor:
            if self.padded_to is not None:
                return self._padded_weights(layer)
            return softmax_weights(self.scores(layer))

        return self.blocks.get(self.run_id, layer, compute)

    def _padded_weights(self, layer: int) -> Tensor:
        """Block `layer`'s weights as its padded pass made them: q, k (and the position bias) padded with zeros
        to the pass's length, the padding keys hidden as the pass hid them, its softmax over that many keys, then
        cut to the run's tokens. The padding's own scores only ever meet the float32 minimum, whose exp is 0, so
        the run's cells are the same sums in the same order as the pass's: the same bits, where a softmax over
        the run's own keys differs in the last bit (in a class's burst, in a third of the blocks). [head, query,
        key]"""
        n, padding = len(self.tokens), self.padded_to - len(self.tokens)
        q, k = (pad_rows(self.activations[names.attn(layer, name)], padding) for name in ("q", "k"))
        scoring = self.scoring[layer]
        mask = padded_mask(self.spec.mask, n, self.padded_to, scoring.window, q.dtype)
        bias = self.activations.get(names.attn(layer, "position_bias"))
        if bias is not None:
            bias = torch.nn.functional.pad(bias, (0, padding, 0, padding))
        weights = softmax_weights(attention_scores(q, k, mask, scoring.scale, bias))
        return weights[:, :n, :n].contiguous()

    @property
    def block_bytes(self) -> int:
        """The bytes of one block of weights: heads × tokens² numbers of the model's dtype."""
        return self.n_heads * len(self.tokens) ** 2 * self.dtype.itemsize

    @property
    def weights_peak_bytes(self) -> int:
        """What computing one block's weights (Run.weights) holds at its peak: two blocks (the scores and
        what the next step makes of them) and the mask, at the length its pass padded it to."""
        n = self.padded_to or len(self.tokens)
        return (2 * self.n_heads + 1) * n**2 * 4

    def head_bytes(self) -> int:
        """Run.head's peak: its block's weights computed, and the head's own scores and weights beside them."""
        return self.weights_peak_bytes + 3 * len(self.tokens) ** 2 * 4

    def head_numbers(self) -> int:
        """How many numbers Run.head returns: q, k, v and the context twice (tokens × d each), and the scores
        and weights (tokens² each)."""
        self.check_adapter()
        n, d = len(self.tokens), self.activations[names.attn(0, "q")].shape[-1]
        return 5 * n * d + 2 * n**2

    def check_whole_block(self) -> None:
        """BlockTooLarge where a block of weights is past WHOLE_BLOCK_BYTES (a model without an adapter keeps
        its own, whatever their size)."""
        if self.block_bytes > WHOLE_BLOCK_BYTES and not self.family.attention_only:
            raise BlockTooLarge(
                f"this view needs whole blocks of attention, {self.n_heads} heads × {len(self.tokens):,}² tokens = "
                f"{self.block_bytes / 1024**2:,.0f} MiB each, past the lab's {WHOLE_BLOCK_BYTES // 1024**2} MiB; "
                f"at this length the heatmap, the attends view and the worked example read windows of rows"
            )

    def weight_rows(self, layer: int, heads: list[int], queries: range) -> Tensor:
        """The weights of some heads' query rows, [head, query, key], as Run.weights has them: cut from the kept
        block (its bits), or computed from q and k (score_rows: to float32 rounding)."""
        self._check(layer, max(heads))
        kept = self.kept_weights(layer)
        if kept is None and self.padded_to is not None:  # short: its block, as its pass made it
            kept = self.weights(layer)
        if kept is not None:
            return kept[heads, queries.start : queries.stop]
        return self.score_rows(layer, heads, queries, softmax=True)

    def score_rows(self, layer: int, heads: list[int], queries: range, softmax: bool = False) -> Tensor:
        """Some heads' query rows of the scores (or, with `softmax`, of the weights), [head, query, key],
        computed in chunks of ROW_CHUNK rows that start at multiples of it, so that a row is computed alike
        whichever rows are asked with it. They equal the whole block's (Run.weights) to float32 rounding: a
        chunk is a matrix product of another shape than the block's, whose sums may differ in the last bit
        (on some CPUs they do)."""
        self._check(layer, max(heads))
        n = len(self.tokens)
        first = queries.start // ROW_CHUNK * ROW_CHUNK
        last = min(n, -(-queries.stop // ROW_CHUNK) * ROW_CHUNK)
        rows = torch.empty(len(heads), last - first, n, dtype=self.dtype)
        hidden = 0.0 if softmax else torch.finfo(self.dtype).min  # a hidden key's weight, and its score
        with torch.inference_mode():
            for start in range(first, last, ROW_CHUNK):
                stop = min(start + ROW_CHUNK, n)
                scores = self._chunk_scores(layer, heads, start, stop)
                seen = scores.shape[-1]
                out = rows[:, start - first : stop - first]
                out[..., :seen] = softmax_weights(scores) if softmax else scores
                out[..., seen:] = hidden
        return rows[:, queries.start - first : queries.stop - first]

    def _chunk_scores(self, layer: int, heads: list[int], start: int, stop: int) -> Tensor:
        """The scores of queries [start, stop) over the keys they may see at most, [head, query, key]. Under
        the causal mask (no window, no position bias) only the keys before `stop`: the later ones are hidden,
        their scores the float32 minimum and their weights exactly 0; and the mask is added only where it
        hides something, since adding 0 changes no score: at 8,192 tokens building and adding the whole mask
        took most of a row's time."""
        scoring = self.scoring[layer]
        if scoring.window is not None or names.attn(layer, "position_bias") in self.activations:
            return self.scores(layer, heads, range(start, stop))
        causal = self.spec.mask == "causal"
        seen = stop if causal else len(self.tokens)
        if heads == list(range(heads[0], heads[-1] + 1)):
            heads = slice(heads[0], heads[-1] + 1)  # a view of consecutive heads, not a copy of their k
        q = self.activations[names.attn(layer, "q")][:, start:stop][heads]
        k = self.activations[names.attn(layer, "k")][:, :seen][heads]
        scores = q @ k.transpose(-1, -2) * scoring.scale
        if causal:
            # the diagonal block's upper triangle
            scores[..., start:stop] += additive_mask("causal", stop - start, dtype=scores.dtype)
        return scores

    def kept_weights(self, layer: int) -> Tensor | None:
        """Block `layer`'s weights if they need no computing now (Run.weights), else None."""
        kept = self.activations.get(names.attn(layer, "weights"))
        return kept if kept is not None else self.blocks.kept(self.run_id, layer)

    def query(self, layer: int, head: int, index: int) -> dict[str, Tensor]:
        """One query token's view of one head: its q, every k and v, its scores and weights rows, its context
        and what of it reaches W_O. Linear in the tokens: only this row of the scores is made."""
        self.check_adapter()
        self._check(layer, head)
        self.check_token(index)
        q, k, v, context = (self.activations[names.attn(layer, name)][head] for name in ("q", "k", "v", "context"))
        row = range(index, index + 1)
        return {
            "q": q[index],
            "k": k,
            "v": v,
            "scores": self.score_rows(layer, [head], row)[0, 0],
            "weights": self.weight_rows(layer, [head], row)[0, 0],
            "context": context[index],
            "context_to_output": torch.zeros_like(context[index]) if self.ablated(layer, head) else context[index],
        }

    def layer(self, layer: int) -> dict[str, Tensor]:
        """The block's rows after attention, its FFN and its output, as this family records them."""
        self.check_adapter()
        self._check(layer)
        return {name: self.activations[names.block(layer, name)] for name in names.BLOCK}

    def token_trace(self, index: int) -> dict:
        """One token's rows through the whole pipeline: embeddings, then every block."""
        self.check_token(index)
        return {
            "index": index,
            "embeddings": {name: rows[index] for name, rows in self.embeddings().items()},
            "layers": [
                {"layer": layer, **{name: rows[index] for name, rows in self.layer(layer).items()}}
                for layer in range(self.n_layers)
            ],
        }

    def embeddings(self) -> dict[str, Tensor]:
        """The embedding stages this family has (word rows always; positions, types, sum, LayerNorm)."""
        self.check_adapter()
        found = ((name, self.activations.get(names.embedding(name))) for name in names.EMBEDDINGS)
        return {name: rows for name, rows in found if rows is not None}

    def block_input(self, layer: int) -> Tensor:
        """What block `layer` reads: the last embedding stage for block 0, else the block before's output."""
        if layer == 0:
            return list(self.embeddings().values())[-1]
        return self.activations[names.block(layer - 1, "output")]

    def attention(self, layer: int | None = None, head: int | None = None) -> list[Tensor]:
        """Weights per block, [head, query_pos, key_pos] each: every block, or one, or one head of one."""
        if head is not None and layer is None:
            raise OutOfRange("a head needs its layer: give both")
        self._check(layer or 0, head or 0)  # refused before any computing
        layers = range(self.n_layers) if layer is None else [layer]
        blocks = [self.weights(index) for index in layers]
        return blocks if head is None else [block[head : head + 1] for block in blocks]

    def check_adapter(self) -> None:
        """NeedsAdapter for a model without one: only its weights and last hidden state are recorded."""
        if self.family.attention_only:
            raise NeedsAdapter(reason(self.family.name))

    def check_token(self, index: int) -> None:
        if not 0 <= index < len(self.tokens):
            raise OutOfRange(f"token {index} does not exist: tokens are 0 to {len(self.tokens) - 1}")

    def check_layer(self, layer: int) -> None:
        self._check(layer)

    def _check(self, layer: int, head: int = 0) -> None:
        if not 0 <= layer < self.n_layers:
            raise OutOfRange(f"layer {layer} does not exist: layers are 0 to {self.n_layers - 1}")
        if not 0 <= head < self.n_heads:
            raise OutOfRange(f"head {head} does not exist: heads are 0 to {self.n_heads - 1}")


def pick(blocks: list[Tensor], layer: int | None, head: int | None) -> list[Tensor]:
    """Every block of [head, query_pos, key_pos] matrices, or one block, or one head of one."""
    if head is not None and layer is None:
        raise OutOfRange("a head needs its layer: give both")
    if layer is not None and not 0 <= layer < len(blocks):
        raise OutOfRange(f"layer {layer} does not exist: layers are 0 to {len(blocks) - 1}")
    n_heads = len(blocks[0])
    if head is not None and not 0 <= head < n_heads:
        raise OutOfRange(f"head {head} does not exist: heads are 0 to {n_heads - 1}")
    chosen = blocks if layer is None else [blocks[layer]]
    return chosen if head is None else [block[head : head + 1] for block in chosen]


def pad_rows(values: Tensor, padding: int) -> Tensor:
    """[head, pos, d] with `padding` rows of zeros after the last position."""
    return torch.nn.functional.pad(values, (0, 0, 0, padding))
