"""One forward pass of a model with every intermediate recorded by forward hooks.

Activations are named by where they live (app.engine.names): `blocks.3.attn.weights` is block 3's
softmax(QKᵀ/√d + mask). The numbers are the model's own: hooks read what the real transformers modules
compute. The weights are computed from the recorded q and k when a view asks for a block (Run.weights), as
the model's attention computes them; only a model without an adapter keeps its output_attentions. Where
the modules sit is the family's business (app.engine.families); this file knows no module names.
"""

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from app.engine.families.base import Family, Hook
from app.engine.names import LAYER, attn

Heads = tuple[tuple[int, int], ...]  # (layer, head) pairs
NEXT_TOKENS = 20  # the next-token candidates kept per position, for a model with an LM head
# The LM head's best next tokens after each position, best first: ids, logits and probabilities, [pos, NEXT_TOKENS].
Candidates = tuple[Tensor, Tensor, Tensor]


def hook_table(family: Family, config) -> list[tuple[str, str, Hook]]:
    """(module path, block index as text or "", hook) for every hook of the model, block by block."""
    table = []
    for hook in family.hooks(config):
        if "{block}" not in hook.module:
            table.append((hook.module, "", hook))
            continue
        for layer in range(config.num_hidden_layers):
            table.append((hook.module.format(block=f"{family.blocks}.{layer}"), str(layer), hook))
    return table


def pad_id(model) -> int:
    """What fills the padding: the model's pad id, or 0 where it has none (GPT-2); masked either way."""
    return model.config.pad_token_id if model.config.pad_token_id is not None else 0


