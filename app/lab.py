"""The lab's engine: tokenize a text, capture one forward pass, keep the run, serve its numbers. A run is
named by its spec; a worker that does not hold a run recomputes it from the spec in the shared store."""

import asyncio
from dataclasses import dataclass, field
from functools import cached_property

import torch
from torch import Tensor

from app.attribution import attribute, similarity_target
from app.cache import RunCache
from app.capture import additive_mask, attention_scores, capture, pool
from app.gate import ANYONE, Client, PassGate
from app.memory import trim_if_over
from app.model import LoadedModel
from app.spec import RUN_ID, RunSpec
from app.specs import SpecStore, StoreError

# The model, torch and the server besides the runs: about 0.45 GB measured, with room for a pass in flight.
RUNTIME_BYTES = 1024**3


class TextTooLong(ValueError):
    pass


class InvalidInput(ValueError):
    """The request is well formed but asks for something the model does not have (422)."""


class NothingToRead(InvalidInput):
    pass


class PassFailed(RuntimeError):
    """The forward pass raised: this request fails, the lab keeps serving."""


class RunNotFound(KeyError):
    def __str__(self) -> str:
        return f"run {self.args[0]} is not kept any more (or never was): analyze the text again"


class ForeignRun(RunNotFound):
    """The spec names another model than the one this lab serves: recomputing it would give other numbers."""

    def __str__(self) -> str:
        run_id, spec, loaded = self.args
        return (
            f"run {run_id} was made by {spec.model} (weights {spec.model_digest[:12]}) and this lab serves "
            f"{loaded.name} (weights {loaded.digest[:12]}): analyze the text again"
        )


class OutOfRange(LookupError):
    pass


@dataclass(frozen=True)
class Token:
    index: int
    text: str
    id: int
    special: bool  # any of the tokenizer's special ids, typed ones ([SEP], [MASK]) and [UNK] included
    added: bool  # put in by the tokenizer around the text ([CLS]/[SEP], <s>/</s>), not read from it
    start: int  # offsets are Unicode code points into the token's own segment: text (A) or text_pair (B)
    end: int
    token_type: int
    segment: str  # "A" or "B"


@dataclass
class Run:
    spec: RunSpec  # what was run: the numbers below follow from it and the model
    tokens: list[Token]
    truncated: bool
    activations: dict[str, Tensor]  # float32, named as in app.capture
    # The last block's output for the input the model's pooling reads: the whole input, or its first
    # max_seq_length tokens as their own pass. [pooled_tokens, d_model]
    pooled_output: Tensor
    n_layers: int
    n_heads: int
    nbytes: int = field(init=False)

    def __post_init__(self):
        self.nbytes = sum(a.numel() * a.element_size() for a in self.activations.values())

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def pooled(self) -> Tensor:
        """The sentence vector: [d_model]."""
        return pool(self.pooled_output, self.spec.pooling)

    @property
    def pooled_tokens(self) -> int:
        return len(self.pooled_output)

    def ablated(self, layer: int, head: int) -> bool:
        return (layer, head) in self.spec.ablated

    def head(self, layer: int, head: int) -> dict[str, Tensor]:
        """q, k, v, scores, weights and context (weights·V, what the head computes), and what W_O receives
        from it: the context, or zeros for a head switched off."""
        self._check(layer, head)
        attn = {name: self.activations[f"blocks.{layer}.attn.{name}"][head] for name in ("q", "k", "v")}
        mask = additive_mask(self.spec.mask, len(self.tokens))
        context = self.activations[f"blocks.{layer}.attn.context"][head]
        return {
            **attn,
            "scores": attention_scores(attn["q"], attn["k"], mask),  # [query_pos, key_pos]
            "weights": self.activations[f"blocks.{layer}.attn.weights"][head],
            "context": context,
            "context_to_output": torch.zeros_like(context) if self.ablated(layer, head) else context,
        }

    def query(self, layer: int, head: int, index: int) -> dict[str, Tensor]:
        """One query token's view of one head: its q, every k and v, its scores and weights rows, its context
        and what of it reaches W_O."""
        numbers = self.head(layer, head)
        self.check_token(index)
        return {
            "q": numbers["q"][index],
            "k": numbers["k"],
            "v": numbers["v"],
            "scores": numbers["scores"][index],
            "weights": numbers["weights"][index],
            "context": numbers["context"][index],
            "context_to_output": numbers["context_to_output"][index],
        }

    def layer(self, layer: int) -> dict[str, Tensor]:
        self._check(layer)
        names = ("attention_output", "attention_residual_norm", "ffn_intermediate", "ffn_output", "output")
        return {name: self.activations[f"blocks.{layer}.{name}"] for name in names}

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
        names = ("word", "position", "token_type", "sum", "normalized")
        return {name: self.activations[f"embeddings.{name}"] for name in names}

    def attention(self, layer: int | None = None, head: int | None = None) -> list[Tensor]:
        """Weights per block, [head, query_pos, key_pos] each: every block, or one, or one head of one."""
        blocks = [self.activations[f"blocks.{index}.attn.weights"] for index in range(self.n_layers)]
        return pick(blocks, layer, head)

    def check_token(self, index: int) -> None:
        if not 0 <= index < len(self.tokens):
            raise OutOfRange(f"token {index} does not exist: tokens are 0 to {len(self.tokens) - 1}")

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


