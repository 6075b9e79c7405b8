"""An encoder-decoder (T5, BART, Marian) read on a source and a target: the encoder's self-attention over the
source, the decoder's masked self-attention over the target, and its cross-attention from each target token to
the source tokens, the alignment picture of translation. The target is given, or written by the model greedily
first (as `generate(do_sample=False, num_beams=1)` writes it), then read in one teacher-forced pass like a given one.

One pass, every attention module hooked for the time of the pass (thread_hooks): q, k and v as the model
projects them, and T5's relative-position bias as its attention module returns it. The weights are computed from
them as the model's eager attention computes them:

    weights = softmax(q · kᵀ · scale + position_bias + mask)        # [head, query, key]

scale: the module's own (1/√d_head in BART and Marian, 1 in T5); mask: causal in the decoder's self-attention,
none elsewhere (one sequence each side: no padding). A cross-attention's q comes from the target, its k and v
from the encoder's output over the source: its weights are [head, target_pos, source_pos].

The decoder reads [decoder_start] + the target's tokens: its row i is the step that chooses target token i + 1.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor
from transformers import DynamicCache, EncoderDecoderCache

from app.engine import names
from app.engine.capture import additive_mask, attention_scores, softmax_weights, thread_hooks
from app.engine.engine import Engine
from app.engine.errors import InvalidInput, OutOfRange, PassFailed, TextTooLong
from app.engine.families.base import heads
from app.engine.families.encoder_decoder import EncoderDecoderFamily
from app.engine.labels import token_labels
from app.engine.model import LoadedModel
from app.engine.runs import Token
from app.engine.spec import EncoderDecoderSpec

KINDS = ("encoder", "decoder", "cross")  # the three kinds of attention, as a run's JSON names them
# (stack, attention inside a block) of each kind: names.stack_attn's words
WHERE = {"encoder": ("encoder", "attn"), "decoder": ("decoder", "attn"), "cross": ("decoder", "cross_attn")}
MAX_NEW_TOKENS = 64  # target tokens a greedy writing may take, at most
DEFAULT_NEW_TOKENS = 32

# Why a measure beyond the weights and the norm-weighted attention is not computed for an encoder-decoder's run:
# said by the run, in words.
NOT_MEASURED = {
    "alti": (
        "ALTI follows each token's share of the residual stream through one stack; a cross-attention adds the "
        "source's rows into the target's stream, which ALTI as defined (Ferrando et al. 2022) does not decompose, "
        "so it is not computed for an encoder-decoder"
    ),
}


@dataclass
class EncoderDecoderRun:
    spec: EncoderDecoderSpec
    source: list[Token]  # the source as the tokenizer reads it, segment "source"
    target: list[Token]  # what the decoder reads: its start token, then the target's tokens, segment "target"
    written: bool  # the target was written by the model (greedy), not given
    source_truncated: bool
    activations: dict[str, Tensor]  # named as names.stack_attn names them, one sequence: no batch dimension
    scales: dict[str, list[float]]  # each kind's per-block scale of q·k
    family: EncoderDecoderFamily
    storages: dict[int, int] = field(init=False)  # {storage address: bytes}: what the run holds

    def __post_init__(self):
        held = (tensor.untyped_storage() for tensor in self.activations.values())
        self.storages = {storage.data_ptr(): storage.nbytes() for storage in held}

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def nbytes(self) -> int:
        return sum(self.storages.values())

    def layers(self, kind: str) -> int:
        stack, attention = WHERE[kind]
        return sum(1 for name in self.activations if name.startswith(f"{stack}.") and name.endswith(f".{attention}.q"))

    def weights(self, kind: str, layer: int) -> Tensor:
        """One block's attention weights of one kind, every head: [head, query, key]; encoder: source × source,
        decoder: target × target (causal), cross: target × source."""
        if kind not in KINDS:
            raise OutOfRange(f"no attention {kind!r}: an encoder-decoder has {', '.join(KINDS)}")
        if not 0 <= layer < self.layers(kind):
            raise OutOfRange(f"no block {layer} in the {kind} attention: blocks are 0 to {self.layers(kind) - 1}")
        stack, attention = WHERE[kind]
        name = lambda part: names.stack_attn(stack, layer, part, attention)  # noqa: E731
        q, k = self.activations[name("q")], self.activations[name("k")]
        # One sequence each side, no padding: the decoder's self-attention alone hides keys (those after the query).
        if kind == "decoder":
            mask = additive_mask("causal", k.shape[-2], dtype=q.dtype)
        else:
            mask = torch.zeros(q.shape[-2], k.shape[-2], dtype=q.dtype)
        scores = attention_scores(q, k, mask, self.scales[kind][layer], self.activations.get(name("position_bias")))
        return softmax_weights(scores)

    def all_weights(self, kind: str) -> Tensor:
        """Every block's weights of one kind: [layer, head, query, key]."""
        return torch.stack([self.weights(kind, layer) for layer in range(self.layers(kind))])

    def norm(self, kind: str, layer: int, w_o: Tensor) -> Tensor:
        """Norm-weighted attention (Kobayashi et al. 2020) of one block of one kind: ‖α_ij f_h(x_j)‖ = α_ij
        ‖f_h(x_j)‖, f_h(x_j) = (x_j W_V^h + b_V^h) W_O^h, the value vector as it leaves the head through its columns
        of W_O (its bias left out, as in the paper). It carries to cross-attention as it is: there x_j is source
        token j's row of the encoder's output, which the target's query reads. `w_o`: the attention module's W_O,
        [d_model, heads·d_head]. In float32. [head, query, key]"""
        stack, attention = WHERE[kind]
        v = self.activations[names.stack_attn(stack, layer, "v", attention)].float()  # [head, key, d_head]
        per_head = w_o.float().unflatten(1, (v.shape[0], v.shape[-1])).permute(1, 2, 0)  # [head, d_head, d_model]
        return self.weights(kind, layer).float() * (v @ per_head).norm(dim=-1)[:, None, :]


