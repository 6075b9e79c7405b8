"""The questions a class is asked, built and answered from a run's own numbers: which token a token attends
to most in a view, which head of a block does a pattern most, which token the language-model head writes
next. The server asks and answers them here; a page never computes an answer. Synchronous, and knows
nothing of HTTP or of classes.

A view's row is the one the page draws (static/js/matrix.js, viewMatrix): the measure's blocks, the chosen
head or the float64 mean of a head set, or of every block; the sink tokens (those the tokenizer added)
hidden, and the rest rescaled to sum to 1 under "renormalise"; a segment filter's keys only; and never a
key the causal mask, or the sliding window of every block drawn, keeps from the query."""

import math
import random
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from app.engine.errors import InvalidInput, OutOfRange
from app.engine.labels import shown
from app.engine.lessons import added_names, head_stats
from app.engine.measures import MEASURES, Measure, mean_view
from app.engine.runs import Run

Sinks = Literal["show", "hide", "renormalise"]
Segments = Literal["all", "AA", "AB", "BA", "BB"]
Pattern = Literal["previous", "cls", "sep", "period", "self", "next"]
PATTERNS: tuple[str, ...] = Pattern.__args__
NEXT_CHOICES = 6  # the LM head's best candidates a next-token question offers


@dataclass(frozen=True)
class View:
    """What the heatmap shows: block `layer` (ignored under block_mean), one head or the mean of `heads`
    ("mean"), a measure (ALTI measures a block as a whole: its head is ignored), and the two filters."""

    layer: int
    head: int | Literal["mean"] = 0
    heads: tuple[int, ...] = ()
    block_mean: bool = False
    measure: Measure = "weights"
    sinks: Sinks = "show"
    segments: Segments = "all"


@dataclass(frozen=True)
class Choice:
    label: str
    value: float  # the choice's number (its weight in the view, its share, its probability)
    token: int | None = None
    head: int | None = None
    document: int | None = None
    rank: int | None = None  # a search question's document: its place in the whole index's exact ranking (1: first)


@dataclass(frozen=True)
class Question:
    kind: str
    text: str  # the default wording, which a teacher may replace
    choices: tuple[Choice, ...]
    measure: str | None = None  # the measure an "attends" question is asked under (MEASURES)
    ranked: int | None = None  # a search question: how many documents its index ranks
    drawn: int | None = None  # a written question: the choice the writing drew (sampling may draw another one)

    @property
    def answer(self) -> int:
        """The choice with the largest value; the first of equal ones."""
        values = [choice.value for choice in self.choices]
        return values.index(max(values))

    @property
    def right(self) -> tuple[int, ...]:
        """Every choice that counts as right: a choice whose value equals the answer's (a tie counts for the
        learner, as predict-first counts it)."""
        best = self.choices[self.answer].value
        return tuple(index for index, choice in enumerate(self.choices) if choice.value == best)


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def view_heads(run: Run, view: View) -> list[int]:
    """The heads a view averages: [0] for a measure with one matrix per block."""
    if MEASURES[view.measure].per_block:
        return [0]
    chosen = sorted(set(view.heads)) if view.head == "mean" else [view.head]
    if not chosen:
        raise InvalidInput("a mean of heads needs at least one head in `heads`")
    for head in chosen:
        if not 0 <= head < run.n_heads:
            raise OutOfRange(f"head {head} does not exist: heads are 0 to {run.n_heads - 1}")
    return chosen


def view_layers(run: Run, view: View) -> list[int]:
    if view.block_mean:
        return list(range(run.n_layers))
    if not 0 <= view.layer < run.n_layers:
        raise OutOfRange(f"layer {view.layer} does not exist: layers are 0 to {run.n_layers - 1}")
    return [view.layer]


def measured_layer(view: View) -> int | None:
    """The block whose measure a view reads: None for every block (a mean over the blocks)."""
    return None if view.block_mean else view.layer


