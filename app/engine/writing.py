"""Writing: a decoder continues a prompt one token at a time, as transformers' `generate` does, with each step
opened: the candidates through the sampling funnel, the draw, the new row of every head's attention, and the
cache of keys and values the step reused.

Exact by construction: the logits processors are the very list `generate` builds from the same knobs and the model's
own generation_config (GenerationMixin._get_logits_processor), applied in its order to the same float32 logits of
the same cached passes; a sampled token is drawn as `torch.multinomial(softmax(scores), 1)` draws it for `generate`
(Writing._draw), from a torch.Generator of the request's own, seeded with its seed. On the CPU a generator seeded
with `seed` starts in the state the global one is in after `torch.manual_seed(seed)` (tests/test_writing.py checks
it), so the lab writes what `generate` writes after `torch.manual_seed(seed)`, and the process's global RNG is never
touched. (On a GPU the device's own generator is seeded the same way; that is not checked here.)

A step, one token (Writing.step):
    logits = model(last token read, cache of every earlier token's keys and values)     # [vocab], float32
    row    = each block's attention weights of that token over every token so far        # [layer, head, key]
    scores = processors(logits)           # generate's own list: temperature, top-k, top-p (where on), ...
    token  = argmax(scores)                                   greedy
           = multinomial(softmax(scores), 1, generator)       sampling
"""

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor
from transformers import DynamicCache, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from app.engine.capture import eager_attention, head_dim, thread_hooks
from app.engine.engine import Engine
from app.engine.errors import InvalidInput, PassFailed, TextTooLong
from app.engine.model import LoadedModel
from app.engine.runs import Token

# New tokens a request may ask for at most (the serving layer's setting): each is one pass of the whole model.
MAX_NEW_TOKENS = 256
TOP = 10  # candidates shown at each stage of the funnel
RACE = 5  # the earliest arrivals of a sampled draw's race shown (Draw)
# Each stage of the funnel named by the knob that switches it on; any other processor the model's own
# generation_config switches on (repetition_penalty, min_length, ...) is named by its class.
STAGE_NAMES = {TemperatureLogitsWarper: "temperature", TopKLogitsWarper: "top_k", TopPLogitsWarper: "top_p"}
SEEDS = 2**64  # what torch.Generator.manual_seed takes: 0 to 2⁶⁴ - 1


class CannotWrite(InvalidInput):
    """The model has no language-model head: it reads a text and has no next token to choose."""


