"""The JSON API: parse the request, ask the lab, return its numbers. No model code here."""

from typing import Annotated

import numpy as np
import orjson
from fastapi import APIRouter, Depends, Query, Response

from app.deps import LabDep
from app.encoding import MEDIA_TYPE, AttentionDtype, encode_attention
from app.lab import Run
from app.schemas import (
    AnalyzeRequest,
    AnalyzeResponse,
    EmbeddingsResponse,
    ErrorResponse,
    HeadResponse,
    Health,
    LayerResponse,
    ModelInfo,
    QueryResponse,
    TokenTraceResponse,
    ValidationErrorResponse,
)

router = APIRouter(
    prefix="/api",
    responses={422: {"model": ValidationErrorResponse, "description": "The request is not one the API takes"}},
)
NOT_FOUND = {404: {"model": ErrorResponse, "description": "Unknown or evicted run, or layer/head out of range"}}


class NumbersResponse(Response):
    """JSON straight from float32 tensors: orjson writes each float32 exactly, and fast."""

    media_type = "application/json"

    def render(self, content) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def get_run(run_id: str, lab: LabDep) -> Run:
    return lab.run(run_id)


RunDep = Annotated[Run, Depends(get_run)]


def numbers(tensors: dict) -> dict:
    # orjson writes only C-contiguous arrays; per-head slices are strided views.
    return {name: np.ascontiguousarray(tensor.numpy()) for name, tensor in tensors.items()}


# Health and model are async: they answer on the event loop even while every worker thread is busy.
@router.get("/health", response_model=Health)
async def health(lab: LabDep):
    return {"status": "ok", "model": lab.info["name"], "runs": len(lab.runs)}


@router.get("/model", response_model=ModelInfo)
async def model(lab: LabDep):
    return lab.info


@router.post(
    "/analyze",
    response_model=AnalyzeResponse,
    responses={
        413: {"model": ErrorResponse, "description": "Text over the character cap"},
        503: {"model": ErrorResponse, "description": "Too many requests waiting for the model; see Retry-After"},
    },
)
async def analyze(body: AnalyzeRequest, lab: LabDep):
    run = await lab.submit(body.text, body.mask, body.pooling)
    norm = run.pooled.norm()
    return NumbersResponse(
        {
            "run_id": run.run_id,
            "model": lab.info,
            "tokens": [token.__dict__ for token in run.tokens],
            "truncated": run.truncated,
            "mask": run.mask,
            "pooled": {
                "strategy": run.pooling,
                "vector": run.pooled.numpy(),
                "norm": float(norm),
                "normalized": (run.pooled / norm).numpy(),
            },
        }
    )


@router.get("/runs/{run_id}/layers/{layer}/heads/{head}", response_model=HeadResponse, responses=NOT_FOUND)
def head(run: RunDep, layer: int, head: int):
    return NumbersResponse({"layer": layer, "head": head, **numbers(run.head(layer, head))})


@router.get(
    "/runs/{run_id}/layers/{layer}/heads/{head}/queries/{query}", response_model=QueryResponse, responses=NOT_FOUND
)
def query(run: RunDep, layer: int, head: int, query: int):
    return NumbersResponse({"layer": layer, "head": head, "query": query, **numbers(run.query(layer, head, query))})


@router.get("/runs/{run_id}/layers/{layer}", response_model=LayerResponse, responses=NOT_FOUND)
def layer(run: RunDep, layer: int):
    return NumbersResponse({"layer": layer, **numbers(run.layer(layer))})


@router.get("/runs/{run_id}/embeddings", response_model=EmbeddingsResponse, responses=NOT_FOUND)
def embeddings(run: RunDep):
    return NumbersResponse(numbers(run.embeddings()))


@router.get("/runs/{run_id}/tokens/{token}", response_model=TokenTraceResponse, responses=NOT_FOUND)
def token_trace(run: RunDep, token: int):
    trace = run.token_trace(token)
    return NumbersResponse(
        {
            "index": token,
            "embeddings": numbers(trace["embeddings"]),
            "layers": [{"layer": row.pop("layer"), **numbers(row)} for row in trace["layers"]],
        }
    )


@router.get(
    "/runs/{run_id}/attention",
    response_class=Response,
    responses={200: {"content": {MEDIA_TYPE: {}}, "description": "[layer, head, query, key] weights"}, **NOT_FOUND},
)
def attention(
    run: RunDep,
    dtype: Annotated[
        AttentionDtype, Query(description="uint8 (default, ±1/510), float16 or float32 (exact)")
    ] = "uint8",
    layer: Annotated[int | None, Query(description="Only this block: shape [1, head, query, key]")] = None,
    head: Annotated[int | None, Query(description="Only this head of `layer`: shape [1, 1, query, key]")] = None,
    size: Annotated[
        int | None,
        Query(ge=1, description="Shrink each matrix to at most size×size, keeping each block's largest weight"),
    ] = None,
):
    body, headers = encode_attention(run.attention(layer, head), dtype, size)
    return Response(body, media_type=MEDIA_TYPE, headers=headers)
