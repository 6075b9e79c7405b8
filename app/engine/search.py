"""The sentence vector at work: a search index over a corpus, a query's nearest documents by cosine (exact, and
approximate with an HNSW graph), and the cost of reading every (query, document) pair instead.

A bi-encoder reads each document once, alone, into its sentence vector (the model's pipeline: pooling, Dense,
Normalize), and a query into its own: one pass per query, then a nearest-neighbour search. A cross-encoder
(app.engine.rerank) reads the query and a document together as one input, one pass per pair: it can re-rank a
few dozen candidates, never search a corpus.

The approximate index is usearch's HNSW (Malkov and Yashunin's hierarchical navigable small world graph): each
vector linked to about M neighbours per layer (`connectivity`), built by a search of depth ef_construction for
each vector added (`expansion_add`), searched with depth ef (`expansion_search`). Built on one thread, it is the
same graph for the same vectors and knobs on every worker, so it is a cache entry, not a stored result."""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from usearch.index import Index as UsearchIndex

from app.engine.capture import Sequence, model_inputs, on_cpu
from app.engine.engine import BATCH_TOKENS, Engine, batches
from app.engine.errors import InvalidInput
from app.engine.spec import IndexSpec

MAX_DOCUMENTS = 5000
MAX_DOCUMENT_CHARS = 2000  # a document is read up to the pooling's length (MiniLM: 256 tokens) anyway
MAX_K = 100
CORPUS = Path(__file__).parent / "data" / "search-corpus.txt"
# The approximate index's knobs: usearch's defaults for M and ef_construction, an ef at which the shipped
# corpus's top 10 come back whole for most queries (bench/README.md).
M = 16
EF_CONSTRUCTION = 128
EF = 64
BUILD_SLICE = 512  # vectors added to the graph per turn at the gate, a short turn (bench/README.md)
# Where a model's prompts are named for each side (sentence-transformers' names vary by model).
QUERY_PROMPTS = ("query",)
DOCUMENT_PROMPTS = ("document", "passage", "doc", "text")


# A query on each of the lab's corpus's topics, its ambiguous words among them: what the bench times and the
# tests measure recall on.
SAMPLE_QUERIES = (
    "where can I borrow money to buy a house",
    "sitting by the water watching the current",
    "an animal that flies at night",
    "hitting the ball in a game",
    "a machine that lifts heavy loads",
    "looking at cells under a microscope",
    "a hot spring in the mountains",
    "catching fish in a lake",
    "the bass player tuned his guitar",
    "missed the flight home",
)


def shipped_documents() -> tuple[str, ...]:
    """The lab's own corpus (app.engine.corpus): one document per line."""
    return documents_of(CORPUS.read_text())


def documents_of(text: str) -> tuple[str, ...]:
    """One document per non-empty line, spaces at its ends dropped."""
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def side_prompt(engine: Engine, side: str, asked: str | None) -> str | None:
    """The model's prompt (by name) a query or a document is read with: the one asked for ("" for none), else
    the model's prompt for that side where it names one, else its default prompt (as sentence-transformers
    applies it), else none."""
    prompts = engine.loaded.pipeline.prompts
    if asked is not None:
        if asked and asked not in prompts:
            offered = ", ".join(prompts) or "none"
            raise InvalidInput(f"{engine.loaded.name} has no prompt {asked!r}; its prompts: {offered}")
        return asked or None
    named = QUERY_PROMPTS if side == "query" else DOCUMENT_PROMPTS
    return next((name for name in named if name in prompts), engine.loaded.pipeline.default_prompt)


def check_index(spec: IndexSpec) -> None:
    if not spec.documents:
        raise InvalidInput("the corpus has no documents: give one document per line")
    if len(spec.documents) > MAX_DOCUMENTS:
        raise InvalidInput(f"the corpus has {len(spec.documents):,} documents; the limit is {MAX_DOCUMENTS:,}")
    longest = max(range(len(spec.documents)), key=lambda index: len(spec.documents[index]))
    if len(spec.documents[longest]) > MAX_DOCUMENT_CHARS:
        raise InvalidInput(
            f"document {longest + 1} has {len(spec.documents[longest]):,} characters; the limit is "
            f"{MAX_DOCUMENT_CHARS:,} a document"
        )