def padded_mask(
    kind: str, length: int, longest: int, window: int | None = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """A sequence's additive mask inside a batch: its own mask (and window), and the padding keys hidden.
    [query, key]"""
    mask = torch.full((longest, longest), torch.finfo(dtype).min, dtype=dtype)
    mask[:, :length] = 0
    mask[:length, :length] = additive_mask(kind, length, window, dtype=dtype)
    return mask


# model -> [(module, block index as text or "", hook)]: looked up once per model, not on every pass.
_HOOKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def hooked(model: torch.nn.Module, family: Family) -> list[tuple[torch.nn.Module, str, Hook]]:
    if model not in _HOOKED:
        base = model.base_model
        _HOOKED[model] = [
            (base.get_submodule(path), layer, hook) for path, layer, hook in hook_table(family, model.config)
        ]
    return _HOOKED[model]


def additive_mask(
    kind: str,
    n_tokens: int,
    window: int | None = None,
    queries: range | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """What the model adds to QKᵀ/√d: 0 where a query may look, the minimum of the model's dtype where it may
    not (a float32 mask would turn a bfloat16 model's scores into float32 ones, which its eager pass never makes).
    `window`: a sliding window's length (Scoring): a query sees the keys fewer than `window` positions
    away, before it under the causal mask (itself and the window − 1 tokens before it), on either side
    under the bidirectional one. `queries`: only these rows (all by default). [query_pos, key_pos]

    exp(minimum - max) underflows to exactly 0, so masked weights are exactly 0, as in the model.
    """
    queries = range(n_tokens) if queries is None else queries
    offset = torch.arange(n_tokens)[None, :] - torch.arange(queries.start, queries.stop)[:, None]  # key - query
    hidden = offset > 0 if kind == "causal" else torch.zeros(offset.shape, dtype=torch.bool)
    if window is not None:
        hidden |= (offset <= -window) | (offset >= window)
    return torch.zeros(offset.shape, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)


@dataclass(frozen=True)
class Scoring:
    """What a block does to q·k before its softmax, besides the mask it is read with: the scale (1/√d_head
    in most models; a GPT-2 may leave it out or divide it by the block's number too) and its sliding window
    (None: the whole context the mask allows)."""

    scale: float
    window: int | None


def head_dim(config) -> int:
    """The width of one head's q, k and v: the config's own where it sets one (a Llama may), else an even
    share of the hidden size."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


# model -> its blocks' Scoring: read once per model, as the modules do not change.
_SCORING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def block_scoring(model: torch.nn.Module, family: Family) -> tuple[Scoring, ...]:
    """Each block's scoring as the model does it: the scale its attention module keeps (transformers'
    `scaling`, Gemma's 1/√query_pre_attn_scalar; MPNet and ModernBERT divide by √d_head in their code), and
    the window as transformers' masks make it: the one its attention module keeps (`sliding_window`, the
    exclusive bound it gives flash attention: ModernBERT's local_attention / 2 + 1, Gemma 3's and Qwen's in
    their sliding blocks), else the config's (a Mistral's `sliding_window` in every block, a model with
    `layer_types` in the blocks marked "sliding_attention"). None for a model without an adapter: its
    modules are not read."""
    if family.attention_only:
        return ()
    if model not in _SCORING:
        config = model.config
        window, types = getattr(config, "sliding_window", None), getattr(config, "layer_types", None)
        scoring = []
        for layer, block in enumerate(model.base_model.get_submodule(family.blocks)):
            modules = list(block.modules())
            kept = (module.scaling for module in modules if isinstance(getattr(module, "scaling", None), float))
            own = [module.sliding_window for module in modules if hasattr(module, "sliding_window")]
            slides = types is None or types[layer] == "sliding_attention"
            scoring.append(Scoring(next(kept, head_dim(config) ** -0.5), own[0] if own else window if slides else None))
        _SCORING[model] = tuple(scoring)
    return _SCORING[model]


@contextmanager
def thread_hooks() -> Iterator[Callable[..., None]]:
    """Yields `hook(module, fn, before=False, with_kwargs=False, first=False)`, which puts fn on the module as a
    forward hook (a pre-hook with `before`) acting only in the passes of this thread; all are removed at the
    end. `first`: before the module's other hooks, the recording's among them (recording): a hook that changes
    a value in a recorded pass (patching) is put first, so that the value recorded is the changed one.

    Hooks are global to a model, so two passes may run at once on one model (the model's threads, a view's,
    the atlas's) without one's recording, zeroing or patching reaching into the other.
    """
    owner = threading.get_ident()
    handles = []

    def hook(
        module: torch.nn.Module, fn: Callable, before: bool = False, with_kwargs: bool = False, first: bool = False
    ) -> None:
        def in_this_thread(*args):
            return fn(*args) if threading.get_ident() == owner else None

        register = module.register_forward_pre_hook if before else module.register_forward_hook
        handles.append(register(in_this_thread, with_kwargs=with_kwargs, prepend=first))

    try:
        yield hook
    finally:
        for handle in handles:
            handle.remove()


# What the passes of each thread record (recording): None where a thread records nothing.
_RECORDED = threading.local()
# The models whose recording hooks are on, and the lock that puts them on once per model.
_RECORDING: weakref.WeakSet = weakref.WeakSet()
_RECORDING_LOCK = threading.Lock()


@contextmanager
def recording(model: torch.nn.Module, family: Family) -> Iterator[dict[str, Tensor]]:
    """Records every module of the family's table in this thread's passes for the duration of the block.
    The hooks are put on the model at its first recording and stay: putting 59 on and taking them off again
    cost a short pass a noticeable share of its time (bench/README.md), and a pass nobody records (a pooling
    pass, IG's, the search's) finds no recording in its thread and goes on at once."""
    with _RECORDING_LOCK:
        if model not in _RECORDING:
            _put_recording_hooks(model, family)
            _RECORDING.add(model)
    activations: dict[str, Tensor] = {}
    _RECORDED.activations = activations
    try:
        yield activations
    finally:
        _RECORDED.activations = None


def _put_recording_hooks(model: torch.nn.Module, family: Family) -> None:
    for module, layer, table_hook in hooked(model, family):
        # No copies: in eval mode nothing the model computes is modified in place after its module returns (the
        # output_attentions tests would see it), so keeping the tensors is enough.
        names: dict[str, str] = {}  # the table's names with this block's number, each made once

        def record(module, args, out=None, layer=layer, read=table_hook.read, names=names):
            activations = getattr(_RECORDED, "activations", None)
            if activations is None:
                return
            for name, value in read(args, out).items():
                if name not in names:
                    names[name] = name.replace(LAYER, layer)
                activations[names[name]] = value

        register = module.register_forward_pre_hook if table_hook.before else module.register_forward_hook
        register(record)


# model -> passes under way with its fused attention (fused_attention), and whether it has one at all.
_FUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# model -> passes under way that need its eager attention (eager_attention): none switches it meanwhile.
_EAGER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FUSED_LOCK = threading.Condition()  # a pass waits on it for the other kind's passes to end


# A pass whose eager attention would make a block's weights larger than this runs the fused attention.
FUSED_FROM_BYTES = 64 * 1024**2
# An eager pass hands its weights on (capture_batch's weights_made) only while all its blocks' take at most
# this: MiniLM at 512 tokens takes 72 MiB, a class's 48 short prompts a few.
MADE_WEIGHTS_BYTES = 80 * 1024**2


@contextmanager
def fused_attention(model: torch.nn.Module, family: Family, batch: int, tokens: int) -> Iterator[None]:
    """A long pass with the model's fused attention (PyTorch's scaled_dot_product_attention) where transformers
    offers it for the model. A run does not keep the weights, and the eager attention makes every block's
    batch × heads × tokens² floats, 2 GiB for 8 heads at 8,192 tokens, where the fused one makes none
    (causal, no window) or a mask. Its outputs equal the eager ones to float rounding (up to 1.4e-6 in
    MiniLM's last weights): a pass below FUSED_FROM_BYTES stays eager, whose numbers the computed weights
    equal bit for bit. The model goes back to eager attention when the last pass using the fused one ends:
    output_attentions and a model without an adapter need it."""
    if batch * model.config.num_attention_heads * tokens**2 * 4 <= FUSED_FROM_BYTES:
        yield
        return
    with _FUSED_LOCK:
        _FUSED_LOCK.wait_for(lambda: not _EAGER.get(model))  # a writing's step under way: a pass of one token
        if model not in _FUSED:
            model.set_attn_implementation("sdpa")
            fused = model.config._attn_implementation == "sdpa"  # a model without it keeps eager (MPNet)
            model.set_attn_implementation("eager")
            _FUSED[model] = 0 if fused and not family.attention_only else None
        if _FUSED[model] is not None:
            if _FUSED[model] == 0:
                model.set_attn_implementation("sdpa")
            _FUSED[model] += 1
    try:
        yield
    finally:
        with _FUSED_LOCK:
            if _FUSED[model] is not None:
                _FUSED[model] -= 1
                if _FUSED[model] == 0:
                    model.set_attn_implementation("eager")
                    _FUSED_LOCK.notify_all()


@contextmanager
def eager_attention(model: torch.nn.Module) -> Iterator[None]:
    """A pass that needs the model's eager attention whatever its length (a writing's step returns its weights,
    output_attentions): it waits for the fused passes under way on other threads to end (fused_attention), and
    no other pass switches the model to its fused attention until it is over. A model's attention is one
    setting for every thread: switched under a step, the step would get no weights and other numbers."""
    with _FUSED_LOCK:
        _FUSED_LOCK.wait_for(lambda: not _FUSED.get(model))
        _EAGER[model] = _EAGER.get(model, 0) + 1
    try:
        yield
    finally:
        with _FUSED_LOCK:
            _EAGER[model] -= 1
            _FUSED_LOCK.notify_all()


@contextmanager
def ablating(model: torch.nn.Module, family: Family, heads: Heads) -> Iterator[None]:
    """Switches heads off: their context (their columns of W_O's input) is zeroed before W_O. Their
    attention weights are still computed and recorded; only what they pass on is gone."""
    layers = sorted({layer for layer, _ in heads})
    chosen = {layer: [head for chosen_layer, head in heads if chosen_layer == layer] for layer in layers}
    with _zeroing_contexts(model, family, layers, lambda layer: (..., chosen[layer], slice(None))):
        yield


@contextmanager
def ablating_rows(model: torch.nn.Module, family: Family, layer: int, heads: list[int]) -> Iterator[None]:
    """Switches one head of block `layer` off in each row of a padded pass: head heads[r] in row r, as
    ablating does for a whole pass, so that one pass holds a block's every head switched off in turn."""
    rows = torch.arange(len(heads), device=model.device)
    chosen = torch.tensor(heads, device=model.device)
    with _zeroing_contexts(model, family, [layer], lambda _: (rows, slice(None), chosen)):
        yield


@contextmanager
def block_outputs(model: torch.nn.Module, family: Family) -> Iterator[list]:
    """Records what each block returns in this thread's passes (a tensor, or a tuple whose first part is
    the hidden states [batch, pos, d_model]), block by block, for starting_at."""
    outputs: list = []
    with thread_hooks() as hook:
        for block in model.base_model.get_submodule(family.blocks):
            hook(block, lambda module, args, out: outputs.append(out))
        yield outputs


class _Skipped:
    """A block's forward while some threads skip it: in those it returns what they gave, in the others it
    computes as before."""

    def __init__(self, block: torch.nn.Module):
        self.block, self.own, self.before = block, block.forward, vars(block).get("forward")
        self.outputs: dict[int, object] = {}  # thread id -> what the block returns in that thread's passes
        block.forward = self

    def __call__(self, *args, **kwargs):
        owner = threading.get_ident()
        return self.outputs[owner] if owner in self.outputs else self.own(*args, **kwargs)

    def restore(self) -> None:
        if self.before is None:
            del self.block.forward  # the class's own forward again
        else:
            self.block.forward = self.before


_SKIPPED: dict[torch.nn.Module, _Skipped] = {}
_SKIPPED_LOCK = threading.Lock()


@contextmanager
def starting_at(model: torch.nn.Module, family: Family, outputs: list, times: int) -> Iterator[None]:
    """This thread's passes skip the first len(outputs) blocks: block i returns outputs[i] (block_outputs of
    a pass on the same padded inputs) with its rows repeated `times` times (row r of the pass is row
    r mod batch of the recorded one), so that the model computes from block len(outputs) on. A switched-off
    head changes nothing before its block: its ablated passes may start at the block's input."""
    owner = threading.get_ident()
    blocks = list(model.base_model.get_submodule(family.blocks))[: len(outputs)]
    with _SKIPPED_LOCK:
        for block, out in zip(blocks, outputs, strict=True):
            if block not in _SKIPPED:
                _SKIPPED[block] = _Skipped(block)
            _SKIPPED[block].outputs[owner] = _repeat_rows(out, times)
    try:
        yield
    finally:
        with _SKIPPED_LOCK:
            for block in blocks:
                del _SKIPPED[block].outputs[owner]
                if not _SKIPPED[block].outputs:
                    _SKIPPED.pop(block).restore()


def _repeat_rows(out, times: int):
    if isinstance(out, Tensor):
        return out.repeat(times, *[1] * (out.dim() - 1))
    if isinstance(out, tuple):
        return tuple(_repeat_rows(part, times) for part in out)
    return out


@contextmanager
def _zeroing_contexts(model, family: Family, layers: list[int], part: Callable[[int], tuple]):
    """Zeroes the cells `part(layer)` indexes of each block's context ([batch, pos, head, d]) before W_O, in
    this thread's passes only (thread_hooks)."""
    with thread_hooks() as hook:
        for layer in layers:

            def zero(module, args, layer=layer):
                context = args[0].clone().unflatten(-1, (model.config.num_attention_heads, -1))
                context[part(layer)] = 0
                return (context.flatten(-2), *args[1:])

            w_o = model.base_model.get_submodule(f"{family.blocks}.{layer}.{family.attention_output}")
            hook(w_o, zero, before=True)
        yield


@dataclass(frozen=True)
class Sequence:
    input_ids: Tensor  # [pos]
    token_type_ids: Tensor  # [pos]
    mask: str  # "bidirectional" or "causal"


def capture(
    model: torch.nn.Module,
    family: Family,
    input_ids: Tensor,
    token_type_ids: Tensor,
    mask: str,
    ablate: Heads = (),
) -> tuple[dict[str, Tensor], Candidates | None]:
    """Runs the model once on one sequence ([pos] ids): every named activation, and the LM head's best next
    tokens after each position where the model has one (next_tokens), else None. The weights are among the
    activations only for a model without an adapter (capture_batch)."""
    return capture_batch(model, family, [Sequence(input_ids, token_type_ids, mask)], ablate)[0]


def capture_batch(
    model: torch.nn.Module,
    family: Family,
    sequences: list[Sequence],
    ablate: Heads = (),
    weights_made: Callable[[int, int, Tensor], None] | None = None,
) -> list[tuple[dict[str, Tensor], Candidates | None]]:
    """One forward pass of several sequences, padded on the right to the longest: each sequence's named
    activations and next-token candidates, cut back to its own length. Padding changes nothing a real token
    computes: an encoder's mask hides the padding keys (their weights are exactly 0), a decoder's causal mask
    keeps every real token before them, and positions count from 0 either way. The same heads are switched
    off in all. A model with an LM head runs its trunk, and the head a few positions at a time (next_tokens).
    `weights_made(row, layer, [head, query, key])` is given the weights an eager pass made anyway, each row's
    cut to its own tokens, so that they need not be computed again: bit for bit what Run.weights computes from
    q and k for a row the pass did not pad, to float rounding (within 1e-6) for a padded one; only up to
    MADE_WEIGHTS_BYTES of them, since the pass then holds every block's at once, where it holds one block's."""
    inputs = model_inputs(model, family, sequences)
    head = model.get_output_embeddings()
    # Recording hooks go first: a switched-off head's context is recorded as it computed it (weights·V),
    # and only then zeroed for the rest of the model.
    with (
        torch.inference_mode(),
        fused_attention(model, family, *inputs["input_ids"].shape),
        recording(model, family) as activations,
        ablating(model, family, ablate),
    ):
        # The weights grow with the square of the tokens: a run with an adapter keeps its q and k and
        # computes a block's weights when asked (Run.weights). A model without one is known by its weights.
        batch, tokens = inputs["input_ids"].shape
        every_block = batch * model.config.num_hidden_layers * model.config.num_attention_heads * tokens**2 * 4
        eager = model.config._attn_implementation == "eager"
        wanted = family.attention_only or (eager and weights_made is not None and every_block <= MADE_WEIGHTS_BYTES)
        out = (model if head is None else model.base_model)(**inputs, output_attentions=wanted)
        attentions = [on_cpu(weights) for weights in out.attentions or ()]
    lengths = [len(sequence.input_ids) for sequence in sequences]
    if family.attention_only:
        for layer, weights in enumerate(attentions):
            activations[attn(layer, "weights")] = weights  # [batch, head, query_pos, key_pos]
    elif wanted:
        for row, length in enumerate(lengths):
            for layer, weights in enumerate(attentions):
                # A row of a batch is copied, or it would keep the whole batch's weights alive.
                made = weights[row] if len(lengths) == 1 else weights[row, :, :length, :length].clone()
                weights_made(row, layer, made)
    if family.finish is not None:
        family.finish(activations, model)
    parts = {name: own_parts(name, on_cpu(values), lengths) for name, values in activations.items()}
    last = own_parts("rows", out.last_hidden_state, lengths) if head is not None else None
    return [
        ({name: rows[row] for name, rows in parts.items()}, None if last is None else next_tokens(model, last[row]))
        for row in range(len(lengths))
    ]


def on_cpu(values: Tensor) -> Tensor:
    """A pass's tensor where the views read it: a pass on a GPU is brought back once, when it ends (the
    views compute on the CPU: weights from q and k, measures, encodings); one on the CPU is left as it is."""
    return values.cpu()


# Positions whose logits are made at once: every position's at once would be positions × vocabulary floats,
# 1.6 GB for 8,192 tokens of a 49,152-token vocabulary (SmolLM's), and twice that in float64 for the softmax.
LOGIT_ROWS = 512


@torch.inference_mode()
def next_tokens(model: torch.nn.Module, hidden: Tensor) -> Candidates:
    """The LM head's NEXT_TOKENS best tokens after each position of the last hidden states [pos, d_model], as
    the model's head makes its logits (soft-capped where the config says, Gemma's final_logit_softcapping), a
    chunk of LOGIT_ROWS positions at a time."""
    head, cap = model.get_output_embeddings(), getattr(model.config, "final_logit_softcapping", None)
    parts = []
    for start in range(0, len(hidden), LOGIT_ROWS):
        logits = head(hidden[start : start + LOGIT_ROWS])  # [pos, vocab]
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        parts.append(best_next(logits))
    return tuple(on_cpu(torch.cat(part)) for part in zip(*parts, strict=True))


def best_next(logits: Tensor) -> Candidates:
    """The NEXT_TOKENS best tokens of each row of logits: ids, logits, probabilities (softmax over the whole
    vocabulary, in float64 so that tiny probabilities keep their digits)."""
    top = logits.topk(min(NEXT_TOKENS, logits.shape[-1]), dim=-1)
    probabilities = (top.values.double() - logits.double().logsumexp(-1, keepdim=True)).exp()
    return top.indices, top.values, probabilities.float()


def final_states(model: torch.nn.Module, family: Family, sequence: Sequence, ablate: Heads = ()) -> Tensor:
    """The last hidden states of one sequence, after the final norm in a pre-norm model, and nothing else:
    no hooks, no attention weights kept, no LM head. [pos, d_model]"""
    inputs = model_inputs(model, family, [sequence])
    with (
        torch.inference_mode(),
        fused_attention(model, family, 1, len(sequence.input_ids)),
        ablating(model, family, ablate),
    ):
        return on_cpu(model.base_model(**inputs).last_hidden_state[0])


def model_inputs(model: torch.nn.Module, family: Family, sequences: list[Sequence]) -> dict[str, Tensor]:
    """The model's keyword inputs for sequences padded on the right to the longest. A model without an
    adapter reads one sequence at a time, with no mask but its own (Engine.compute_batch). On the model's device,
    masks in its dtype."""
    inputs = _inputs_on_cpu(model, family, sequences)
    return {kind: _to(value, model.device) for kind, value in inputs.items()}


def _to(value: Tensor | dict, device: torch.device) -> Tensor | dict:
    if isinstance(value, dict):
        return {kind: mask.to(device) for kind, mask in value.items()}
    return value.to(device)


def _inputs_on_cpu(model: torch.nn.Module, family: Family, sequences: list[Sequence]) -> dict:
    dtype = model.dtype
    lengths = [len(sequence.input_ids) for sequence in sequences]
    longest = max(lengths)
    pad = lambda values, fill=0: torch.nn.functional.pad(values, (0, longest - len(values)), value=fill)  # noqa: E731
    inputs = {"input_ids": torch.stack([pad(sequence.input_ids, pad_id(model)) for sequence in sequences])}
    if family.token_types:
        inputs["token_type_ids"] = torch.stack([pad(sequence.token_type_ids) for sequence in sequences])
    if family.decoder or family.attention_only:
        return inputs

    def masks(window: int | None) -> Tensor:  # [batch, 1, query, key]
        if window is None and all(sequence.mask == "bidirectional" for sequence in sequences):
            # Every query of a sequence sees the same keys, its own: one row per sequence, read for every query
            # (the same values as padded_mask's, made in a few operations instead of a few per sequence).
            hidden = torch.arange(longest)[None, :] >= torch.tensor(lengths)[:, None]
            keys = torch.zeros(len(sequences), longest, dtype=dtype).masked_fill(hidden, torch.finfo(dtype).min)
            return keys[:, None, None, :].expand(-1, 1, longest, -1)
        return torch.stack(
            [
                padded_mask(sequence.mask, length, longest, window, dtype)
                for sequence, length in zip(sequences, lengths, strict=True)
            ]
        )[:, None]

    # A prepared 4-D mask is used by the model as it is: how "causal" runs inside an encoder. An encoder
    # whose blocks are of several types (ModernBERT's, EmbeddingGemma's global and local blocks) takes one
    # per type, each with the window of its blocks.
    types = getattr(model.config, "layer_types", None)
    if types is None:
        if min(lengths) == longest and all(sequence.mask == "bidirectional" for sequence in sequences):
            # Nothing hidden: the model's own default, which adds no mask of zeros to every score (that add
            # and the mask's making cost a few percent of MiniLM's pass).
            return inputs
        inputs["attention_mask"] = masks(None)
    else:
        windows = {kind: scoring.window for kind, scoring in zip(types, block_scoring(model, family), strict=True)}
        inputs["attention_mask"] = {kind: masks(window) for kind, window in windows.items()}
    return inputs


def own_parts(name: str, values: Tensor, lengths: list[int]) -> list[Tensor]:
    """Each sequence's part of a batch tensor (one tensor shared by the whole batch where its first dimension
    is 1), its padding cut off, by the kind of activation the name is: [batch, head, query, key] (weights,
    position bias), [batch, head, pos, d_head] (the other attn.*), or [batch, pos, …] (rows, logits). Views,
    not copies: copying each part of a 48-prompt batch took a fifth of its pass, in new memory. The runs of a
    batch share its tensors, which the run cache counts once (app.serving.cache). One indexing per part, the
    kind read once per name: a class's batch cuts thousands of parts, and two steps each cost its pass."""
    rows = range(len(lengths)) if values.shape[0] > 1 else [0] * len(lengths)
    if name.endswith((".weights", ".position_bias")):
        return [values[row, :, :length, :length] for row, length in zip(rows, lengths, strict=True)]
    if ".attn." in name:
        return [values[row, :, :length] for row, length in zip(rows, lengths, strict=True)]
    return [values[row, :length] for row, length in zip(rows, lengths, strict=True)]


def attention_scores(q: Tensor, k: Tensor, mask: Tensor, scale: float, position_bias: Tensor | None = None) -> Tensor:
    """QKᵀ · scale (1/√d in most models: Scoring) + the relative-position bias where the model adds one +
    mask: the logits the model feeds to softmax. [head, query_pos, key_pos]"""
    scores = q @ k.transpose(-1, -2) * scale
    if position_bias is not None:
        scores = scores + position_bias
    return scores + mask


def softmax_weights(scores: Tensor) -> Tensor:
    """The weights of the scores [..., key] as the models' eager attention makes them: the softmax in float32,
    rounded to the scores' dtype (transformers' `softmax(dtype=torch.float32).to(query.dtype)`; the same
    numbers, bit for bit, as a softmax in bfloat16 or float16, which computes in float32 too)."""
    return scores.softmax(-1, dtype=torch.float32).to(scores.dtype)