def view_row(run: Run, blocks: list[torch.Tensor], view: View, token: int) -> torch.Tensor:
    """Token `token`'s row in the view, float64, NaN for each key the view leaves out. [key]
    blocks: the view's measure of the run, for its block or every block (measured_layer)."""
    run.check_token(token)
    layers = view_layers(run, view)
    heads = view_heads(run, view)
    (combined,) = mean_view(blocks, heads, view.block_mean)  # [1, query, key], float32 as the page holds it
    row = combined[0, token].double()
    hidden = torch.tensor([t.added for t in run.tokens])
    if view.sinks != "show":
        kept = row[~hidden].sum()
        if view.sinks == "renormalise" and kept > 0:
            row = row / kept
        row[hidden] = math.nan
    if view.segments != "all":
        source, target = view.segments
        if run.tokens[token].segment != source:
            raise InvalidInput(
                f"token {token} is in segment {run.tokens[token].segment}: "
                f"the {source} → {target} filter shows the queries of segment {source}"
            )
        row[torch.tensor([t.segment != target for t in run.tokens])] = math.nan
    keys = torch.arange(len(run.tokens))
    causal = run.spec.mask == "causal"
    if causal:
        row[keys > token] = math.nan
    # A model without an adapter has no windows the lab knows: its weights show what it hides.
    windows = [run.scoring[layer].window for layer in layers] if run.scoring else [None]
    if None not in windows:  # every block drawn slides: the widest window is what the view can reach
        row[(token - keys if causal else (token - keys).abs()) >= max(windows)] = math.nan
    return row


def describe(run: Run, view: View) -> str:
    """The view in words, as the heatmap's title names it: "block 2, head 5", "all 6 blocks averaged, heads
    1, 4 averaged", with its measure and filters after it."""
    layers = f"all {count(run.n_layers, 'block')} averaged" if view.block_mean else f"block {view.layer}"
    if MEASURES[view.measure].per_block:
        where = layers
    elif view.head != "mean":
        where = f"{layers}, head {view.head}"
    else:
        heads = view_heads(run, view)
        averaged = (
            f"all {count(run.n_heads, 'head')}" if len(heads) == run.n_heads else f"heads {', '.join(map(str, heads))}"
        )
        where = f"{layers}, {averaged} averaged"
    notes = [MEASURES[view.measure].short] if MEASURES[view.measure].short else []
    if view.sinks != "show":
        sinks = "+".join(name for name in added_names(run).values() if name)
        notes.append(f"{sinks} hidden" + (", the rest rescaled" if view.sinks == "renormalise" else ""))
    if view.segments != "all":
        notes.append(f"segment {view.segments[0]} → {view.segments[1]}")
    return where + (f" ({'; '.join(notes)})" if notes else "")


def attends(run: Run, blocks: list[torch.Tensor], view: View, token: int) -> Question:
    """Which token does token `token` attend to most in the view? Choices: the keys the view keeps.
    blocks: the view's measure of the run (view_row)."""
    row = view_row(run, blocks, view, token)
    labels = [t.label for t in run.tokens]
    choices = tuple(
        Choice(labels[key], float(value), token=key) for key, value in enumerate(row.tolist()) if not math.isnan(value)
    )
    if len(choices) < 2:
        raise InvalidInput(f"this view leaves token {token} fewer than two tokens to choose from: ask another token")
    text = f"Which token does “{labels[token]}” attend to most in {describe(run, view)}?"
    return Question("attends", text, choices, measure=view.measure)


CrossMeasure = Literal["weights", "norm"]  # the measures an encoder-decoder's run computes (NOT_MEASURED: the rest)


@dataclass(frozen=True)
class CrossView:
    """Cross-attention as the encoder-decoder's page draws it: decoder block `layer` (ignored under block_mean), one
    head or the mean of `heads` ("mean"), weights or norm-weighted, the source's added tokens (its end token </s>)
    shown, hidden, or hidden and the rest rescaled to sum to 1."""

    layer: int = 0
    head: int | Literal["mean"] = 0
    heads: tuple[int, ...] = ()
    block_mean: bool = False
    measure: CrossMeasure = "weights"
    sinks: Sinks = "show"


def cross_heads(n_heads: int, view: CrossView) -> list[int]:
    chosen = sorted(set(view.heads)) if view.head == "mean" else [view.head]
    if not chosen:
        raise InvalidInput("a mean of heads needs at least one head in `heads`")
    for head in chosen:
        if not 0 <= head < n_heads:
            raise OutOfRange(f"head {head} does not exist: heads are 0 to {n_heads - 1}")
    return chosen