def read_texts(engine: Engine, texts: list[str], prompt: str | None, prefix: str) -> tuple[list[list[int]], int]:
    """Each text's ids as sentence-transformers' encode reads it: the prompt's text and the typed prefix before
    it, cut at the pooling's length; and how many were cut."""
    loaded = engine.loaded
    before = (loaded.pipeline.prompts[prompt] if prompt is not None else "") + prefix
    longest = min(loaded.max_seq_length, engine.max_tokens)
    read = lambda most: loaded.tokenizer(  # noqa: E731
        [before + text for text in texts], truncation=True, max_length=most
    )["input_ids"]
    whole = read(longest + 1)
    cut = sum(len(ids) > longest for ids in whole)
    return (read(longest) if cut else whole), cut


@dataclass
class SearchIndex:
    spec: IndexSpec
    vectors: Tensor  # [document, size] float32: each document's sentence vector, as encode gives it
    unit: Tensor  # [document, size] float64: the vectors scaled to length 1, so that a cosine is one product
    tokens: int  # tokens read, prompts and added tokens included
    cut: int  # documents longer than the pooling's length, read up to it
    passes: int  # padded passes the index took
    seconds: float = 0.0  # what they took on the worker that computed it (not part of what it is)
    storages: dict[int, int] = field(init=False)

    def __post_init__(self):
        held = [tensor.untyped_storage() for tensor in (self.vectors, self.unit)]
        self.storages = {storage.data_ptr(): storage.nbytes() for storage in held}

    @property
    def index_id(self) -> str:
        return self.spec.run_id


def vector_slices(engine: Engine, spec: IndexSpec, progress: Callable[[int, int], None]) -> Iterator[Callable]:
    """The index in slices of work, each one padded pass of at most BATCH_TOKENS padded tokens (app.serving.work
    runs one per turn at the gate), documents of similar length together; the last slice returns the
    SearchIndex. `progress(done, total)` is called after each pass."""
    check_index(spec)
    loaded = engine.loaded
    ids, cut = read_texts(engine, list(spec.documents), spec.prompt, spec.prefix)
    order = sorted(range(len(ids)), key=lambda index: len(ids[index]))
    # A model without an adapter reads one input per pass: how it would read padding is not known.
    most = 0 if loaded.family.attention_only else BATCH_TOKENS
    groups = batches(order, lambda _: 0, lambda index: len(ids[index]), most)
    # Made whole before the passes, not a small tensor per document between them: those landed in the holes the
    # passes' freed blocks left and split them, and the process grew by the heap's fragments as the index went.
    vectors = torch.empty(len(ids), vector_size(engine))
    skip = 0 if loaded.pipeline.include_prompt else engine.prompt_length(spec.prompt)

    def encode(number: int, group: list[int]) -> None:
        for index, vector in zip(group, sentence_vectors(engine, [ids[index] for index in group], skip), strict=True):
            vectors[index] = vector
        progress(number + 1, len(groups))

    for number, group in enumerate(groups):
        yield lambda number=number, group=group: encode(number, group)

    def finish() -> SearchIndex:
        unit = vectors.double() / vectors.double().norm(dim=1, keepdim=True)
        return SearchIndex(spec, vectors, unit, sum(map(len, ids)), cut, len(groups))

    yield finish


