"""A head atlas: what each head does over a corpus, not one prompt.

Per head, over every query row of every sentence (each row counts once):
- previous: the mean weight a query gives to the token before it (queries that have one);
- self: the mean weight a query gives to itself;
- sink: the mean weight a query gives to the first token ([CLS] in BERT, the first piece in GPT-2);
- entropy: the mean row entropy, in nats;
- positional: the mean weight at the head's favourite relative offset k − q (every query counts, 0 where
  the offset falls outside the sentence): 1 for a head that always looks the same distance away;
- induction: on random-token sequences read twice in a row, the mean weight a token of the second copy
  gives to the token that followed its first occurrence (key q − L + 1 for copy length L);
- ablation: the mean cosine change 1 − cos(v, v′) of the sentence vector when the head is switched off
  (its context zeroed before W_O, as the lab's ablation runs do), on the first `ablation_sentences`.
"""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import Tensor

from app.engine import names
from app.engine.capture import (
    Sequence,
    ablating_rows,
    block_outputs,
    capture_batch,
    model_inputs,
    on_cpu,
    starting_at,
)
from app.engine.engine import BATCH_TOKENS, Engine, batches
from app.engine.errors import InvalidInput
from app.engine.labels import token_labels
from app.engine.spec import AtlasSpec

MAX_SENTENCES = 1000
MAX_TOKENS = 64  # a sentence is read up to this many tokens, the tokenizer's own included
MAX_REPEATS = 256
MAX_REPEAT_LENGTH = 30  # two copies and the added tokens stay within MAX_TOKENS
# Every score a head gets, by its name in the atlas and its name on the page (sent in the page's config).
SCORES = {
    "previous": "previous-token score",
    "induction": "induction score",
    "sink": "first-token sink",
    "entropy": "mean entropy (nats)",
    "positional": "positional score",
    "self": "self score",
    "ablation": "ablation effect (1 − cos)",
}
LABEL_THRESHOLD = 0.5
LABELS = {
    "previous": "previous-token head",
    "induction": "induction head",
    "sink": "first-token sink",
    "self": "self head",
}
EXAMPLES = 5  # top examples kept per head
CORPUS = Path(__file__).parent / "data" / "atlas-corpus.txt"


def shipped_sentences() -> tuple[str, ...]:
    """The lab's own corpus: sentences the project wrote, one per line."""
    return sentences_of(CORPUS.read_text())


def sentences_of(text: str) -> tuple[str, ...]:
    """One sentence per non-empty line, spaces at its ends dropped."""
    return tuple(line.strip() for line in text.splitlines() if line.strip())


@dataclass
class Atlas:
    spec: AtlasSpec
    scores: dict[str, Tensor]  # name -> [layer, head], float64; "ablation" is absent without an adapter
    offset: Tensor  # [layer, head]: the relative offset k − q the positional score is read at
    tokens: int  # query rows the sentence scores average over
    cut: int  # sentences longer than MAX_TOKENS tokens, read up to it
    # Each head's strongest weights on a key the tokenizer did not add, one per sentence, strongest first:
    # [layer, head, EXAMPLES] each (weight, sentence, query, key); fewer sentences than EXAMPLES leave −1s.
    examples: tuple[Tensor, Tensor, Tensor, Tensor]
    ids: list[list[int]]  # each sentence's ids as read
    storages: dict[int, int] = field(default_factory=dict)  # for the run cache: a few KB, not counted

    @property
    def atlas_id(self) -> str:
        return self.spec.run_id

    def labels(self) -> list[list[dict | None]]:
        """Per head, the strongest of the labelled scores if it reaches LABEL_THRESHOLD: {score, label, value}."""
        layers, heads = self.offset.shape
        found = []
        for layer in range(layers):
            row = []
            for head in range(heads):
                values = {name: float(self.scores[name][layer, head]) for name in LABELS}
                best = max(values, key=values.get)
                row.append(
                    {"score": best, "label": LABELS[best], "value": values[best]}
                    if values[best] >= LABEL_THRESHOLD
                    else None
                )
            found.append(row)
        return found

    def shown_examples(self, pieces: Callable[[list[int]], list[str]]) -> list[list[list[dict]]]:
        """Per head, its top examples as a page shows them: the sentence, the query and key and their tokens
        (labelled as the lab labels a run's, from the model's `pieces`), and the weight between them."""
        labels: dict[int, list[str]] = {}  # each sentence's token labels, made once however many heads show it
        layers, heads = self.offset.shape
        shown = [[[] for _ in range(heads)] for _ in range(layers)]
        for layer in range(layers):
            for head in range(heads):
                columns = (values[layer, head].tolist() for values in self.examples)
                for weight, sentence, query, key in zip(*columns, strict=True):
                    if sentence < 0:
                        continue
                    if sentence not in labels:
                        labels[sentence] = token_labels(pieces(self.ids[sentence]))
                    shown[layer][head].append(
                        {
                            "sentence": sentence,
                            "text": self.spec.sentences[sentence],
                            "query": query,
                            "key": key,
                            "query_token": labels[sentence][query],
                            "key_token": labels[sentence][key],
                            "weight": weight,
                        }
                    )
        return shown