def segments(sequence_ids: list[int | None]) -> list[str]:
    """ "A" or "B" per token, by the text it comes from. Special tokens (no text) join the segment before
    them: [CLS] and the first [SEP] are A, the last [SEP] is B. Read from the sequence, not the token type,
    since some tokenizers (RoBERTa's) give B tokens type 0."""
    labels: list[str] = []
    for sequence_id in sequence_ids:
        labels.append("AB"[sequence_id] if sequence_id is not None else labels[-1] if labels else "A")
    return labels


class Lab:
    def __init__(
        self,
        loaded: LoadedModel,
        specs: SpecStore,
        gate: PassGate,
        *,
        max_chars: int,
        max_runs: int,
        max_cache_bytes: int,
    ):
        self.loaded = loaded
        self.specs = specs
        self.gate = gate
        self.max_chars = max_chars
        self.runs: RunCache[Run] = RunCache(max_runs, max_cache_bytes)
        # Passes under way, by run id: a request for the same run meanwhile awaits that pass. A pass whose
        # waiters have all gone (their clients disconnected) before it started is called off.
        self._passes: dict[str, asyncio.Task] = {}
        self._waiters: dict[str, int] = {}
        self._started: set[str] = set()

    @property
    def info(self) -> dict:
        config = self.loaded.model.config
        return {
            "name": self.loaded.name,
            "layers": config.num_hidden_layers,
            "heads": config.num_attention_heads,
            "hidden_size": config.hidden_size,
            "head_dim": config.hidden_size // config.num_attention_heads,
            "intermediate_size": config.intermediate_size,
            "vocab_size": config.vocab_size,
            "max_tokens": self.loaded.max_tokens,
            "max_seq_length": self.loaded.max_seq_length,
        }

    def spec(
        self,
        text: str,
        text_pair: str | None = None,
        mask: str = "bidirectional",
        pooling: str | None = None,
        ablate=(),
    ) -> RunSpec:
        """The run a request asks for, checked (its length, the heads it switches off), with the pooling
        resolved and the heads sorted without repeats, so that equivalent requests name one run.
        `text_pair`: segment B, read with `text` as one input, [CLS] text [SEP] text_pair [SEP].
        `ablate`: (layer, head) pairs whose context is zeroed."""
        n_chars = len(text) + len(text_pair or "")
        if n_chars > self.max_chars:
            texts = "the text has" if text_pair is None else "text and text_pair have"
            raise TextTooLong(f"{texts} {n_chars:,} characters; the limit is {self.max_chars:,}")
        config = self.loaded.model.config
        for layer, head in ablate:
            if not (0 <= layer < config.num_hidden_layers and 0 <= head < config.num_attention_heads):
                raise InvalidInput(
                    f"no head ({layer}, {head}) to switch off: layers are 0 to {config.num_hidden_layers - 1}, "
                    f"heads 0 to {config.num_attention_heads - 1}"
                )
        return RunSpec(
            model=self.loaded.name,
            model_digest=self.loaded.digest,
            text=text,
            text_pair=text_pair,
            mask=mask,
            pooling=pooling or self.loaded.default_pooling,
            ablated=tuple(sorted({(layer, head) for layer, head in ablate})),
        )

    def kept(self, spec: RunSpec) -> Run | None:
        """This worker's run of the spec, if it holds one: no forward pass needed."""
        return self.runs.get(spec.run_id)

    async def submit(self, spec: RunSpec, client: Client = ANYONE) -> Run:
        """analyze() for the server: the run (kept, or computed once however many ask for it at a time),
        then its spec in the shared store, so that every worker can serve the id the client receives.
        `client` is whose turn at the gate this request takes."""
        run = await self._computed(spec, client)
        await asyncio.to_thread(self.specs.put, spec)
        return run

    async def run(self, run_id: str, client: Client = ANYONE) -> Run:
        """A run by id: from this worker's cache, or recomputed from the spec in the shared store."""
        run = self.runs.get(run_id)
        if run is not None:
            return run
        spec = await asyncio.to_thread(self.specs.get, run_id) if RUN_ID.fullmatch(run_id) else None
        if spec is None:
            raise RunNotFound(run_id)
        if (spec.model, spec.model_digest) != (self.loaded.name, self.loaded.digest):
            raise ForeignRun(run_id, spec, self.loaded)
        return await self._computed(spec, client)

    async def attribution(self, text: str, other: str, method: str, steps: int, client: Client = ANYONE) -> dict:
        """Which tokens of `text` make it similar to `other` (app.attribution): a turn at the gate, a thread."""
        for checked in (text, other):
            self.spec(checked)  # the same character cap as any run
        async with self.gate.admit(client):
            return await asyncio.to_thread(self._attribution, text, other, method, steps)

    def _attribution(self, text: str, other: str, method: str, steps: int) -> dict:
        model, length = self.loaded.model, self.loaded.max_seq_length
        tokens, _ = self.tokenize(text, None, length)
        others, _ = self.tokenize(other, None, length)
        as_ids = lambda found, field: torch.tensor([getattr(token, field) for token in found])  # noqa: E731
        target = similarity_target(
            model, as_ids(others, "id"), as_ids(others, "token_type"), self.loaded.default_pooling
        )
        result = attribute(model, as_ids(tokens, "id"), as_ids(tokens, "token_type"), target, method, steps)
        return {"method": method, "tokens": tokens, **result}

    async def store_problem(self) -> str | None:
        """Why the shared spec store is not answering, or None if it is."""
        try:
            await asyncio.to_thread(self.specs.ping)
        except StoreError as error:
            return str(error)
        return None

    async def _computed(self, spec: RunSpec, client: Client) -> Run:
        """The kept run, or the one pass under way for it, or a new pass: a turn at the gate, then a thread."""
        run = self.kept(spec)
        if run is not None:
            return run
        run_id = spec.run_id
        underway = self._passes.get(run_id)
        if underway is None:
            underway = self._passes[run_id] = asyncio.create_task(self._pass(spec, client))
        self._waiters[run_id] = self._waiters.get(run_id, 0) + 1
        try:
            # A client that goes away cancels its wait, not the pass the others are waiting for.
            return await asyncio.shield(underway)
        except asyncio.CancelledError:
            if self._waiters[run_id] == 1 and run_id not in self._started:
                # Nobody waits for it and it has not begun: its turn at the gate is given up, and a request
                # for the same run from now on starts a pass of its own.
                underway.cancel()
                del self._passes[run_id]
            raise
        finally:
            self._waiters[run_id] -= 1
            if not self._waiters[run_id]:
                del self._waiters[run_id]

    async def _pass(self, spec: RunSpec, client: Client) -> Run:
        try:
            async with self.gate.admit(client):
                self._started.add(spec.run_id)
                return await asyncio.to_thread(self.analyze, spec)
        finally:
            self._started.discard(spec.run_id)
            if self._passes.get(spec.run_id) is asyncio.current_task():
                del self._passes[spec.run_id]

    def analyze(self, spec: RunSpec) -> Run:
        """One forward pass of the spec, or the kept run."""
        kept = self.kept(spec)
        if kept is not None:
            return kept
        tokens, truncated = self.tokenize(spec.text, spec.text_pair)
        read = {token.segment for token in tokens if token.end > token.start}
        unreadable = "has no characters the tokenizer keeps (only control or invisible ones)"
        if "A" not in read:
            raise NothingToRead(f"the text {unreadable}")
        if spec.text_pair is not None and "B" not in read:
            raise NothingToRead(f"text_pair {unreadable}")
        # A BERT tokenizer makes B tokens type 1 even for a model folder trained with one token type.
        if max(token.token_type for token in tokens) >= self.loaded.model.config.type_vocab_size:
            raise InvalidInput("this model was trained without a segment B (one token type): analyze the text alone")
        try:
            run = self._forward(spec, tokens, truncated)
        except Exception as error:
            raise PassFailed(
                f"the model failed on this text ({type(error).__name__}); try again or change the text"
            ) from error
        self.runs.put(spec.run_id, run)
        trim_if_over(self.runs.max_bytes + RUNTIME_BYTES)
        return run

    def _forward(self, spec: RunSpec, tokens: list[Token], truncated: bool) -> Run:
        activations = self._capture(spec, tokens)
        last = f"blocks.{self.loaded.model.config.num_hidden_layers - 1}.output"
        pooled_output = activations[last]
        if len(tokens) > self.loaded.max_seq_length:
            # The sentence vector reads the input cut where the model's own pooling cuts it (its
            # max_seq_length), as sentence-transformers encodes it: a second, shorter pass of the cut input.
            cut, _ = self.tokenize(spec.text, spec.text_pair, self.loaded.max_seq_length)
            pooled_output = self._capture(spec, cut)[last]
        config = self.loaded.model.config
        return Run(
            spec=spec,
            tokens=tokens,
            truncated=truncated,
            activations=activations,
            pooled_output=pooled_output,
            n_layers=config.num_hidden_layers,
            n_heads=config.num_attention_heads,
        )

    def _capture(self, spec: RunSpec, tokens: list[Token]) -> dict[str, Tensor]:
        input_ids = torch.tensor([token.id for token in tokens])
        token_type_ids = torch.tensor([token.token_type for token in tokens])
        return capture(self.loaded.model, input_ids, token_type_ids, spec.mask, spec.ablated)

    def tokenize(
        self, text: str, text_pair: str | None = None, max_length: int | None = None
    ) -> tuple[list[Token], bool]:
        """[CLS] text [SEP], or [CLS] text [SEP] text_pair [SEP] with token types 0 then 1, as the tokenizer
        makes them, cut at max_length tokens (the model's positions by default). A pair too long loses
        tokens from the end of whichever side is longer ("longest_first")."""
        tokenizer = self.loaded.tokenizer
        encoding = tokenizer(
            text,
            text_pair,
            truncation=True,
            max_length=max_length or self.loaded.max_tokens,
            return_offsets_mapping=True,
            # More than one window means something was cut; the fast tokenizer makes windows for pairs too,
            # and the first is the same encoding as without this flag.
            return_overflowing_tokens=True,
            return_token_type_ids=True,
        )
        ids = encoding["input_ids"][0]
        special_ids = set(tokenizer.all_special_ids)
        sequence_ids = encoding.sequence_ids(0)  # None for the tokens the tokenizer added around the texts
        # Offsets of B tokens index text_pair: the fast tokenizer gives offsets per sequence.
        tokens = [
            Token(index, piece, token_id, token_id in special_ids, sequence_id is None, start, end, token_type, segment)
            for index, (piece, token_id, sequence_id, (start, end), token_type, segment) in enumerate(
                zip(
                    tokenizer.convert_ids_to_tokens(ids),
                    ids,
                    sequence_ids,
                    encoding["offset_mapping"][0],
                    encoding["token_type_ids"][0],
                    segments(sequence_ids),
                    strict=True,
                )
            )
        ]
        return tokens, len(encoding["input_ids"]) > 1

    @cached_property
    def unit_embedding_table(self) -> Tensor:
        """The word-embedding table with rows scaled to length 1: cosines to it are one matrix product."""
        table = self.loaded.model.get_input_embeddings().weight.detach()
        return table / table.norm(dim=1, keepdim=True)
