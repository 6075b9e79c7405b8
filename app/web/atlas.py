"""The head atlas's routes: a corpus run named by its spec, its progress, and its scores per head."""

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from app.engine import atlas
from app.engine.spec import AtlasSpec
from app.serving.spec_store import corpus_bytes
from app.web.deps import AtlasesDep, ClientDep, CorporaDep, LabDep, request_reads
from app.web.schemas.atlas import AtlasRequest, AtlasResponse, AtlasSpace, AtlasStarted
from app.web.schemas.common import ErrorResponse, Progress

router = APIRouter(prefix="/api/atlas", dependencies=[Depends(request_reads)])
NAMED = {
    422: {"model": ErrorResponse},
    429: {"model": ErrorResponse, "description": "This address has named its hour's bytes of new corpora"},
}
NOT_FOUND = {
    404: {"model": ErrorResponse, "description": "Unknown or expired atlas"},
    503: {"model": ErrorResponse, "description": "The run store is not answering, or the model is busy"},
}


@router.post("", response_model=AtlasStarted, responses=NAMED)
async def start(body: AtlasRequest, lab: LabDep, atlases: AtlasesDep, corpora: CorporaDep, client: ClientDep):
    """Names a corpus run and keeps its spec in the shared store; nothing is computed until it is asked for."""
    engine = await lab.engine_for(body.model, client)
    mask = engine.spec("a", mask=body.mask).mask  # the model's own mask unless another is asked for, checked

    def named() -> tuple[AtlasSpec, str, int]:
        sentences = atlas.shipped_sentences() if body.sentences is None else atlas.sentences_of(body.sentences)
        spec = AtlasSpec(
            engine.loaded.name,
            engine.loaded.digest,
            sentences,
            body.repeats,
            body.repeat_length,
            body.seed,
            min(body.ablation_sentences, len(sentences)),
            mask,
        )
        return spec, spec.run_id, corpus_bytes(spec)

    spec, corpus_id, nbytes = await asyncio.to_thread(named)  # as an index's corpus (app.web.search.start)
    corpora.take(client.address, corpus_id, nbytes)
    await atlases.start(spec, client)
    return {"atlas_id": spec.run_id, "sentences": len(spec.sentences)}


@router.get("/{atlas_id}/progress", response_model=Progress, responses=NOT_FOUND)
async def progress(atlas_id: str, atlases: AtlasesDep):
    """How far the corpus run is, on whichever worker runs it (the request computing it waits meanwhile); an
    atlas the lab never named, or no longer keeps, is 404 as it is for the atlas itself."""
    return await atlases.progress(atlas_id)


@router.get("/{atlas_id}", response_model=AtlasResponse, responses=NOT_FOUND)
async def head_atlas(atlas_id: str, lab: LabDep, atlases: AtlasesDep, client: ClientDep):
    """The atlas: kept, or computed now in padded passes at turns of the gate; the run stops at its next
    pass when every client waiting for it has left."""
    spec = await atlases.spec(atlas_id)
    found = await atlases.atlas(spec, client)
    layers, heads = found.offset.shape
    pieces = lab.models.loaded(spec.model).pieces
    return {
        "atlas_id": atlas_id,
        "model": spec.model,
        "layers": layers,
        "heads": heads,
        "sentences": len(spec.sentences),
        "tokens": found.tokens,
        "cut": found.cut,
        "max_tokens": atlas.MAX_TOKENS,
        "repeats": spec.repeats,
        "repeat_length": spec.repeat_length,
        "ablation_sentences": spec.ablation_sentences,
        "mask": spec.mask,
        "threshold": atlas.LABEL_THRESHOLD,
        "scores": {name: values.tolist() for name, values in found.scores.items()},
        "offset": found.offset.tolist(),
        "labels": found.labels(),
        "examples": found.shown_examples(pieces),
    }


@router.get("/{atlas_id}/layers/{layer}/heads/{head}/space", response_model=AtlasSpace, responses=NOT_FOUND)
async def head_space(
    atlas_id: str,
    layer: int,
    head: int,
    atlases: AtlasesDep,
    client: ClientDep,
    method: Annotated[Literal["pca", "tsne"], Query(description="PCA, or t-SNE (its first 1,024 tokens)")] = "pca",
    perplexity: Annotated[float, Query(ge=5, le=50, description="t-SNE's perplexity")] = 30,
    seed: Annotated[int, Query(ge=0, le=2**31 - 1, description="t-SNE's random seed")] = 0,
):
    """One head's queries and keys of the corpus's first sentences (up to 4,096 tokens for PCA, 1,024 for
    t-SNE) in one 2-D space, the keys translated and scaled as AttentionViz does so that nearness reflects q·k."""
    spec = await atlases.spec(atlas_id)
    projection = atlas.Projection(method, perplexity, seed)
    found = await atlases.head_space(spec, layer, head, projection, client)
    method = (
        f"{projection.describe(len(found['query']), len(found['key']))}; keys translated to the queries' centroid, "
        f"queries × {found['scale']:.3f}, keys ÷ {found['scale']:.3f}"
    )
    return {"method": method, **found}