class Sums:
    """Running sums of each score over the corpus, and what each is divided by."""

    def __init__(self, layers: int, heads: int):
        zeros = lambda *shape: torch.zeros(layers, heads, *shape, dtype=torch.float64)  # noqa: E731
        self.previous, self.self, self.sink, self.entropy = zeros(), zeros(), zeros(), zeros()
        self.offsets = zeros(2 * MAX_TOKENS - 1)  # index d + MAX_TOKENS − 1 for offset d = k − q
        self.induction = zeros()
        self.rows = self.previous_rows = self.induction_rows = 0
        self.top = torch.full((layers, heads, EXAMPLES), -1.0, dtype=torch.float64)  # weight, −1: none yet
        self.top_where = torch.full((layers, heads, EXAMPLES, 3), -1, dtype=torch.long)  # sentence, query, key

    def add_sentences(
        self, attentions: tuple[Tensor, ...], lengths: list[int], sentences: list[int], added: Tensor
    ) -> None:
        """One padded batch: attentions [batch, head, query, key] per block, the sentences' indices, and
        which of their tokens the tokenizer added ([batch, pos])."""
        longest = max(lengths)
        real = torch.arange(longest)[None, :] < torch.tensor(lengths)[:, None]  # [batch, query]
        self.rows += sum(lengths)
        self.previous_rows += sum(length - 1 for length in lengths)
        positions = torch.arange(longest)
        offsets = (positions[None, :] - positions[:, None] + MAX_TOKENS - 1).flatten()  # cell (q, k) -> k − q
        for layer, weights in enumerate(attentions):
            weights = weights.double() * real[:, None, :, None]  # padding queries count for nothing
            summed = weights.sum(0)  # [head, query, key]: the batch's rows added cell by cell
            self.self[layer] += summed.diagonal(dim1=-2, dim2=-1).sum(-1)
            self.previous[layer] += summed.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1)
            self.sink[layer] += summed[..., 0].sum(-1)
            self.entropy[layer] -= torch.special.xlogy(weights, weights).sum((0, -2, -1))  # 0 log 0 = 0
            self.offsets[layer].index_add_(-1, offsets, summed.flatten(-2))
            self._keep_top(layer, weights.masked_fill(added[:, None, None, :], 0), sentences)

    def _keep_top(self, layer: int, weights: Tensor, sentences: list[int]) -> None:
        """The strongest cell of each sentence for each head, merged into the kept top EXAMPLES."""
        batch, heads, longest, _ = weights.shape
        best = weights.flatten(-2).max(-1)  # [batch, head]
        where = torch.stack(
            [
                torch.tensor(sentences)[:, None].expand(batch, heads),
                best.indices // longest,
                best.indices % longest,
            ],
            dim=-1,
        ).transpose(0, 1)  # [head, batch, 3]
        values = torch.cat([self.top[layer], best.values.T], dim=-1)  # [head, EXAMPLES + batch]
        places = torch.cat([self.top_where[layer], where], dim=1)
        kept = values.topk(EXAMPLES, dim=-1)
        self.top[layer] = kept.values
        self.top_where[layer] = places.gather(1, kept.indices[..., None].expand(-1, -1, 3))

    def add_repeats(self, attentions: tuple[Tensor, ...], start: int, length: int) -> None:
        """A batch of repeated sequences whose first copy starts at `start`: second-copy queries' weight
        on the token after their first occurrence."""
        queries = torch.arange(start + length, start + 2 * length)
        self.induction_rows += attentions[0].shape[0] * length
        for layer, weights in enumerate(attentions):
            self.induction[layer] += weights[:, :, queries, queries - length + 1].double().sum((0, -1))

    def scores(self) -> tuple[dict[str, Tensor], Tensor]:
        offsets = self.offsets / self.rows
        best = offsets.max(-1)
        return {
            "previous": self.previous / self.previous_rows,
            "induction": self.induction / self.induction_rows,
            "sink": self.sink / self.rows,
            "entropy": self.entropy / self.rows,
            "positional": best.values,
            "self": self.self / self.rows,
        }, best.indices - (MAX_TOKENS - 1)