def sentence_vectors(engine: Engine, rows: list[list[int]], skip: int = 0) -> list[Tensor]:
    """The sentence vector of each row of ids in one padded pass (padded on the right, so that each row's states
    are its own): the model's pipeline after its default pooling, `skip` leading tokens left out of it (a prompt
    the folder's Pooling excludes). float32, [size] each, on the CPU."""
    loaded = engine.loaded
    mask = loaded.family.native_mask
    sequences = [Sequence(torch.tensor(row), torch.zeros(len(row), dtype=torch.long), mask) for row in rows]
    with torch.inference_mode():
        states = loaded.model.base_model(**model_inputs(loaded.model, loaded.family, sequences)).last_hidden_state
    pipeline = loaded.pipeline.to(states.device)
    return [
        on_cpu(pipeline.stages(states[index, : len(row)], loaded.default_pooling, skip)[-1].vector)
        for index, row in enumerate(rows)
    ]


def pair_slices(engine: Engine, query: str, documents: list[str], spent: list[float]) -> Iterator[Callable]:
    """The (query, document) pairs read as one input each, [CLS] query [SEP] document [SEP], in padded passes
    of at most BATCH_TOKENS tokens (one a slice) through the model, nothing kept: what a cross-encoder's passes
    cost with this model's size. Each pass's seconds are appended to `spent`."""
    loaded = engine.loaded
    encoded = loaded.tokenizer(
        [query] * len(documents), documents, truncation=True, max_length=engine.max_tokens, return_token_type_ids=True
    )
    rows = list(zip(encoded["input_ids"], encoded["token_type_ids"], strict=True))
    order = sorted(range(len(rows)), key=lambda index: len(rows[index][0]))
    most = 0 if loaded.family.attention_only else BATCH_TOKENS
    mask = loaded.family.native_mask

    def read(group: list[int]) -> None:
        started = time.perf_counter()
        sequences = [Sequence(torch.tensor(rows[index][0]), torch.tensor(rows[index][1]), mask) for index in group]
        with torch.inference_mode():
            loaded.model.base_model(**model_inputs(loaded.model, loaded.family, sequences))
        spent.append(time.perf_counter() - started)

    for group in batches(order, lambda _: 0, lambda index: len(rows[index][0]), most):
        yield lambda group=group: read(group)


def pair_groups(lengths: list[int]) -> list[list[int]]:
    """The pairs (by their lengths as read) in padded passes of at most BATCH_TOKENS tokens, shortest first."""
    order = sorted(range(len(lengths)), key=lambda index: lengths[index])
    return batches(order, lambda _: 0, lambda index: lengths[index], BATCH_TOKENS)


def pairs_bytes(engine: Engine, lengths: list[int], groups: list[list[int]], shown: int, after: int) -> int:
    """The peak memory of reading pairs as runs (Searches.pairs), stated before they start: a group's padded pass
    and the runs it keeps, one run's every block of weights (its A → B share), the shown pair's run held to the
    end, or `after` (what the passes after them take: timed pairs, a cross-encoder's) where that is more."""
    config = engine.loaded.model.config
    runs = max(engine.footprint.pass_bytes([lengths[index] for index in group]) for group in groups)
    weights = max(config.num_hidden_layers * config.num_attention_heads * length**2 * 4 for length in lengths)
    return max(runs + weights, after) + engine.footprint.run_bytes(lengths[shown])


