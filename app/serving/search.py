"""Serving search (app.engine.search): an index computed once per spec however many ask for it, in padded passes
at turns of the gate, with its progress shared through the spec store, called off at its next pass once nobody
waits for it; the HNSW graph over it built in slices and kept beside it; a query's one pass;
and the top k re-read as (query, document) pairs, by the lab's own model as runs of the lab and, where the lab
is given one, by a cross-encoder."""

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from app.engine import search
from app.engine.engine import Engine
from app.engine.errors import InvalidInput
from app.engine.rerank import CrossEncoder
from app.engine.spec import IndexSpec
from app.engine.threads import CORES, use_cores
from app.serving.gate import ANYONE, Client
from app.serving.lab import ForeignRun, Lab, RunNotFound
from app.serving.work import Work

MAX_PAIRS = 20  # pairs re-read at once: each a run of the lab, one pass each
# A query this short is read on one core of the model's thread: on two cores busy with other work it took two to
# four times as long (bench/README.md); the OpenMP team's second worker waits for a core.
SHORT_QUERY_TOKENS = 64
KEPT_SPECS = 16  # index specs kept read (each up to 5,000 documents: at most 10 MB)


class IndexNotFound(RunNotFound):
    def __str__(self) -> str:
        return f"index {self.args[0]} is not kept any more (or never was): index the corpus again"


@dataclass
class QueryRead:
    """A query's vector from its one pass, and what the pass cost."""

    text: str  # as read: the prompt's text and the typed prefix before the query
    tokens: int
    vector: torch.Tensor
    pass_ms: float