def cross_row(matrix: torch.Tensor, source: list, view: CrossView, token: int) -> torch.Tensor:
    """Target row `token` of the cross-attention in the view, float64, NaN for each source token it leaves out.
    [source_pos]  matrix: the run's cross-attention in the view's measure, [layer, head, target_pos, source_pos];
    source: the source's tokens."""
    layers, n_heads, targets = matrix.shape[:3]
    if not 0 <= token < targets:
        raise OutOfRange(f"target token {token} does not exist: the decoder reads tokens 0 to {targets - 1}")
    if not view.block_mean and not 0 <= view.layer < layers:
        raise OutOfRange(f"decoder block {view.layer} does not exist: blocks are 0 to {layers - 1}")
    heads = cross_heads(n_heads, view)
    blocks = [matrix[layer] for layer in (range(layers) if view.block_mean else [view.layer])]
    (combined,) = mean_view(blocks, heads, view.block_mean)  # [1, target_pos, source_pos], as the page holds it
    row = combined[0, token].double()
    if view.sinks != "show":
        hidden = torch.tensor([t.added for t in source])
        kept = row[~hidden].sum()
        if view.sinks == "renormalise" and kept > 0:
            row = row / kept
        row[hidden] = math.nan
    return row


def describe_cross(layers: int, n_heads: int, view: CrossView) -> str:
    """The view in words: "cross-attention, decoder block 1, head 2", "…, all 3 decoder blocks averaged, heads 0, 2
    averaged", with its measure and the source's hidden end token after it."""
    where = f"all {count(layers, 'decoder block')} averaged" if view.block_mean else f"decoder block {view.layer}"
    if view.head != "mean":
        where += f", head {view.head}"
    else:
        heads = cross_heads(n_heads, view)
        chosen = f"all {count(n_heads, 'head')}" if len(heads) == n_heads else f"heads {', '.join(map(str, heads))}"
        where += f", {chosen} averaged"
    notes = [MEASURES[view.measure].short] if MEASURES[view.measure].short else []
    if view.sinks != "show":
        notes.append(
            "the source's added tokens hidden" + (", the rest rescaled" if view.sinks == "renormalise" else "")
        )
    return f"cross-attention, {where}" + (f" ({'; '.join(notes)})" if notes else "")


def cross_attends(matrix: torch.Tensor, source: list, target: list, view: CrossView, token: int) -> Question:
    """Which source token does target token `token` read most in cross-attention, in the view? The decoder's row
    `token` reads target token `token` and chooses the next one: the alignment of that next token, when a model
    writes it, with the source. Choices: the source tokens the view keeps; values: the row's numbers there.
    matrix: [layer, head, target_pos, source_pos] in the view's measure; source, target: the run's tokens (the
    target's from the decoder's start token on)."""
    row = cross_row(matrix, source, view, token)
    choices = tuple(
        Choice(source[key].label, float(value), token=key)
        for key, value in enumerate(row.tolist())
        if not math.isnan(value)
    )
    if len(choices) < 2:
        raise InvalidInput(f"this view leaves target token {token} fewer than two source tokens: ask with them shown")
    reads = target[token].label
    step = (
        f"reading “{reads}” to choose “{target[token + 1].label}”" if token + 1 < len(target) else f"reading “{reads}”"
    )
    where = describe_cross(matrix.shape[0], matrix.shape[1], view)
    text = f"The decoder, {step}: which source token does it read most in {where}?"
    return Question("cross_attends", text, choices, measure=view.measure)


PATTERN_WORDS = {
    "previous": "the token before it",
    "next": "the token after it",
    "self": "itself",
    "period": "“.”",
}


def head(run: Run, layer: int, pattern: Pattern) -> Question:
    """Which head of block `layer` does the pattern most? Choices: the block's heads; values: each head's
    mean share of attention on that pattern (lessons.head_stats)."""
    if not 0 <= layer < run.n_layers:
        raise OutOfRange(f"layer {layer} does not exist: layers are 0 to {run.n_layers - 1}")
    shares = [stats[pattern] for stats in head_stats(run) if stats["layer"] == layer]
    words = {**PATTERN_WORDS, **{role: name for role, name in added_names(run).items() if name}}
    if pattern not in words or not any(shares):
        raise InvalidInput(f"no head of block {layer} attends to {words.get(pattern, pattern)} in this input")
    choices = tuple(Choice(f"head {number}", share, head=number) for number, share in enumerate(shares))
    return Question("head", f"Which head of block {layer} attends most to {words[pattern]}?", choices)