@dataclass(frozen=True)
class Knobs:
    """What decides the tokens written, by transformers' own names and meanings (GenerationConfig): a knob left
    None takes the model's own generation_config's value, as `generate` does, then transformers' default."""

    max_new_tokens: int = 20
    do_sample: bool | None = None  # False: greedy, the likeliest token each time
    temperature: float | None = None  # the logits are divided by it before the softmax
    top_k: int | None = None  # only the k likeliest tokens kept; 0: off
    top_p: float | None = None  # only the likeliest tokens whose probabilities add up to p kept; 1: off
    seed: int = 0  # the draws' generator's seed (sampling only)

    def generate_kwargs(self) -> dict:
        """The keyword arguments of `model.generate` that write the same tokens after torch.manual_seed(seed)."""
        knobs = {"do_sample": self.do_sample, "temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}
        return {"max_new_tokens": self.max_new_tokens, **{name: on for name, on in knobs.items() if on is not None}}


@dataclass(frozen=True)
class Stage:
    """The candidates at one stage of the funnel: after the softmax of the raw logits, or after one of the logits
    processors. The probabilities are the softmax of that stage's scores (a token a processor removed has
    probability 0, and the others are renormalised)."""

    name: str  # "softmax", "temperature", "top_k", "top_p", or another processor's class name
    ids: list[int]  # the TOP likeliest, likeliest first
    probabilities: list[float]
    kept: int  # tokens with a chance left at this stage
    mass: float  # the probability the kept tokens had at the stage before (1 for the softmax): what survived


@dataclass(frozen=True)
class Draw:
    """How the token was chosen. Greedy: the argmax of the last stage's scores. Sampling: torch.multinomial with
    one sample runs an exponential race (the Gumbel-max trick in its exp form): every token i draws a waiting
    time wᵢ ~ Exp(1) from the generator and arrives at tᵢ = wᵢ / pᵢ; the first to arrive is drawn, which token i
    is with probability exactly pᵢ. The lab runs that race itself, with the waits multinomial would draw."""

    how: str  # "argmax" or "race"
    token: int
    # The race's RACE earliest arrivals, first first (empty for argmax): ids, their probabilities, waits, arrivals.
    ids: list[int]
    probabilities: list[float]
    waits: list[float]
    arrivals: list[float]


@dataclass(frozen=True)
class CachedBlock:
    """What one block keeps of the tokens before: their keys and values, [batch, key_value_head, token, head_dim]
    each, reused by every later step instead of being computed again. A block with a sliding window keeps only
    its last tokens."""

    first: int  # the position of the first token kept
    tokens: int
    shape: tuple[int, ...]  # of the keys, and of the values
    nbytes: int  # keys and values


@dataclass(frozen=True)
class Step:
    """One token written, opened."""

    index: int  # 0 for the first new token
    position: int  # its position in the whole sequence (prompt first)
    token: int
    text: str  # the token as the lab names it (Engine.pieces)
    read: int  # the tokens this step's pass read: the whole prompt at the first step, then the one written last
    reused: int  # the tokens whose keys and values it read from the cache instead
    # "softmax" first, then each processor in generate's order. A knob that is off (temperature 1, top_k 0, top_p 1)
    # puts no processor in generate's list, and so no stage here; greedy applies no warper at all.
    funnel: list[Stage]
    draw: Draw
    # The row of the last token read (position - 1) in every block and head: its attention over every token up
    # to itself, from this step's cached pass, in float32. [layer, head, key]
    attention: Tensor
    cache: list[CachedBlock]  # the cache after this step, block by block
    stop: str | None  # why writing ends with this token: "eos", "max_new_tokens", or None (it goes on)

    @property
    def cache_bytes(self) -> int:
        return sum(block.nbytes for block in self.cache)


def check_writer(loaded: LoadedModel) -> None:
    """CannotWrite unless the model has a language-model head to choose a next token with."""
    if loaded.cannot_write is not None:
        raise CannotWrite(loaded.cannot_write)


def check_knobs(knobs: Knobs, most: int = MAX_NEW_TOKENS) -> None:
    """InvalidInput for a knob out of its range, naming it and the range; `most`: the lab's bound on new tokens."""
    if not 1 <= knobs.max_new_tokens <= most:
        raise InvalidInput(f"max_new_tokens is {knobs.max_new_tokens}: this lab writes 1 to {most} new tokens")
    if knobs.temperature is not None and not 0 < knobs.temperature < float("inf"):
        raise InvalidInput(f"temperature is {knobs.temperature}: it divides the logits, so it must be above 0")
    if knobs.top_k is not None and knobs.top_k < 0:
        raise InvalidInput(f"top_k is {knobs.top_k}: it keeps the k likeliest tokens (0 keeps them all)")
    if knobs.top_p is not None and not 0 <= knobs.top_p <= 1:
        raise InvalidInput(f"top_p is {knobs.top_p}: it is a share of the probability, 0 to 1 (1 keeps every token)")
    if not 0 <= knobs.seed < SEEDS:
        raise InvalidInput(f"seed is {knobs.seed}: seeds are 0 to 2^64 - 1")


class Writing:
    """One generation under way: each call of step() writes one token and returns it opened, until done. The
    serving layer runs one step per turn of the gate (slices) and streams each as it comes."""

    def __init__(self, engine: Engine, prompt: list[Token], knobs: Knobs, most: int = MAX_NEW_TOKENS):
        """`prompt`: the tokens to continue, as the engine reads them (Engine.tokenize); `most`: the lab's bound
        on max_new_tokens. Refused here, before any pass: a model without a language-model head (CannotWrite),
        a knob out of range, an empty prompt, or a prompt and its new tokens past the positions the engine reads
        (InvalidInput)."""
        loaded = engine.loaded
        check_writer(loaded)
        check_knobs(knobs, most)
        if not prompt:
            raise InvalidInput("the prompt has no tokens: there is nothing to continue")
        if len(prompt) + knobs.max_new_tokens > engine.max_tokens:
            raise InvalidInput(
                f"the prompt's {len(prompt)} tokens and max_new_tokens {knobs.max_new_tokens} make "
                f"{len(prompt) + knobs.max_new_tokens}: this model is read at most {engine.max_tokens} tokens at a time"
            )
        self.engine, self.prompt, self.knobs = engine, prompt, knobs
        model = loaded.model
        self.config = generation_config(loaded, knobs)
        self.ids = torch.tensor([[token.id for token in prompt]], device=model.device)  # [1, tokens so far]
        self.processors = model._get_logits_processor(  # generate's own list, in its order
            self.config, input_ids_seq_length=len(prompt), encoder_input_ids=self.ids, device=model.device
        )
        self.end_ids = set() if self.config._eos_token_tensor is None else set(self.config._eos_token_tensor.tolist())
        self.generator = torch.Generator(model.device).manual_seed(knobs.seed)
        # The cache generate makes (GenerationMixin._prepare_cache_for_generation): every block's keys and values.
        self.cache = DynamicCache(config=model.config.get_text_config(decoder=True))
        self.seen = 0  # the tokens whose keys and values the cache holds (a window's block keeps fewer)
        # What generate gives the model beside the ids where its forward takes it: positions, and logits_to_keep
        # for the last row's logits alone.
        self.positions = "position_ids" in inspect.signature(model.forward).parameters
        self.logits_to_keep = model._supports_logits_to_keep()
        self.steps: list[Step] = []
        self.failed = False
        self.nbytes = writing_bytes(engine, len(prompt), knobs.max_new_tokens)

    @property
    def settings(self) -> dict:
        """The knobs as generate uses them: those the request left out taken from the model's generation_config,
        then transformers' defaults (top_k 50 unless the model says otherwise)."""
        return {name: getattr(self.config, name) for name in ("do_sample", "temperature", "top_k", "top_p")}

    @property
    def done(self) -> bool:
        return bool(self.steps) and self.steps[-1].stop is not None

    @property
    def new_ids(self) -> list[int]:
        return [step.token for step in self.steps]

    def slices(self) -> Iterator[Callable[[], Step]]:
        """One step a slice, each asked for once the one before has run, until writing ends."""
        while not self.done:
            yield self.step

    def step(self) -> Step:
        """The next token: one cached pass (the whole prompt at first, then the token written last), its logits
        through the funnel, and the draw."""
        if self.done:
            raise RuntimeError("this writing has ended: it takes no more steps")
        if self.failed:
            raise RuntimeError("this writing failed at its last step: its cache is not whole, it cannot go on")
        model, index = self.engine.loaded.model, len(self.steps)
        reused, length = self.seen, self.ids.shape[1]
        read = self.ids[:, reused:]  # [1, new tokens]: the whole prompt at first, then the token written last
        with torch.inference_mode(), eager_attention(model), new_rows(self.engine.loaded) as rows:
            # As generate calls the model: the cache passed in, and where the model takes them, the positions of
            # the tokens read and the last row's logits alone.
            extra = {"position_ids": torch.arange(reused, length, device=model.device)[None]} if self.positions else {}
            if self.logits_to_keep:
                extra["logits_to_keep"] = 1
            try:
                out = model(input_ids=read, cache=self.cache, use_cache=True, output_attentions=rows is None, **extra)
            except Exception as error:
                self.failed, self.cache = True, None  # the cache may hold part of this pass: let go
                raise PassFailed(f"the model failed writing token {index + 1} ({type(error).__name__})") from error
            logits = out.logits[:, -1].to(dtype=torch.float32, copy=True)  # [1, vocab], as generate casts them
            stages, scores = self._funnel(logits)
            draw = self._draw(scores)
            attention = row_matrix(rows or [weights[0, :, -1] for weights in out.attentions], length)
        self.seen = length
        self.ids = torch.cat([self.ids, torch.tensor([[draw.token]], device=model.device)], dim=-1)
        if draw.token in self.end_ids:
            stop = "eos"
        elif index + 1 == self.knobs.max_new_tokens:
            stop = "max_new_tokens"
        else:
            stop = None
        step = Step(
            index=index,
            position=length,
            token=draw.token,
            text=self.engine.pieces([draw.token])[0],
            read=length - reused,
            reused=reused,
            funnel=stages,
            draw=draw,
            attention=attention,
            cache=cached_blocks(self.cache, length),
            stop=stop,
        )
        self.steps.append(step)
        if stop is not None:
            self.cache = None  # no step reads it again: its memory goes back at once, the steps are what is kept
        return step

    def _funnel(self, logits: Tensor) -> tuple[list[Stage], Tensor]:
        """The funnel's stages, and the last stage's scores: the logits, then each processor in turn as
        LogitsProcessorList applies them (none of generate's takes more than the ids and the scores)."""
        names, stages = ["softmax"], [logits]
        for processor in self.processors:
            stages.append(processor(self.ids, stages[-1]))
            names.append(STAGE_NAMES.get(type(processor), type(processor).__name__))
        return funnel(names, torch.cat(stages)), stages[-1]

    def _draw(self, scores: Tensor) -> Draw:
        """The token: generate's argmax of the scores, or the token its multinomial draw from their softmax would
        give with this writing's generator, drawn as multinomial draws one sample: an exponential race, its waits
        taken from the generator as multinomial takes them (tests/test_writing.py checks both against
        torch.multinomial), so that the race shown is the draw itself, drawn once."""
        if not self.config.do_sample:
            return Draw("argmax", int(scores.argmax(dim=-1)), [], [], [], [])
        probabilities = torch.softmax(scores, dim=-1)  # as generate takes them: this one row alone
        waits = torch.empty_like(probabilities).exponential_(1, generator=self.generator)
        pace = (probabilities / waits)[0]  # 1 / arrival; a token with no chance has 0 and never arrives
        token = int(pace.argmax())  # multinomial's own pick, ties included
        first = pace.topk(min(RACE, pace.numel())).indices
        first = first[pace[first] > 0]
        waits, chances = waits[0, first].double(), probabilities[0, first].double()
        return Draw("race", token, first.tolist(), chances.tolist(), waits.tolist(), (waits / chances).tolist())


def generation_config(loaded: LoadedModel, knobs: Knobs):
    """The GenerationConfig generate would use for these knobs: the model's own generation_config, then
    transformers' defaults, under the knobs given (GenerationMixin._prepare_generation_config), with its special
    tokens prepared (the end-of-text ids a tensor, as the processors and stopping criteria read them)."""
    model = loaded.model
    try:
        config, _ = model._prepare_generation_config(None, **knobs.generate_kwargs())
    except ValueError as error:  # transformers checks the knobs together too
        raise InvalidInput(str(error).strip().splitlines()[0]) from None
    model._prepare_special_tokens(config, False, device=model.device, batch_size=1)
    return config


def funnel(names: list[str], scores: Tensor) -> list[Stage]:
    """The funnel's stages from their scores, [stage, vocab], all at once: each stage's softmax, the tokens it
    keeps (a token a processor removed has the score -inf, so the probability exactly 0) and the probability they
    had at the stage before, and its TOP likeliest."""
    probabilities = torch.softmax(scores, dim=-1)
    kept = probabilities > 0
    counts = kept.sum(dim=-1)
    before = (probabilities[:-1] * kept[1:]).sum(dim=-1, dtype=torch.float64)
    masses = [1.0, *before.tolist()]
    top = probabilities.topk(min(TOP, scores.shape[-1]), dim=-1)
    return [
        Stage(name, ids, chances, count, mass)
        for name, ids, chances, count, mass in zip(
            names, top.indices.tolist(), top.values.tolist(), counts.tolist(), masses, strict=True
        )
    ]


@contextmanager
def new_rows(loaded: LoadedModel) -> Iterator[list[Tensor] | None]:
    """The last query's row of every block's attention weights in this thread's passes, [head, key] each, block
    by block: read from each attention module's output, where the eager attention returns its weights beside its
    output, so that a pass over a long prompt keeps a row a block, where output_attentions would keep every
    block's whole matrix at once until the pass ends. None for a model without an adapter: the lab knows no
    module of its, and its weights come from output_attentions."""
    family = loaded.family
    if family.attention_only:
        yield None
        return
    rows: list[Tensor] = []
    module = family.attention_output.rpartition(".")[0]  # the block's attention: W_O's parent
    with thread_hooks() as hook:
        for block in loaded.model.base_model.get_submodule(family.blocks):
            # out: (the attention's output, its weights [batch, head, query, key]); the row copied, not a view
            # that would keep the block's whole matrix
            hook(block.get_submodule(module), lambda _module, _inputs, out: rows.append(out[1][0, :, -1].clone()))
        yield rows


def row_matrix(rows: list[Tensor], length: int) -> Tensor:
    """Every block's row of the last query, [layer, head, key] over all `length` tokens, in float32 on the CPU. A
    block with a sliding window attends to its last keys only: its row is put at their positions, and the keys
    before get their weight in a full pass, exactly 0."""
    matrix = torch.zeros(len(rows), rows[0].shape[0], length)
    for layer, row in enumerate(rows):  # [head, key]
        matrix[layer, :, length - row.shape[-1] :] = row.float().cpu()
    return matrix


def cached_blocks(cache: DynamicCache, length: int) -> list[CachedBlock]:
    """Each block's cache as it is: the tokens it keeps of the `length` read so far, and their keys' and values'
    shape and bytes."""
    blocks = []
    for layer in cache.layers:
        keys, values = layer.keys, layer.values
        kept = keys.shape[-2]
        nbytes = keys.numel() * keys.element_size() + values.numel() * values.element_size()
        blocks.append(CachedBlock(length - kept, kept, tuple(keys.shape), nbytes))
    return blocks


def writing_bytes(engine: Engine, prompt_tokens: int, max_new_tokens: int) -> int:
    """A writing's peak memory, stated before it starts from its shapes (as Footprint.pass_bytes states a pass's):
    the cache's keys and values for every token it may read, in the model's dtype; the first step's pass over the
    prompt (Footprint.transient_bytes; and every block's weights at once for a model without an adapter); a step's
    logits and what the funnel and the draw make of them; and the attention rows the steps keep, in float32."""
    loaded, config = engine.loaded, engine.loaded.model.config
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    key_value_heads = getattr(config, "num_key_value_heads", None) or heads
    tokens = prompt_tokens + max_new_tokens
    cache = layers * 2 * key_value_heads * head_dim(config) * tokens * loaded.model.dtype.itemsize
    prompt_pass = engine.footprint.transient_bytes(1, prompt_tokens)
    if loaded.family.attention_only:  # its rows come from output_attentions: every block's weights at once
        prompt_pass += layers * heads * prompt_tokens**2 * 4
    # Per stage (the softmax, the three knobs', one more the model's generation_config may switch on): its scores,
    # their copy in the funnel's [stage, vocab], its softmax and what it keeps; and the logits, the draw's
    # softmax, its waits and their race.
    funnel = (4 * (len(STAGE_NAMES) + 2) + 4) * config.vocab_size * 4
    return cache + prompt_pass + funnel + rows_bytes(engine, prompt_tokens, max_new_tokens)


def rows_bytes(engine: Engine, prompt_tokens: int, max_new_tokens: int) -> int:
    """The attention rows a writing's steps keep, in float32: each step's row in every block and head, over the
    prompt and the tokens written before it."""
    config = engine.loaded.model.config
    keys = max_new_tokens * prompt_tokens + max_new_tokens * (max_new_tokens - 1) // 2
    return config.num_hidden_layers * config.num_attention_heads * keys * 4


def writing(engine: Engine, text: str, knobs: Knobs, most: int = MAX_NEW_TOKENS) -> Writing:
    """A writing that continues `text` as the engine reads it (Engine.tokenize: the tokens a run of it has),
    checked: TextTooLong past the engine's characters, and Writing's own checks."""
    check_writer(engine.loaded)
    if len(text) > engine.max_chars:
        raise TextTooLong(f"the text has {len(text):,} characters; the limit is {engine.max_chars:,}")
    tokens, cut = engine.tokenize(text)
    if cut:
        raise InvalidInput(
            f"the prompt is longer than the {engine.max_tokens} tokens this model is read at a time: nothing is "
            "left to write with"
        )
    return Writing(engine, tokens, knobs, most)