class EncoderDecoderEngine:
    """One loaded encoder-decoder: what a request may ask of it (EncoderDecoderSpec, checked) and its runs, computed
    here and now (it knows nothing of HTTP or caches)."""

    kind = "encoder-decoder"

    def __init__(self, loaded: LoadedModel, max_chars: int, max_tokens: int | None = None, blocks=None):
        """As Engine's (make_engine builds either); `blocks` is unused: its runs keep no blocks of weights."""
        self.loaded = loaded
        self.family: EncoderDecoderFamily = loaded.family
        self.max_chars = max_chars
        self.max_tokens = min(loaded.max_tokens, max_tokens or loaded.max_tokens)
        self.weights_bytes = loaded.nbytes
        model = loaded.model
        self.encoder_layers = len(model.get_encoder().get_submodule(self.family.blocks))
        self.decoder_layers = len(model.get_decoder().get_submodule(self.family.blocks))
        attention = model.get_encoder().get_submodule(f"{self.family.blocks}.0.{self.family.self_attention}")
        self.heads = getattr(attention, "num_heads", None) or attention.n_heads
        self.head_dim = getattr(attention, "head_dim", None) or attention.key_value_proj_dim
        self.info = self._info()

    def _info(self) -> dict:
        loaded, config, family = self.loaded, self.loaded.model.config, self.family
        hidden = config.d_model
        return {
            "name": loaded.name,
            "kind": self.kind,
            "dtype": loaded.dtype,
            "device": str(loaded.device),
            "family": family.name,
            "attention_only": None,
            # The single-text views read one stack: an encoder-decoder's runs are its three kinds of attention.
            "capabilities": dict.fromkeys(("qkv", "worked_example", "ffn", "measures", "ablation", "pipeline"), False),
            "layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "heads": self.heads,
            "key_value_heads": self.heads,
            "hidden_size": hidden,
            "head_dim": self.head_dim,
            "intermediate_size": getattr(config, "d_ff", None) or getattr(config, "encoder_ffn_dim", None),
            "vocab_size": config.vocab_size,
            "max_tokens": loaded.max_tokens,
            "max_input_tokens": self.max_tokens,
            "max_seq_length": self.max_tokens,
            "decoder": False,
            "scales": [self.scale("encoder", layer) for layer in range(self.encoder_layers)],
            "windows": [None] * self.encoder_layers,
            "score_notes": self._score_notes(),
            "masks": ["bidirectional"],
            "default_mask": "bidirectional",
            "poolings": ["mean"],
            "default_pooling": "mean",
            "prompts": {},
            "default_prompt": None,
            "sentence_modules": [],
            "normalization": family.normalization,
            # Marian's fixed sinusoids are absolute positions (score_notes says which kind)
            "positions": "relative" if family.positions == "relative" else "absolute",
            "ffn": None,
            "ffn_gated": None,
            "ffn_activation": None,
            "token_types": False,
            "position_offset": 0,
            "next_tokens": False,
            "cannot_write": loaded.cannot_write,
            "logit_softcapping": None,
            "activations": {},
            "pair_layout": "source → target",
            "attention_kinds": list(KINDS),
            "max_new_tokens": MAX_NEW_TOKENS,
            "not_measured": NOT_MEASURED,
        }

    def _score_notes(self) -> list[str]:
        notes = []
        if self.family.position_bias:
            notes.append(
                "a relative-position bias (log-spaced buckets of the offset, both ways in the encoder, backwards in "
                "the decoder) is added to every self-attention score; cross-attention adds none"
            )
        if self.scale("encoder", 0) == 1.0:
            notes.append("scores are q·k, not divided by √d_head (T5 folds the scale into its weights)")
        if self.family.positions == "sinusoidal":
            notes.append("positions are fixed sinusoids added to the token rows, not a learned table")
        return notes

    def attention_module(self, kind: str, layer: int) -> torch.nn.Module:
        stack, attention = WHERE[kind]
        module = self.family.self_attention if attention == "attn" else self.family.cross_attention
        half = self.loaded.model.get_encoder() if stack == "encoder" else self.loaded.model.get_decoder()
        return half.get_submodule(f"{self.family.blocks}.{layer}.{module}")

    def all_norms(self, run: EncoderDecoderRun, kind: str) -> Tensor:
        """Every block's norm-weighted attention of one kind (EncoderDecoderRun.norm): [layer, head, query, key]."""
        return torch.stack([run.norm(kind, layer, self.w_o(kind, layer)) for layer in range(self.layers(kind))])

    def w_o(self, kind: str, layer: int) -> Tensor:
        """An attention module's W_O: [d_model, heads·d_head]."""
        return self.attention_module(kind, layer).get_submodule(self.family.output_projection).weight.detach()

    def scale(self, kind: str, layer: int) -> float:
        scaling = getattr(self.attention_module(kind, layer), "scaling", None)
        return float(scaling) if isinstance(scaling, (int, float)) else self.head_dim**-0.5

    # -- what a request may ask --------------------------------------------------------------------------------

    def spec(self, *args, **kwargs):
        """The single-text run of an encoder or a decoder: not what an encoder-decoder reads."""
        raise InvalidInput(
            f"{self.loaded.name} is an encoder-decoder ({self.family.name}): it reads a source and a target, not one "
            "text; ask POST /api/analyze with `text` (the source) and, if you want, `target`"
        )

    def pair_spec(self, source: str, target: str | None = None, max_new_tokens: int | None = None):
        """The run a request asks for, checked: the source and the target within the character cap, and for a
        target to write, its length within MAX_NEW_TOKENS."""
        chars = len(source) + len(target or "")
        if chars > self.max_chars:
            texts = "the source has" if target is None else "the source and target have"
            raise TextTooLong(f"{texts} {chars:,} characters; the limit is {self.max_chars:,}")
        if not source.strip():
            raise InvalidInput("the source is empty: there is nothing to read")
        if target is not None and max_new_tokens is not None:
            raise InvalidInput("give a target or max_new_tokens (to have the model write one), not both")
        if target is None:
            max_new_tokens = DEFAULT_NEW_TOKENS if max_new_tokens is None else max_new_tokens
            if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
                raise InvalidInput(f"max_new_tokens is {max_new_tokens}: this lab writes 1 to {MAX_NEW_TOKENS} tokens")
        return EncoderDecoderSpec(
            self.loaded.name, self.loaded.digest, source, target, max_new_tokens if target is None else None
        )

    # -- tokens ------------------------------------------------------------------------------------------------

    def source_tokens(self, source: str) -> tuple[list[Token], bool]:
        encoding = self.loaded.tokenizer(
            source,
            truncation=True,
            max_length=self.max_tokens,
            return_offsets_mapping=True,
            return_overflowing_tokens=True,
        )
        ids, offsets = encoding["input_ids"][0], encoding["offset_mapping"][0]
        added = [sequence_id is None for sequence_id in encoding.sequence_ids(0)]
        return self._tokens(ids, offsets, added, "source"), len(encoding["input_ids"]) > 1

    def target_tokens(self, target: str) -> list[Token]:
        """The decoder's tokens for a given target: its start token, then the target as the tokenizer reads a
        target (text_target: an end token after it), cut to the positions the decoder reads."""
        encoding = self.loaded.tokenizer(
            text_target=target, truncation=True, max_length=self.max_tokens - 1, return_offsets_mapping=True
        )
        ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
        added = [True, *(sequence_id is None for sequence_id in encoding.sequence_ids())]
        if self.start_id is None:
            raise InvalidInput(
                f"{self.loaded.name} has no decoder_start_token_id: its decoder has no first token to read"
            )
        return self._tokens([self.start_id, *ids], [(0, 0), *offsets], added, "target")

    def written_tokens(self, ids: list[int]) -> list[Token]:
        """The decoder's tokens for a written target (ids from the start token on): offsets index the text the
        pieces spell, one after another."""
        special = set(self.loaded.tokenizer.all_special_ids)
        offsets, at = [], 0
        for piece, token_id in zip(self.pieces(ids), ids, strict=True):
            length = 0 if token_id in special else len(piece)
            offsets.append((at, at + length))
            at += length
        return self._tokens(ids, offsets, [token_id in special for token_id in ids], "target")

    def _tokens(self, ids: list[int], offsets, added: list[bool], segment: str) -> list[Token]:
        pieces, special = self.pieces(ids), set(self.loaded.tokenizer.all_special_ids)
        return [
            Token(index, piece, label, token_id, token_id in special, is_added, start, end, 0, segment)
            for index, (piece, label, token_id, is_added, (start, end)) in enumerate(
                zip(pieces, token_labels(pieces), ids, added, offsets, strict=True)
            )
        ]

    def pieces(self, ids: list[int]) -> list[str]:
        """Each token as a person reads it: the text a SentencePiece or byte-level piece stands for."""
        tokenizer = self.loaded.tokenizer
        pieces, special = tokenizer.convert_ids_to_tokens(ids), set(tokenizer.all_special_tokens)
        read = [piece if piece in special else tokenizer.convert_tokens_to_string([piece]) for piece in pieces]
        return [piece if "\ufffd" in text or not text else text for piece, text in zip(pieces, read, strict=True)]

    @property
    def start_id(self) -> int:
        config = self.loaded.model.generation_config
        start = config.decoder_start_token_id
        if start is None:
            start = self.loaded.model.config.decoder_start_token_id
        return start[0] if isinstance(start, list) else start

    # -- the passes ------------------------------------------------------------------------------------------

    def compute(self, spec: EncoderDecoderSpec) -> EncoderDecoderRun:
        """The run of a spec, here and now: the target written first where none is given, then one pass over
        both (a server takes the same steps in turns: slices)."""
        for step in slices(self, spec):
            run = step()
        return run

    def read(self, spec: EncoderDecoderSpec, source: list[Token], cut: bool, target: list[Token]) -> EncoderDecoderRun:
        """The pass over a source and a target as read: the run."""
        try:
            activations = self.capture([token.id for token in source], [token.id for token in target])
        except Exception as error:
            raise PassFailed(f"the model failed on this source and target ({type(error).__name__})") from error
        scales = {kind: [self.scale(kind, layer) for layer in range(self.layers(kind))] for kind in KINDS}
        return EncoderDecoderRun(spec, source, target, spec.target is None, cut, activations, scales, self.family)

    def layers(self, kind: str) -> int:
        return self.encoder_layers if kind == "encoder" else self.decoder_layers

    def source_length(self, source: str) -> int:
        """The source's tokens as read (cut at max_tokens), before any pass: for the memory a run states."""
        return len(self.loaded.tokenizer(source, truncation=True, max_length=self.max_tokens)["input_ids"])

    def target_length(self, spec: EncoderDecoderSpec) -> int:
        """The decoder's tokens: a given target's with the start token, or the most a written one may take."""
        if spec.target is None:
            return 1 + spec.max_new_tokens
        return 1 + len(
            self.loaded.tokenizer(text_target=spec.target, truncation=True, max_length=self.max_tokens - 1)["input_ids"]
        )

    def capture(self, source_ids: list[int], target_ids: list[int]) -> dict[str, Tensor]:
        """One teacher-forced pass: every attention's q, k and v (and T5's position bias), named by
        names.stack_attn, [head, pos, d_head] (position bias [head, query, key]), on the CPU."""
        model, family = self.loaded.model, self.family
        activations: dict[str, Tensor] = {}

        def projection(name: str):
            return lambda module, args, out: activations.__setitem__(name, heads(out, self.heads)[0].cpu())

        def bias(name: str):
            return lambda module, args, out: activations.__setitem__(name, out[1][0].cpu())

        with thread_hooks() as hook:
            for kind in KINDS:
                stack, attention = WHERE[kind]
                for layer in range(self.layers(kind)):
                    module = self.attention_module(kind, layer)
                    for part, projected in zip(("q", "k", "v"), family.projections, strict=True):
                        name = names.stack_attn(stack, layer, part, attention)
                        hook(module.get_submodule(projected), projection(name))
                    if family.position_bias:
                        hook(module, bias(names.stack_attn(stack, layer, "position_bias", attention)))
            device = model.device
            with torch.inference_mode():
                model(
                    input_ids=torch.tensor([source_ids], device=device),
                    decoder_input_ids=torch.tensor([target_ids], device=device),
                    use_cache=False,
                )
        return {name: activations[name] for name in names.pair_ordered(set(activations), *self._layers())}

    def _layers(self) -> tuple[int, int]:
        return self.encoder_layers, self.decoder_layers

    def write(self, source_ids: list[int], max_new_tokens: int) -> list[int]:
        """The target the model writes for the source greedily (Greedy), here and now: its ids from the start token."""
        greedy = Greedy(self, source_ids, max_new_tokens)
        while not greedy.done:
            greedy.step()
        return greedy.ids[0].tolist()