def next_token(run: Run, pieces, token: int) -> Question:
    """Which token does the language-model head write after token `token`? Choices: its best candidates
    there, in an order shuffled once for this run and token (the same on every screen and every time);
    values: their probabilities. `pieces`: ids -> each token as a person reads it (Engine.pieces)."""
    if run.next_tokens is None:
        raise InvalidInput(f"{run.spec.model} has no language-model head: it predicts no next token")
    run.check_token(token)
    ids, _, probabilities = (values[token, :NEXT_CHOICES].tolist() for values in run.next_tokens)
    texts = pieces(ids)
    labels = [shown(text) for text in texts]
    # Two ids that read alike (" the" and "the") keep their spaces visible.
    labels = [
        label if labels.count(label) == 1 else text.replace(" ", "␣") for label, text in zip(labels, texts, strict=True)
    ]
    choices = [Choice(label, probability) for label, probability in zip(labels, probabilities, strict=True)]
    random.Random(f"{run.run_id}:{token}").shuffle(choices)
    query = run.tokens[token].label
    return Question("next_token", f"Which token does the model write next, after “{query}”?", tuple(choices))


Candidate = tuple[int, str, float]  # a token's id, its text, its probability


def written_next(candidates: list[Candidate], drawn: Candidate, before: str, seed: str, sampled: bool) -> Question:
    """Which token comes next in a writing (app.engine.writing), at one of its steps? Choices: the step's likeliest
    candidates at the last stage of its funnel, the probabilities the token was drawn from (after the temperature,
    top-k and top-p where they are on; the softmax alone for greedy), those with a chance left, and the token drawn
    in the place of the last where it was a rarer one; shuffled once for this writing and step (`seed`). Values:
    those probabilities, so the answer is the likeliest, which greedy writing always draws; `drawn` the choice it
    drew. candidates: the stage's, likeliest first; `before`: the words the step continues."""
    offered = [candidate for candidate in candidates if candidate[2] > 0][:NEXT_CHOICES]
    if len(offered) < 2:
        raise InvalidInput("this step left one token a chance (top-k 1, or a small top-p): there is nothing to ask")
    if drawn[0] not in [token for token, _, _ in offered]:
        offered[-1] = drawn  # the rarer token drawn is one of the choices
    labels = [shown(text) for _, text, _ in offered]
    # Two ids that read alike (" the" and "the") keep their spaces visible.
    labels = [
        label if labels.count(label) == 1 else text.replace(" ", "␣")
        for label, (_, text, _) in zip(labels, offered, strict=True)
    ]
    pairs = [(Choice(label, chance), token) for label, (token, _, chance) in zip(labels, offered, strict=True)]
    random.Random(seed).shuffle(pairs)
    tail = before if len(before) <= 60 else "…" + before[-59:]
    text = (
        f"Which token is likeliest next, after “{tail}”? (The writing draws at random: it may write another.)"
        if sampled
        else f"Which token does the model write next, after “{tail}”?"
    )
    found = next(place for place, (_, token) in enumerate(pairs) if token == drawn[0])
    return Question("written", text, tuple(choice for choice, _ in pairs), drawn=found)


def likelier_at(text: str, chances: dict[float, float], before: str) -> Question:
    """With which temperature is a token likelier at a writing's step? Choices: the temperatures; values: the
    token's probability at each (`chances`, from transformers' own TemperatureLogitsWarper on the step's logits), so
    the answer is the temperature that gives it more: the lowest for the likeliest token; for another, a lower one
    where it is close behind the likeliest and far ahead of the rest, a higher one where it is far behind.
    `text`: the token's piece; `before`: the words the step continues."""
    if len(chances) < 2:
        raise InvalidInput("a temperature question compares at least two different temperatures")
    label = shown(text)
    choices = tuple(Choice(f"temperature {temperature:g}", chance) for temperature, chance in chances.items())
    tail = before if len(before) <= 60 else "…" + before[-59:]
    temperatures = " or ".join(f"{temperature:g}" for temperature in chances)
    asked = f"With temperature {temperatures}, which makes “{label}” likelier after “{tail}”?"
    return Question("temperature", asked, choices)


