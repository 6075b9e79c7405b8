"""The search lesson's routes: an index named by its spec, its progress, a query's nearest documents (exact and
approximate), and the top k re-read as (query, document) pairs."""

import asyncio

from fastapi import APIRouter, Depends

from app.engine import search
from app.engine.spec import IndexSpec
from app.serving.spec_store import corpus_bytes
from app.web.deps import ClientDep, CorporaDep, LabDep, SearchesDep, request_reads
from app.web.schemas.common import ErrorResponse, Progress
from app.web.schemas.search import (
    IndexRequest,
    IndexResponse,
    IndexStarted,
    PairsRequest,
    PairsResponse,
    SearchRequest,
    SearchResponse,
)

router = APIRouter(prefix="/api/search", dependencies=[Depends(request_reads)])
NAMED = {
    422: {"model": ErrorResponse},
    429: {"model": ErrorResponse, "description": "This address has named its hour's bytes of new corpora"},
}
NOT_FOUND = {
    404: {"model": ErrorResponse, "description": "Unknown or expired index"},
    422: {"model": ErrorResponse},
    503: {"model": ErrorResponse, "description": "The run store is not answering, or the model is busy"},
}


@router.post("/index", response_model=IndexStarted, responses=NAMED)
async def start(body: IndexRequest, lab: LabDep, searches: SearchesDep, corpora: CorporaDep, client: ClientDep):
    """Names an index of a corpus and keeps its spec in the shared store; nothing is computed until it is asked
    for."""
    engine = await lab.engine_for(body.model, client)
    prompt = search.side_prompt(engine, "document", body.prompt)

    def named() -> tuple[IndexSpec, str, int]:
        documents = search.shipped_documents() if body.documents is None else search.documents_of(body.documents)
        spec = IndexSpec(engine.loaded.name, engine.loaded.digest, documents, prompt, body.prefix)
        search.check_index(spec)
        return spec, spec.run_id, corpus_bytes(spec)

    # Split, checked and hashed in a thread: a flood of corpora at the body limit held the event loop.
    spec, corpus_id, nbytes = await asyncio.to_thread(named)
    corpora.take(client.address, corpus_id, nbytes)
    await searches.start(spec, client)
    return {"index_id": spec.run_id, "documents": len(spec.documents), "prompt": prompt, "prefix": body.prefix}


@router.get("/index/{index_id}/progress", response_model=Progress, responses=NOT_FOUND)
async def progress(index_id: str, searches: SearchesDep):
    """How far the index's passes are, on whichever worker computes it (the request computing it waits); an
    index the lab never named, or no longer keeps, is 404 as it is for the index itself."""
    return await searches.progress(index_id)


@router.get("/index/{index_id}", response_model=IndexResponse, responses=NOT_FOUND)
async def index(index_id: str, lab: LabDep, searches: SearchesDep, client: ClientDep):
    """The index: kept, or computed now in padded passes at turns of the gate; its passes stop at the next one
    when every client waiting for it has left."""
    spec = await searches.spec(index_id)
    found = await searches.index(spec, client)
    engine = await lab.engine_for(spec.model, client)
    return {
        "index_id": index_id,
        "model": spec.model,
        "documents": len(spec.documents),
        "size": found.vectors.shape[1],
        "tokens": found.tokens,
        "cut": found.cut,
        "max_tokens": min(engine.loaded.max_seq_length, engine.max_tokens),
        "passes": found.passes,
        "seconds": found.seconds,
        "prompt": spec.prompt,
        "prompt_text": engine.loaded.pipeline.prompts[spec.prompt] if spec.prompt is not None else "",
        "prefix": spec.prefix,
    }


def hits(found: list[search.Hit], spec: IndexSpec) -> list[dict]:
    return [
        {"rank": rank, "document": hit.document, "text": spec.documents[hit.document], "score": hit.score}
        for rank, hit in enumerate(found, 1)
    ]


@router.post("", response_model=SearchResponse, responses=NOT_FOUND)
async def query(body: SearchRequest, searches: SearchesDep, client: ClientDep):
    """A query read in one pass into its vector, and the index's top k by cosine: exact (every document) and
    from the HNSW graph (usearch; built once per M and ef_construction), with recall@k and the time of each."""
    spec = await searches.spec(body.index_id)
    knobs = (body.hnsw.m, body.hnsw.ef_construction, body.hnsw.ef)
    found = await searches.search(spec, body.query, body.k, body.prompt, body.prefix, knobs, client)
    read, graph = found["query"], found["graph"]
    return {
        "index_id": body.index_id,
        "k": body.k,
        "query": {
            "text": read.text,
            "tokens": read.tokens,
            "prompt": found["query_prompt"],
            "prefix": body.prefix,
            "ms": read.pass_ms,
        },
        "exact": hits(found["exact"], spec),
        "exact_ms": found["exact_ms"],
        "approximate": {
            "hits": hits(found["approximate"], spec),
            "recall": found["recall"],
            "ms": found["approximate_ms"],
            "m": graph.m,
            "ef_construction": graph.ef_construction,
            "ef": body.hnsw.ef,
            "build_seconds": graph.build_seconds,
        },
    }


@router.post("/pairs", response_model=PairsResponse, responses=NOT_FOUND)
async def pairs(body: PairsRequest, lab: LabDep, searches: SearchesDep, client: ClientDep):
    """The documents re-read with the query as pairs, [CLS] query [SEP] document [SEP], each a run of the lab
    (query as A, document as B: its run_id opens it in the lab), with the A → B cells of one of them; and, where
    the lab has a cross-encoder (ATTENTION_LAB_CROSS_ENCODER), each pair's relevance. The lab's own model is a
    bi-encoder, not trained to score pairs: its pairs show the cost and the reading, not a relevance."""
    spec = await searches.spec(body.index_id)
    engine = await lab.engine_for(spec.model, client)
    layer = engine.info["layers"] - 1 if body.layer is None else body.layer
    head = None if body.head == "mean" else body.head
    found = await searches.pairs(spec, body.query, body.documents, layer, head, body.shown, client)
    shown = found["shown"]
    relevance = found["relevance"] or [None] * len(body.documents)
    labels = [token.label for token in shown["run"].tokens]
    return {
        "layout": engine.info["pair_layout"],
        "pairs": [
            {
                "document": document,
                "text": spec.documents[document],
                "run_id": run_id,
                "cross_share": share,
                "relevance": score,
            }
            for document, run_id, share, score in zip(
                body.documents, found["run_ids"], found["shares"], relevance, strict=True
            )
        ],
        "shown": {
            "document": body.documents[body.shown],
            "run_id": shown["run"].run_id,
            "layer": layer,
            "head": body.head,
            "rows": [labels[index] for index in shown["rows"]],
            "cols": [labels[index] for index in shown["cols"]],
            "cells": shown["cells"].tolist(),
        },
        "pairs_ms": found["pairs_ms"],
        "pair_passes": found["pair_passes"],
        "cross_encoder": searches.cross_encoder.name if searches.cross_encoder else None,
        "cross_ms": found["cross_ms"],
    }