class Greedy:
    """A target being written greedily, one token a step: the ids `generate(do_sample=False, num_beams=1,
    max_new_tokens=…)` returns, through the same logits processors (the model's own generation_config's), one
    cached decoder step a token, the encoder run once (at the first step). A server runs a step a turn (slices)."""

    def __init__(self, engine: EncoderDecoderEngine, source_ids: list[int], max_new_tokens: int):
        model = self.model = engine.loaded.model
        try:
            config, _ = model._prepare_generation_config(
                None, max_new_tokens=max_new_tokens, do_sample=False, num_beams=1
            )
            # transformers checks the knobs and the special tokens (a start token for the decoder) before it writes
            model._prepare_special_tokens(config, True, device=model.device, batch_size=1)
        except ValueError as error:
            raise InvalidInput(f"{engine.loaded.name} cannot write: {str(error).strip().splitlines()[0]}") from None
        # As generate's _prepare_generated_length sets it: the decoder's start token and the new ones. A processor
        # reads it (the end token a config forces at the last position, forced_eos_token_id).
        config.max_length = 1 + max_new_tokens
        self.source = torch.tensor([source_ids], device=model.device)
        self.processors = model._get_logits_processor(
            config, input_ids_seq_length=1, encoder_input_ids=self.source, device=model.device
        )
        self.ends = set() if config._eos_token_tensor is None else set(config._eos_token_tensor.tolist())
        self.ids = torch.tensor([[int(config._decoder_start_token_tensor.reshape(-1)[0])]], device=model.device)
        # Its blocks' layers made as the decoder's blocks first fill them (a T5 config's layer count is the encoder's).
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        self.encoded = None
        self.max_new_tokens = max_new_tokens
        self.done = False

    def step(self) -> None:
        """The next token: the last one read with the cache of the ones before, its logits through the processors,
        their argmax."""
        with torch.inference_mode():
            if self.encoded is None:
                self.encoded = self.model.get_encoder()(input_ids=self.source)
            out = self.model(
                encoder_outputs=self.encoded,
                decoder_input_ids=self.ids[:, self.cache.get_seq_length() :],
                cache=self.cache,
                use_cache=True,
            )
            scores = self.processors(self.ids, out.logits[:, -1].to(dtype=torch.float32, copy=True))
        token = int(scores.argmax(dim=-1))
        self.ids = torch.cat([self.ids, torch.tensor([[token]], device=self.ids.device)], dim=-1)
        self.done = token in self.ends or self.ids.shape[1] - 1 == self.max_new_tokens
        if self.done:
            self.cache = self.encoded = None  # no step reads them again: their memory goes back at once