def patched(answer: dict, layer: int, by: Literal["head", "position"], source: str) -> Question:
    """Which head of block `layer` (its output taken from B), or which of A's positions (its residual before
    block `layer` taken from B), moves A's output furthest towards B's? Choices: that block's cells of a
    patching sweep (app.engine.patch_job.patch_job's answer); values: each cell's share of the way from A's
    value to B's, (cell − A) / (B − A). `source`: B's text, for the wording."""
    span = answer["b"]["value"] - answer["a"]["value"]
    if span == 0:
        raise InvalidInput("A and B give the same output: no patch can move A towards B")
    cells = [cell for cell in answer["cells"] if cell["layer"] == layer]
    if not cells:
        raise OutOfRange(f"layer {layer} does not exist: layers are 0 to {answer['cells'][-1]['layer']}")
    share = lambda cell: (cell["value"] - answer["a"]["value"]) / span  # noqa: E731
    labels = [t.label for t in answer["a_tokens"]]
    if by == "head":
        choices = tuple(Choice(f"head {cell['head']}", share(cell), head=cell["head"]) for cell in cells)
        positions = cells[0]["positions"]
        where = f" at “{labels[positions[0]]}”" if len(positions) == 1 else ""
        what = f"Which head of block {layer}, its output{where} taken from B"
    else:
        choices = tuple(Choice(labels[cell["positions"][0]], share(cell), token=cell["positions"][0]) for cell in cells)
        what = f"Which token, its residual before block {layer} taken from B"
    return Question("patch", f"{what} (“{source}”), moves the output furthest towards B's?", choices)


LABEL_CHARS = 120  # a document's words a choice shows
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def first_document(
    scores, documents: tuple[str, ...], query: str, chosen: list[int], seed: str, document_prefix: str = ""
) -> Question:
    """Which of the `chosen` documents (by line) comes first for the query? Choices: those documents, in an order
    shuffled once for this index and query (`seed`: the same on every screen and every time); values: the cosine
    of each with the query (app.engine.search.cosines, `scores`, one a document of the index), so the answer is
    the one the exact ranking puts first among them; and each one's place in the whole index's exact ranking (as
    exact_top orders it: equal cosines in corpus order), which can be far from first. `query`: the query as read,
    its typed prefix before it; `document_prefix`: what the index typed before each document."""
    if len(set(chosen)) < 2:
        raise InvalidInput("a search question needs at least two different documents to choose from")
    outside = [document for document in chosen if not 0 <= document < len(documents)]
    if outside:
        raise InvalidInput(f"the index has documents 0 to {len(documents) - 1}, not {outside[0]}")
    cut = lambda text: text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"  # noqa: E731
    places = np.empty(len(scores), dtype=np.int64)
    places[np.argsort(-np.asarray(scores), kind="stable")] = np.arange(1, len(scores) + 1)
    choices = [
        Choice(cut(documents[document]), float(scores[document]), document=document, rank=int(places[document]))
        for document in chosen
    ]
    random.Random(seed).shuffle(choices)
    these = f"these {NUMBERS.get(len(choices), len(choices))} documents"
    read = f", each read after “{document_prefix}”," if document_prefix else ""
    text = f"Which of {these}{read} comes first for “{cut(query)}”?"
    return Question("search", text, tuple(choices), ranked=len(documents))


GROWN_HEAD_TEXT = "Which head will become the induction head?"


def grown_head(layers: int, heads: int, induction: list[list[float]] | None = None) -> Question:
    """Which head of a model being grown becomes its induction head? Choices: every head, "head L.H"; values:
    each head's induction (prefix-matching) score, least over the held-out sequences, at the training's latest
    checkpoint (app.engine.training.scores): known only once it has grown one, so a question asked before is
    answered at its reveal (all zeros until then)."""
    scores = induction or [[0.0] * heads for _ in range(layers)]
    choices = tuple(
        Choice(f"head {layer}.{head}", scores[layer][head], head=head)
        for layer in range(layers)
        for head in range(heads)
    )
    return Question("grown_head", GROWN_HEAD_TEXT, choices)


LOSS_DROP_TEXT = "When will the loss drop?"
DROP_RANGES = 4  # the step ranges a "when will the loss drop?" question offers


def loss_drop(steps: int, marked: int | None = None) -> Question:
    """When will a training's loss drop? Choices: its steps 1 to `steps` cut into DROP_RANGES ranges as even as
    whole steps allow, "steps a–b"; values: the step the training's measures mark as its phase change
    (app.engine.training.scores.phase_change, its "step") for the range that holds it, 0 for the others, so the
    answer is that range. Known only once the loss has dropped: asked before, answered at its reveal."""
    count = min(DROP_RANGES, steps)
    bounds = [round(steps * part / count) for part in range(count + 1)]
    label = lambda low, high: f"step {high:,}" if high == low + 1 else f"steps {low + 1:,}–{high:,}"  # noqa: E731
    choices = tuple(
        Choice(label(low, high), float(marked) if marked is not None and low < marked <= high else 0.0)
        for low, high in zip(bounds, bounds[1:], strict=False)
    )
    return Question("loss_drop", LOSS_DROP_TEXT, choices)