def pair_bytes(engine: Engine, query: str, documents: list[str]) -> int:
    """pair_slices's peak, stated before it starts: its longest padded pass's."""
    encoded = engine.loaded.tokenizer(
        [query] * len(documents), documents, truncation=True, max_length=engine.max_tokens
    )
    longest = max(map(len, encoded["input_ids"]))
    return engine.footprint.transient_bytes(min(len(documents), max(1, BATCH_TOKENS // longest)), longest)


def index_bytes(engine: Engine, spec: IndexSpec) -> int:
    """The index's peak memory beside the model, stated before it starts: one pass of BATCH_TOKENS padded
    tokens (Footprint.transient_bytes, its last hidden states among them) and the vectors it keeps, float32 and
    their float64 unit copy."""
    config = engine.loaded.model.config
    longest = min(engine.loaded.max_seq_length, engine.max_tokens)
    batch = max(1, BATCH_TOKENS // longest)
    states = BATCH_TOKENS * config.hidden_size * 4
    vectors = len(spec.documents) * vector_size(engine) * (4 + 8)
    return engine.footprint.transient_bytes(batch, longest) + states + vectors


def vector_size(engine: Engine) -> int:
    """The sentence vector's length: the last Dense module's output, else the hidden size."""
    dense = [step for step in engine.loaded.pipeline.steps if not isinstance(step, str)]
    return dense[-1].weight.shape[0] if dense else engine.loaded.model.config.hidden_size


@dataclass(frozen=True)
class Hit:
    document: int
    score: float  # the cosine of the query's vector and the document's


def cosines(index: SearchIndex, query: Tensor) -> np.ndarray:
    """The cosine of the query's vector and each document's, float64. [document]"""
    return (index.unit @ (query.double() / query.double().norm())).numpy()


def exact_top(index: SearchIndex, query: Tensor, k: int) -> list[Hit]:
    """The k documents nearest the query by cosine, best first (float64; equal cosines in corpus order)."""
    scores = cosines(index, query)
    order = np.argsort(-scores, kind="stable")[:k]
    return [Hit(int(document), float(scores[document])) for document in order]


def check_k(k: int, index: SearchIndex) -> None:
    if not 1 <= k <= min(MAX_K, len(index.spec.documents)):
        raise InvalidInput(f"k is {k}: give 1 to {min(MAX_K, len(index.spec.documents))}")


class Graph:
    """An HNSW graph over an index's unit vectors (usearch, inner product, float32), searched at any ef. One
    search at a time: ef is the graph's own setting."""

    def __init__(self, index: SearchIndex, m: int, ef_construction: int):
        self.m, self.ef_construction = m, ef_construction
        self.graph = UsearchIndex(
            ndim=index.unit.shape[1],
            metric="ip",
            dtype="f32",
            connectivity=m,
            expansion_add=ef_construction,
            multi=False,
        )
        self.lock = threading.Lock()
        self.build_seconds = 0.0  # what building it took on this worker
        self.storages = {id(self): graph_bytes(len(index.unit), index.unit.shape[1], m)}  # as stated before it

    def add(self, first: int, vectors: np.ndarray) -> None:
        self.graph.add(np.arange(first, first + len(vectors)), vectors, threads=1)  # one thread: the same graph

    def search(self, query: Tensor, k: int, ef: int) -> list[Hit]:
        """The graph's k nearest documents, best first, each with its cosine (as exact_top computes it)."""
        unit = (query.double() / query.double().norm()).float().numpy()
        with self.lock:
            self.graph.expansion_search = ef
            found = self.graph.search(unit, k, threads=1)
        return [Hit(int(key), 1.0 - float(distance)) for key, distance in zip(found.keys, found.distances, strict=True)]


def graph_slices(index: SearchIndex, m: int, ef_construction: int) -> Iterator[Callable]:
    """The HNSW graph built in slices of BUILD_SLICE vectors, added in corpus order; the last returns it."""
    graph = Graph(index, m, ef_construction)
    unit = index.unit.float().numpy()
    for first in range(0, len(unit), BUILD_SLICE):
        yield lambda first=first: graph.add(first, unit[first : first + BUILD_SLICE])
    yield lambda: graph


def graph_bytes(documents: int, size: int, m: int) -> int:
    """An HNSW graph's memory, stated before it is built: each vector's float32 copy and its links (M at each
    upper layer, 2·M at the base, 4 bytes each; about 1/M of the vectors reach each next layer), with room
    for usearch's own bookkeeping (measured: tests/test_search.py)."""
    links = (2 * m + m / (m - 1)) * 4
    return int(2 * documents * (size * 4 + links + 64)) + 1024**2


def recall(found: list[Hit], exact: list[Hit]) -> float:
    """The share of the exact top k the approximate top k finds."""
    return len({hit.document for hit in found} & {hit.document for hit in exact}) / len(exact)