def kept_bytes(engine: EncoderDecoderEngine, source: int, target: int) -> int:
    """What a run keeps (EncoderDecoderRun.storages), both halves, stated from its shapes before it runs: every
    attention's q, k and v (a cross-attention's k and v over the source) and, in T5, the position biases."""
    size, heads, width = engine.loaded.model.dtype.itemsize, engine.heads, engine.heads * engine.head_dim
    encoder, decoder = engine.encoder_layers, engine.decoder_layers
    kept = (encoder * 3 * source + decoder * (3 * target + target + 2 * source)) * width * size
    if engine.family.position_bias:  # T5's first block makes each bias, the later blocks reuse it
        kept += heads * (source * source + target * target + target * source) * size
    return kept


def run_bytes(engine: EncoderDecoderEngine, source: int, target: int) -> int:
    """A run's peak memory, stated from its shapes before it runs, both halves counted: what it keeps (kept_bytes),
    the pass's transient rows (each block's hidden states, FFN rows, scores and weights, in the model's dtype), the
    decoder's logits over the vocabulary at every target row, a written target's cache of keys and values (self and
    cross), and its three kinds of weights and norm-weighted attention made for an answer."""
    config, size = engine.loaded.model.config, engine.loaded.model.dtype.itemsize
    hidden, heads = config.d_model, engine.heads
    inner = getattr(config, "d_ff", None) or max(config.encoder_ffn_dim, config.decoder_ffn_dim)
    width = heads * engine.head_dim
    encoder, decoder = engine.encoder_layers, engine.decoder_layers
    squares = {"encoder": source * source, "decoder": target * target, "cross": target * source}
    kept = kept_bytes(engine, source, target)
    # the three kinds' weights and norm-weighted attention, float32, made for an answer
    weights = 2 * heads * (encoder * squares["encoder"] + decoder * (squares["decoder"] + squares["cross"])) * 4
    rows = (source + target) * (inner + 8 * hidden) * size + 3 * heads * max(squares.values()) * size
    logits = target * config.vocab_size * 4 * 2
    cache = decoder * 2 * (target + source) * width * size
    return kept + weights + rows + logits + cache