def read_corpus(engine: Engine, sentences: tuple[str, ...]) -> tuple[list[list[int]], int]:
    """Each sentence's ids, cut at MAX_TOKENS (or the model's fewer positions), and how many were cut."""
    longest = min(MAX_TOKENS, engine.max_tokens)
    tokenizer = engine.loaded.tokenizer
    whole = tokenizer(list(sentences), truncation=True, max_length=longest + 1)["input_ids"]
    cut = sum(len(ids) > longest for ids in whole)
    return (tokenizer(list(sentences), truncation=True, max_length=longest)["input_ids"] if cut else whole), cut


def repeated_sequences(engine: Engine, spec: AtlasSpec) -> tuple[Tensor, int]:
    """spec.repeats random-token sequences read twice in a row, with the tokenizer's added tokens around
    them ([CLS] x x [SEP]): [repeats, pos], and the position where the first copy starts. The tokens are
    drawn uniformly from the upper nine tenths of the vocabulary (BERT's [unused] rows lie below), leaving
    out special tokens."""
    tokenizer = engine.loaded.tokenizer
    vocab = engine.loaded.model.config.vocab_size
    allowed = torch.ones(vocab, dtype=torch.bool)
    allowed[: vocab // 10] = False
    allowed[[i for i in tokenizer.all_special_ids if i < vocab]] = False
    choices = allowed.nonzero()[:, 0]
    generator = torch.Generator().manual_seed(spec.seed)
    drawn = choices[torch.randint(len(choices), (spec.repeats, spec.repeat_length), generator=generator)]
    before, after = added_tokens(tokenizer)
    return torch.tensor([[*before, *copy, *copy, *after] for copy in drawn.tolist()]), len(before)


def added_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text's own ([CLS] and [SEP]; none for GPT-2)."""
    whole = tokenizer("a")["input_ids"]
    own = tokenizer("a", add_special_tokens=False)["input_ids"]
    start = whole.index(own[0])
    return whole[:start], whole[start + len(own) :]


def check_atlas(spec: AtlasSpec) -> None:
    if not spec.sentences:
        raise InvalidInput("the corpus has no sentences: give one sentence per line")
    if len(spec.sentences) > MAX_SENTENCES:
        raise InvalidInput(f"the corpus has {len(spec.sentences):,} sentences; the limit is {MAX_SENTENCES:,}")
    if not 1 <= spec.repeats <= MAX_REPEATS:
        raise InvalidInput(f"repeats is {spec.repeats}: give 1 to {MAX_REPEATS}")
    if not 2 <= spec.repeat_length <= MAX_REPEAT_LENGTH:
        raise InvalidInput(f"repeat_length is {spec.repeat_length}: give 2 to {MAX_REPEAT_LENGTH}")
    if not 0 <= spec.ablation_sentences <= len(spec.sentences):
        raise InvalidInput(f"ablation_sentences is {spec.ablation_sentences}: at most the corpus's sentences")


def ablation_cost(engine: Engine, spec: AtlasSpec) -> list[int]:
    """What each sentence of the ablation sample costs, in order: its tokens × the model's heads × its blocks,
    the tokens its ablated passes read (each block's every head switched off in turn). 0 where nothing is
    switched off (a model without an adapter, or no sample)."""
    if engine.loaded.family.attention_only or not spec.ablation_sentences:
        return []
    config = engine.loaded.model.config
    ids, _ = read_corpus(engine, spec.sentences[: spec.ablation_sentences])
    return [len(row) * config.num_attention_heads * config.num_hidden_layers for row in ids]


def check_ablation(engine: Engine, spec: AtlasSpec, max_ablation_tokens: int | None) -> None:
    """InvalidInput where the ablation sample costs more than the lab's bound (ablation_cost), naming the
    setting and how many of these sentences fit within it."""
    costs = ablation_cost(engine, spec)
    cost = sum(costs)
    if max_ablation_tokens is None or cost <= max_ablation_tokens:
        return
    config = engine.loaded.model.config
    fit, spent = 0, 0
    while spent + costs[fit] <= max_ablation_tokens:
        spent += costs[fit]
        fit += 1
    raise InvalidInput(
        f"switching each head off costs the sample's tokens × heads × blocks: "
        f"{cost // (config.num_attention_heads * config.num_hidden_layers):,} × {config.num_attention_heads} × "
        f"{config.num_hidden_layers} = {cost:,}, past this lab's bound of {max_ablation_tokens:,} "
        f"(ATTENTION_LAB_MAX_ABLATION_TOKENS); ablation_sentences at most {fit:,} of these sentences"
    )


def atlas_slices(
    engine: Engine,
    spec: AtlasSpec,
    progress: Callable[[int, int], None],
    max_ablation_tokens: int | None = None,
) -> Iterator[Callable]:
    """The atlas in slices of work, each one padded pass of at most BATCH_TOKENS padded tokens (app.serving.work
    runs one per turn at the gate): the sentences, the repeated sequences, then the ablation sample in groups
    of sentences of similar length: each group's pass, then one pass per block with each of its heads
    switched off in turn, from the block's input on (group × heads rows). The last slice returns the Atlas.
    `progress(done, total)` is called after each. The sample is checked against `max_ablation_tokens` first
    (check_ablation)."""
    check_atlas(spec)
    check_ablation(engine, spec, max_ablation_tokens)
    loaded = engine.loaded
    model, family, config = loaded.model, loaded.family, loaded.model.config
    ids, cut = read_corpus(engine, spec.sentences)
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    # A model without an adapter reads one input per pass: how it would read padding is not known.
    groups = batches(order, lambda _: 0, lambda index: len(ids[index]), 0 if family.attention_only else BATCH_TOKENS)
    repeats, start = repeated_sequences(engine, spec)
    repeat_groups = (
        [repeats[first : first + 1] for first in range(len(repeats))] if family.attention_only else [repeats]
    )
    # A model without an adapter has no W_O input to switch a head off at.
    ablates = not family.attention_only and spec.ablation_sentences > 0
    sample = sorted(range(spec.ablation_sentences), key=lambda index: len(ids[index])) if ablates else []
    heads = config.num_attention_heads
    sample_groups = batches(sample, lambda _: 0, lambda index: len(ids[index]), BATCH_TOKENS // heads)
    total = len(groups) + len(repeat_groups) + len(sample_groups) * (config.num_hidden_layers + 1)
    sums = Sums(config.num_hidden_layers, heads)
    special = torch.tensor(loaded.tokenizer.all_special_ids)
    done = 0

    def step(work: Callable[[], object]) -> Callable[[], object]:
        def run():
            nonlocal done
            result = work()
            done += 1
            progress(done, total)
            return result

        return run

    def sentences(group: list[int]):
        sequences = [
            Sequence(torch.tensor(ids[index]), torch.zeros(len(ids[index]), dtype=torch.long), spec.mask)
            for index in group
        ]
        with torch.inference_mode():
            out = model(**model_inputs(model, family, sequences), output_attentions=True)
        attentions = [on_cpu(weights) for weights in out.attentions]  # where the sums are kept
        added = torch.zeros(len(group), max(len(ids[index]) for index in group), dtype=torch.bool)
        for row, index in enumerate(group):
            added[row, : len(ids[index])] = torch.isin(torch.tensor(ids[index]), special)
        sums.add_sentences(attentions, [len(ids[index]) for index in group], group, added)

    def repeated(rows: Tensor):
        sequences = [Sequence(row, torch.zeros_like(row), spec.mask) for row in rows]
        with torch.inference_mode():
            out = model(**model_inputs(model, family, sequences), output_attentions=True)
        sums.add_repeats([on_cpu(weights) for weights in out.attentions], start, spec.repeat_length)

    for group in groups:
        yield step(lambda group=group: sentences(group))
    for rows in repeat_groups:
        yield step(lambda rows=rows: repeated(rows))
    changes = torch.zeros(config.num_hidden_layers, heads, dtype=torch.float64)  # Σ over the sample of 1 − cos
    for group in sample_groups:
        rows = [torch.tensor(ids[index]) for index in group]
        kept = {}  # the group's sentence vectors and what each block returned for it: one group at a time

        def base(rows=rows, kept=kept):
            with block_outputs(model, family) as outputs:
                kept.update(vectors=sentence_vectors(engine, rows, spec.mask), outputs=outputs)

        yield step(base)
        for layer in range(config.num_hidden_layers):

            def ablated(layer=layer, rows=rows, kept=kept):
                vectors = ablated_vectors(engine, rows, spec.mask, layer, kept["outputs"][:layer])
                cosines = torch.nn.functional.cosine_similarity(kept["vectors"][None], vectors, dim=-1)
                changes[layer] += (1 - cosines).sum(-1)
                if layer == config.num_hidden_layers - 1:
                    kept.clear()

            yield step(ablated)

    def finish() -> Atlas:
        scores, offset = sums.scores()
        if sample:
            scores["ablation"] = changes / len(sample)
        where = sums.top_where
        examples = (sums.top, where[..., 0], where[..., 1], where[..., 2])
        return Atlas(spec, scores, offset, sums.rows, cut, examples, ids)

    yield finish


def atlas_bytes(engine: Engine, spec: AtlasSpec) -> int:
    """The atlas's peak memory beside the model, stated before it starts: one pass of BATCH_TOKENS padded
    tokens with every block's weights out (the sentences' passes ask for them, output_attentions) and the
    pass's own (Footprint.transient_bytes), and one group of the ablation sample's block outputs (the group's
    rows × heads go through the blocks after the one switched off: BATCH_TOKENS tokens)."""
    config = engine.loaded.model.config
    heads, layers, hidden = config.num_attention_heads, config.num_hidden_layers, config.hidden_size
    longest = min(MAX_TOKENS, engine.max_tokens)
    batch = max(1, BATCH_TOKENS // longest)
    weights = layers * batch * heads * longest**2 * 4 * 2  # the blocks' weights, and their float64 copy one at a time
    outputs = (layers + 1) * BATCH_TOKENS * hidden * 4 * 2
    return weights + outputs + engine.footprint.transient_bytes(batch, longest)


def sentence_vectors(
    engine: Engine, rows: list[Tensor], mask: str, *switched: contextlib.AbstractContextManager
) -> Tensor:
    """The sentence vector of each row of ids (the model's pipeline after its default pooling, no prompt),
    read with `mask`, in one padded pass under the `switched` contexts. [row, size], float64, on the CPU."""
    loaded = engine.loaded
    sequences = [Sequence(row, torch.zeros_like(row), mask) for row in rows]
    with torch.inference_mode(), contextlib.ExitStack() as stack:
        for context in switched:
            stack.enter_context(context)
        states = loaded.model.base_model(**model_inputs(loaded.model, loaded.family, sequences)).last_hidden_state
    pipeline = loaded.pipeline.to(states.device)
    vectors = [
        pipeline.stages(states[index, : len(row)], loaded.default_pooling)[-1].vector for index, row in enumerate(rows)
    ]
    return on_cpu(torch.stack(vectors)).double()


def ablated_vectors(engine: Engine, sample: list[Tensor], mask: str, layer: int, before: list) -> Tensor:
    """The sample's sentence vectors with each head of block `layer` switched off in turn, in one padded pass
    (the sample once per head, row by row that head off: capture.ablating_rows) that starts at the block's
    input: the blocks before it return `before`, what they returned for the sample alone
    (capture.starting_at), as a head changes nothing before its own block. [head, sentence, size]"""
    model, family = engine.loaded.model, engine.loaded.family
    heads = model.config.num_attention_heads
    off = [head for head in range(heads) for _ in sample]
    vectors = sentence_vectors(
        engine,
        sample * heads,
        mask,
        starting_at(model, family, before, heads),
        ablating_rows(model, family, layer, off),
    )
    return vectors.unflatten(0, (heads, len(sample)))


@dataclass(frozen=True)
class Projection:
    """How a head's queries and keys are put in one 2-D space: PCA, or t-SNE with its perplexity and seed
    (scikit-learn's, initialised by PCA, TSNE_ITERATIONS iterations). t-SNE costs seconds per thousand
    points, so it shows the first TSNE_TOKENS tokens' queries and keys, PCA the first MAX_POINTS'."""

    method: Literal["pca", "tsne"] = "pca"
    perplexity: float = 30.0
    seed: int = 0

    @property
    def max_tokens(self) -> int:
        return MAX_POINTS if self.method == "pca" else TSNE_TOKENS

    def describe(self, queries: int, keys: int) -> str:
        if self.method == "pca":
            return f"PCA (scikit-learn, 2 components) of {queries} queries and {keys} keys"
        return (
            f"t-SNE (scikit-learn, perplexity {self.perplexity:g}, {TSNE_ITERATIONS} iterations, seed {self.seed}, "
            f"initialised by PCA) of {queries} queries and {keys} keys"
        )


MAX_POINTS = 4096  # the corpus tokens whose queries and keys a head's space shows: the first sentences'
TSNE_TOKENS = 1024  # t-SNE's time grows with its points: 2 × 1,024 keeps a map to seconds (bench/README.md)
TSNE_ITERATIONS = 500


def space_slices(engine: Engine, spec: AtlasSpec, layer: int, head: int, max_tokens: int) -> Iterator[Callable]:
    """One head's queries and keys of the first sentences (up to `max_tokens` tokens), in slices of one padded
    pass each; the last returns them with their tokens, to be projected (project) outside the model's turns."""
    loaded, config = engine.loaded, engine.loaded.model.config
    if loaded.family.attention_only:
        raise InvalidInput("this model's queries and keys are not read: it has no adapter")
    if not (0 <= layer < config.num_hidden_layers and 0 <= head < config.num_attention_heads):
        raise InvalidInput(f"no head ({layer}, {head}) in this model")
    ids, _ = read_corpus(engine, spec.sentences)
    kept, total = [], 0
    for index, row in enumerate(ids):
        if total + len(row) > max_tokens:
            break
        kept.append(index)
        total += len(row)
    groups = batches(kept, lambda _: 0, lambda index: len(ids[index]), BATCH_TOKENS)
    queries, keys = [], []

    def read(group: list[int]):
        sequences = [
            Sequence(torch.tensor(ids[index]), torch.zeros(len(ids[index]), dtype=torch.long), spec.mask)
            for index in group
        ]
        for activations, _ in capture_batch(loaded.model, loaded.family, sequences):
            queries.append(activations[names.attn(layer, "q")][head].double())  # [pos, d_head]
            keys.append(activations[names.attn(layer, "k")][head].double())

    for group in groups:
        yield lambda group=group: read(group)

    def finish() -> dict:
        order = [index for group in groups for index in group]
        tokens = [engine.pieces(ids[index]) for index in order]
        return {
            "q": torch.cat(queries),
            "k": torch.cat(keys),
            "sentence": [index for index in order for _ in ids[index]],
            "position": [position for index in order for position in range(len(ids[index]))],
            "token": [piece for pieces in tokens for piece in pieces],
            "sentences": {index: spec.sentences[index] for index in order},
        }

    yield finish


def projection_bytes(q: Tensor, k: Tensor) -> int:
    """project's peak memory, stated before it starts: its rows in float64 a few times over (PCA's centred copy and
    its decomposition, t-SNE's neighbours and gradients), and t-SNE's pairwise distances of its rows."""
    rows, columns = len(q) + len(k), q.shape[1]
    return 8 * (4 * rows * columns + rows * rows)


def project(q: Tensor, k: Tensor, projection: Projection = Projection()) -> dict:
    """Queries and keys [token, d_head] in one 2-D space, as AttentionViz puts them: the keys are first
    translated so that their centroid is the queries' (k − k̄ + q̄: every score of a query changes by the same
    q·(q̄ − k̄), so its softmax does not), then queries are multiplied by s and keys divided by s, with s² the
    keys' mean norm over the queries' (q·k unchanged), so that both have the same mean norm and a short
    distance ‖q − k‖² = ‖q‖² + ‖k‖² − 2 q·k means a large q·k. Then PCA or t-SNE (scikit-learn) of the
    2·token rows, queries first; `explained` is PCA's share of variance per axis (none for t-SNE)."""
    k = k - k.mean(0) + q.mean(0)
    scale = float((k.norm(dim=1).mean() / q.norm(dim=1).mean()).sqrt())
    q, k = q * scale, k / scale
    rows = torch.cat([q, k]).numpy()
    # Imported here, where a map is drawn: scikit-learn would lengthen every start of the lab.
    from sklearn.decomposition import PCA
    from sklearn.manifold import TSNE

    if projection.method == "pca":
        pca = PCA(n_components=2, svd_solver="full")
        points, explained = pca.fit_transform(rows), pca.explained_variance_ratio_.tolist()
    else:
        tsne = TSNE(
            n_components=2,
            perplexity=min(projection.perplexity, (len(rows) - 1) / 3),  # sklearn's bound for few points
            max_iter=TSNE_ITERATIONS,
            init="pca",
            random_state=projection.seed,
        )
        points, explained = tsne.fit_transform(rows), []
    n = len(q)
    return {"query": points[:n].tolist(), "key": points[n:].tolist(), "scale": scale, "explained": explained}