class Searches:
    def __init__(self, lab: Lab, cross_encoder: CrossEncoder | None = None):
        self.lab = lab
        self.cross_encoder = cross_encoder
        # Specs read from the store, by id: a spec never changes, and reading one of 3,080 documents back (its
        # JSON parsed, its id hashed again) cost every query a good share of its time.
        self._specs: OrderedDict[str, IndexSpec] = OrderedDict()

    async def start(self, spec: IndexSpec, client: Client = ANYONE) -> None:
        """The index's spec checked and put in the shared store: its id names it on every worker."""
        await asyncio.to_thread(search.check_index, spec)  # a pasted corpus's 5,000 documents: off the event loop
        await self.lab.engine_for(spec.model, client)
        await self.lab.store(spec)

    async def spec(self, index_id: str) -> IndexSpec:
        """An index's spec by id, of a model this lab serves with the same weights."""
        spec = self._specs.get(index_id)
        if spec is None:
            spec = await self.lab.stored_spec(index_id, IndexSpec, IndexNotFound)
            spec.__dict__["run_id"] = index_id  # its hash, known: the cached_property's own slot
            self._specs[index_id] = spec
            while len(self._specs) > KEPT_SPECS:
                self._specs.popitem(last=False)
            return spec
        self._specs.move_to_end(index_id)
        engine = self.lab.models.loaded(spec.model)
        if spec.model not in self.lab.models.names or (
            engine is not None and spec.model_digest != engine.loaded.digest
        ):
            raise ForeignRun(index_id, spec, self.lab.loaded)
        return spec

    async def progress(self, index_id: str) -> dict:
        """How far the index's passes are, on this worker or (through the shared store) another. An unknown id
        is not found."""
        if self.lab.runs.get(f"index/{index_id}") is not None:
            return {"state": "done", "done": 0, "total": 0}
        said = await self.lab.works.progress_of(index_id)
        if said is None:
            await self.spec(index_id)
            return {"state": "not running", "done": 0, "total": 0}
        return {"state": "running", "done": said[0], "total": said[1]}

    async def index(self, spec: IndexSpec, client: Client = ANYONE) -> search.SearchIndex:
        """The index of a spec: kept, or computed once however many ask at a time, one padded pass per turn of
        the gate; called off at its next pass once nobody waits for it."""
        key = f"index/{spec.run_id}"
        kept = self.lab.runs.get(key)
        if kept is not None:
            return kept
        return await self.lab.works.once(key, lambda: self._computed_index(key, spec, client))

    async def _computed_index(self, key: str, spec: IndexSpec, client: Client) -> search.SearchIndex:
        engine = await self.lab.engine_for(spec.model, client)
        if spec.model_digest != engine.loaded.digest:
            raise ForeignRun(spec.run_id, spec, engine.loaded)
        started = time.perf_counter()
        async with self.lab.works.progress(spec.run_id) as progress:
            slices = search.vector_slices(engine, spec, progress)
            work = Work(f"the index {spec.run_id}", slices, search.index_bytes(engine, spec), on=engine)
            found = await self.lab.works.run(work, client)
        found.seconds = time.perf_counter() - started
        self.lab.runs.put(key, found, counted=False)
        return found

    async def graph(self, index: search.SearchIndex, m: int, ef_construction: int, client: Client) -> search.Graph:
        """The HNSW graph over an index's vectors with these knobs: kept, or built once, BUILD_SLICE vectors a
        turn of the gate."""
        key = f"index/{index.index_id}/hnsw/{m}/{ef_construction}"
        kept = self.lab.runs.get(key)
        if kept is not None:
            return kept

        async def build() -> search.Graph:
            nbytes = search.graph_bytes(len(index.unit), index.unit.shape[1], m)
            what = f"the HNSW graph (M {m}, ef_construction {ef_construction}) of index {index.index_id}"
            started = time.perf_counter()
            graph = await self.lab.works.run(Work(what, search.graph_slices(index, m, ef_construction), nbytes), client)
            graph.build_seconds = time.perf_counter() - started
            self.lab.runs.put(key, graph, counted=False)
            return graph

        return await self.lab.works.once(key, build)

    async def query(
        self,
        engine: Engine,
        text: str,
        prompt: str | None,
        prefix: str,
        client: Client = ANYONE,
        then: Callable | None = None,
    ) -> tuple[QueryRead, object]:
        """The query's sentence vector from one pass at a turn of the gate (its prompt and typed prefix before
        it), and what `then(vector)` returns, computed in the same turn (the searches: a few milliseconds)."""
        engine.spec(text or " ")  # the lab's cap on characters
        ids, _ = search.read_texts(engine, [text], prompt, prefix)
        skip = 0 if engine.loaded.pipeline.include_prompt else engine.prompt_length(prompt)

        short = len(ids[0]) <= SHORT_QUERY_TOKENS

        def read() -> tuple[QueryRead, object]:
            started = time.perf_counter()
            if short:
                use_cores(1)
            try:
                (vector,) = search.sentence_vectors(engine, ids, skip)
            finally:
                if short:
                    use_cores(max(1, CORES // self.lab.gate.max_passes))  # the model thread's own (ModelThreads)
            pass_ms = (time.perf_counter() - started) * 1000
            before = (engine.loaded.pipeline.prompts[prompt] if prompt is not None else "") + prefix
            return QueryRead(before + text, len(ids[0]), vector, pass_ms), then(vector) if then else None

        nbytes = engine.footprint.transient_bytes(1, len(ids[0]))
        work = Work(f"the query of {len(ids[0])} tokens", [read], nbytes, engine)
        return await self.lab.works.run(work, client)

    async def search(
        self,
        spec: IndexSpec,
        text: str,
        k: int,
        prompt: str | None,
        prefix: str,
        knobs: tuple[int, int, int],
        client: Client = ANYONE,
    ) -> dict:
        """The query's top k by cosine, exact and from the HNSW graph (M, ef_construction, ef), with recall@k of
        the graph's against the exact list and the time of each."""
        engine = await self.lab.engine_for(spec.model, client)
        query_prompt = search.side_prompt(engine, "query", prompt)
        index = await self.index(spec, client)
        search.check_k(k, index)
        m, ef_construction, ef = knobs
        graph = await self.graph(index, m, ef_construction, client)

        def both(vector: torch.Tensor) -> dict:
            started = time.perf_counter()
            exact = search.exact_top(index, vector, k)
            middle = time.perf_counter()
            approximate = graph.search(vector, k, ef)
            ended = time.perf_counter()
            return {
                "exact": exact,
                "exact_ms": (middle - started) * 1000,
                "approximate": approximate,
                "approximate_ms": (ended - middle) * 1000,
            }

        read, found = await self.query(engine, text, query_prompt, prefix, client, both)
        return {
            "index": index,
            "graph": graph,
            "query": read,
            "query_prompt": query_prompt,
            "recall": search.recall(found["approximate"], found["exact"]),
            **found,
        }

    async def cosines(
        self, spec: IndexSpec, text: str, prompt: str | None, prefix: str, client: Client = ANYONE
    ) -> np.ndarray:
        """The cosine of the query with every document (exact, float64), in corpus order. [document]"""
        engine = await self.lab.engine_for(spec.model, client)
        index = await self.index(spec, client)
        _, scores = await self.query(engine, text, prompt, prefix, client, lambda vector: search.cosines(index, vector))
        return scores

    async def pairs(
        self, spec: IndexSpec, text: str, documents: list[int], layer: int, head: int | None, shown: int, client
    ) -> dict:
        """The documents re-read with the query as pairs, [CLS] query [SEP] document [SEP]: each a run of the
        lab (query as A, document as B), with the share of attention its A tokens give its B tokens (every block
        and head); the A → B cells of pair `shown` in block `layer`, head `head` (None: the mean of the heads);
        what reading the pairs costs, timed on padded passes of their own (pair_slices; the runs may be kept);
        and, where the lab has a cross-encoder, each pair's relevance. One piece of work, its memory taken at
        once: the runs are computed a padded pass a turn, each measured and let go (the run cache keeps what it
        has room for), so that the most pairs asked for fit the budget of one client."""
        if not 1 <= len(documents) <= MAX_PAIRS:
            raise InvalidInput(f"re-read 1 to {MAX_PAIRS} documents as pairs, not {len(documents)}")
        if not 0 <= shown < len(documents):
            raise InvalidInput(f"shown is {shown}: give the place of one of the {len(documents)} documents")
        outside = [document for document in documents if not 0 <= document < len(spec.documents)]
        if outside:
            raise InvalidInput(f"the index has documents 0 to {len(spec.documents) - 1}, not {outside[0]}")
        engine = await self.lab.engine_for(spec.model, client)
        layers, heads = engine.info["layers"], engine.info["heads"]
        if not 0 <= layer < layers or (head is not None and not 0 <= head < heads):
            raise InvalidInput(f"no block {layer}, head {head}: blocks are 0 to {layers - 1}, heads 0 to {heads - 1}")
        texts = [spec.documents[document] for document in documents]
        specs = [engine.spec(text, document, prompt="") for document in texts]
        lengths = await asyncio.to_thread(lambda: [engine.read_ahead(pair) for pair in specs])
        measured: dict = {"shares": [None] * len(specs), "spent": []}

        def measure(group: list[int]) -> None:
            outcomes = self.lab.run_batch_sync([specs[index] for index in group])
            for index, run in zip(group, outcomes, strict=True):
                if isinstance(run, Exception):
                    raise run
                measured["shares"][index] = cross_share(run, [run.weights(each) for each in range(layers)])
                if index == shown:
                    block = run.weights(layer)
                    rows, cols = segment(run, "A"), segment(run, "B")
                    cells = (block.double().mean(0) if head is None else block[head].double())[rows][:, cols]
                    measured["shown"] = {"run": run, "rows": rows, "cols": cols, "cells": cells}

        groups = search.pair_groups(lengths)
        slices = [lambda group=group: measure(group) for group in groups]
        # The runs may be kept already: what reading the pairs costs is timed on passes of their own.
        slices += search.pair_slices(engine, text, texts, measured["spent"])
        timed = search.pair_bytes(engine, text, texts)
        cross, cross_started = self.cross_encoder, []
        if cross is not None:  # the last slice returns each pair's relevance
            longest = max(map(len, cross.read(text, texts)))
            slices += [lambda: cross_started.append(time.perf_counter()), *cross.score_slices(text, texts)]
            timed = max(timed, cross.pass_bytes(len(texts), longest))
        nbytes = search.pairs_bytes(engine, lengths, groups, shown, timed)
        last = await self.lab.works.run(Work(f"the runs of {len(specs)} pairs", slices, nbytes, engine), client)
        relevance = last if cross is not None else None
        cross_ms = (time.perf_counter() - cross_started[0]) * 1000 if cross is not None else None
        await asyncio.gather(*(self.lab.store(pair) for pair in specs))
        return {
            "run_ids": [pair.run_id for pair in specs],
            "shares": measured["shares"],
            "pairs_ms": sum(measured["spent"]) * 1000,
            "pair_passes": len(measured["spent"]),
            "shown": measured["shown"],
            "relevance": relevance,
            "cross_ms": cross_ms,
        }


def segment(run, name: str) -> list[int]:
    """The positions of segment `name` in a pair's run, as the lab's Segments filter reads them."""
    return [token.index for token in run.tokens if token.segment == name]


def cross_share(run, weights: list[torch.Tensor]) -> float:
    """The mean share of attention a query token of segment A gives to the tokens of segment B, over every
    block, head and A token: how much reading the pair together mixes the two (float64)."""
    rows, cols = segment(run, "A"), segment(run, "B")
    stacked = torch.stack([block.double() for block in weights])  # [layer, head, query, key]
    return float(stacked[:, :, rows][..., cols].sum(-1).mean())