def pair_names(kind: str) -> str:
    """A kind of attention's weights by their name, block L standing for each block."""
    stack, attention = WHERE[kind]
    return names.stack_attn(stack, "L", "weights", attention)


def is_encoder_decoder(loaded: LoadedModel) -> bool:
    return isinstance(loaded.family, EncoderDecoderFamily)


def make_engine(
    loaded: LoadedModel, max_chars: int, max_tokens: int | None = None, blocks=None
) -> Engine | EncoderDecoderEngine:
    """The engine a loaded model is read by: an encoder-decoder's own, or the one of an encoder or a decoder."""
    kind = EncoderDecoderEngine if is_encoder_decoder(loaded) else Engine
    return kind(loaded, max_chars, max_tokens, blocks)


def slices(engine: EncoderDecoderEngine, spec: EncoderDecoderSpec) -> Iterator[Callable[[], object]]:
    """A run in turns of a server's gate (app.serving.work), each slice asked for once the one before has run: the
    source read (and a written target's first token), each further token written, then the pass over both, whose
    slice returns the run."""
    read: dict = {}

    def first() -> None:
        source, cut = engine.source_tokens(spec.source)
        read.update(source=source, cut=cut)
        if spec.target is None:
            read["greedy"] = Greedy(engine, [token.id for token in source], spec.max_new_tokens)
            read["greedy"].step()
        else:
            read["target"] = engine.target_tokens(spec.target)

    yield first
    if spec.target is None:
        while not read["greedy"].done:  # a token a turn
            yield read["greedy"].step
        read["target"] = engine.written_tokens(read["greedy"].ids[0].tolist())
    yield lambda: engine.read(spec, read["source"], read["cut"], read["target"])


def target_text(engine: EncoderDecoderEngine, run: EncoderDecoderRun) -> str:
    """The target as a text: the given one, or the written tokens decoded (special tokens left out)."""
    if run.spec.target is not None:
        return run.spec.target
    return engine.loaded.tokenizer.decode([token.id for token in run.target], skip_special_tokens=True)
