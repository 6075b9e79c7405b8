"""The JSON API: parse the request, ask the lab, return its numbers. No model code here."""

import base64
import os
import socket
from collections.abc import Callable, Iterable, Iterator
from math import prod
from typing import Annotated, TypeVar

import numpy as np
from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from torch import Tensor

from app.engine import cells, lessons, measures
from app.engine.capture import NEXT_TOKENS
from app.engine.encoder_decoder import EncoderDecoderEngine
from app.engine.errors import InvalidInput, OutOfRange
from app.engine.placement import dtype_name
from app.engine.runs import Run, pick
from app.engine.spec import Patch
from app.serving.lab import Lab
from app.serving.server import is_loopback
from app.web.compression import MIN_BYTES, chosen_encoding, compressed
from app.web.deps import ClientDep, LabDep, request_reads
from app.web.encoder_decoder import encoder_decoder_run
from app.web.encoding import MEDIA_TYPE, PIECE_BYTES, NumbersResponse, encode_attention, on_wire
from app.web.schemas.common import ErrorResponse, ValidationErrorResponse
from app.web.schemas.encoder_decoder import EncoderDecoderResponse
from app.web.schemas.runs import (
    AnalyzeRequest,
    AnalyzeResponse,
    AttentionView,
    CompareResponse,
    EmbeddingsResponse,
    HeadResponse,
    HeadStatsResponse,
    Health,
    LayerResponse,
    ModelInfo,
    ModelsResponse,
    NearestResponse,
    NextTokensResponse,
    Pooled,
    PoolingRequest,
    PoolingResponse,
    QueryResponse,
    RolloutResponse,
    TokenTraceResponse,
)

Result = TypeVar("Result")

router = APIRouter(
    prefix="/api",
    dependencies=[Depends(request_reads)],
    responses={422: {"model": ValidationErrorResponse, "description": "The request is not one the API takes"}},
)
NOT_FOUND = {
    404: {"model": ErrorResponse, "description": "Unknown or expired run, or layer/head out of range"},
    503: {"model": ErrorResponse, "description": "The run store is not answering, or the model is busy"},
}


async def served(lab, run_id: str, client) -> Run:
    """The run, with its model loaded for the route (lab.engine_of)."""
    run = await lab.serve_run(run_id, client)
    await lab.engine_for(run.spec.model, client)
    return run


async def get_run(run_id: str, lab: LabDep, client: ClientDep) -> Run:
    return await served(lab, run_id, client)


# The two runs of a comparison, each with its sentence vector (the comparison gives their cosine).
async def get_pooled_run_a(a: str, lab: LabDep, client: ClientDep) -> Run:
    return await lab.pooled(await served(lab, a, client), client)


async def get_pooled_run_b(b: str, lab: LabDep, client: ClientDep) -> Run:
    return await lab.pooled(await served(lab, b, client), client)


RunDep = Annotated[Run, Depends(get_run)]
PooledRunADep = Annotated[Run, Depends(get_pooled_run_a)]
PooledRunBDep = Annotated[Run, Depends(get_pooled_run_b)]


# orjson writes a float32 in at most 15 characters, and a comma: the bytes an answer's JSON takes a number.
JSON_NUMBER_BYTES = 16


async def answered(lab: Lab, client, what: str, nbytes: int, content: Callable[[], dict]) -> NumbersResponse:
    """An answer whose content grows with the run (whole blocks of weights, a rollout, rows of every token),
    made and written as JSON on a worker thread, holding `nbytes` of the lab's memory budget: its peak, as
    stated from the run's shapes before it starts."""
    return await lab.works.on_thread(what, nbytes, lambda: NumbersResponse(content()), client)


def json_bytes(tensors: Iterable[Tensor]) -> int:
    """What the JSON of these tensors takes, and their contiguous copies (numbers)."""
    return sum(tensor.numel() * (JSON_NUMBER_BYTES + tensor.element_size()) for tensor in tensors)


def numbers(tensors: dict) -> dict:
    # orjson writes only C-contiguous arrays; per-head slices are strided views.
    return {name: np.ascontiguousarray(on_wire(tensor).numpy()) for name, tensor in tensors.items()}


# Health and model are async: they answer on the event loop even while every worker thread is busy.
@router.get("/health", response_model=Health)
async def health(lab: LabDep):
    problem = await lab.store_problem()
    store = {"name": lab.specs.name, "answering": problem is None, "detail": problem}
    return {
        "status": "ok",
        "model": lab.info["name"],
        "models": lab.models.names,
        "server": f"{socket.gethostname()}:{os.getpid()}",
        "runs": len(lab.runs),
        "run_bytes": lab.runs.nbytes + lab.blocks.nbytes,
        "store": store,
    }


@router.get("/model", response_model=ModelInfo, responses={422: {"model": ErrorResponse}})
async def model(lab: LabDep, name: Annotated[str | None, Query(description="A model the lab serves")] = None):
    """A model's shape and family (the default one unless named), loaded or not: asking loads nothing."""
    return lab.models.info(name)


@router.get("/models", response_model=ModelsResponse)
async def models(lab: LabDep):
    """The models this lab serves, the default first, and which are loaded in this worker now."""
    return {
        "default": lab.models.default,
        "models": [
            {
                "name": name,
                "loaded": lab.models.loaded(name) is not None,
                "kind": lab.models.infos.get(name, {}).get("kind"),
            }
            for name in lab.models.names
        ],
    }


@router.post(
    "/analyze",
    response_model=AnalyzeResponse | EncoderDecoderResponse,
    responses={
        413: {"model": ErrorResponse, "description": "Text over the character cap"},
        503: {
            "model": ErrorResponse,
            "description": "Too many requests waiting for the model (see Retry-After), or the run store is down",
        },
    },
)
async def analyze(body: AnalyzeRequest, lab: LabDep, client: ClientDep):
    engine = await lab.engine_for(body.model, client)
    if isinstance(engine, EncoderDecoderEngine):
        return await encoder_decoder_run(engine, body, lab, client)
    if body.target is not None or body.max_new_tokens is not None:
        given = "target" if body.target is not None else "max_new_tokens"
        raise InvalidInput(
            f"{engine.info['name']} is an {engine.info['kind']} ({engine.info['family']}): it reads one text, so it "
            f"takes no `{given}`; a target is read by an encoder-decoder (T5, BART, Marian) with its source"
        )
    patch = (
        None
        if body.patch is None
        else Patch(
            **{
                **body.patch.model_dump(),
                "positions": tuple(body.patch.positions),
                "sources": tuple(body.patch.sources),
            }
        )
    )
    spec = engine.spec(body.text, body.text_pair, body.mask, body.pooling, body.ablate, body.prompt, patch)
    run = await lab.serve_spec(spec, client)
    # The first view's matrices in the same answer: no second round trip before the first heatmap. Encoded
    # as the attention endpoint's are (beside_loop): a mean of heads or blocks is computed there.
    view = body.attention
    attention = None
    if view is not None:
        pieces, headers = await view_answer(run, lab, view, client)
        values = prod(int(n) for n in headers["X-Attention-Shape"].split(","))
        attention = await beside_loop(values, embedded_attention, pieces, headers, view)
    return NumbersResponse(
        {
            "run_id": run.run_id,
            "model": engine.info,
            "text_pair": spec.text_pair,
            "tokens": [token.__dict__ for token in run.tokens],
            "truncated": run.truncated,
            "mask": spec.mask,
            "pooling": spec.pooling,
            "prompt": spec.prompt,
            "pooled": None if run.pooling_pass_due else sentence_vector(run),
            "ablated": spec.ablated,
            "patch": spec.patch,
            "attention": attention,
        }
    )


@router.get("/runs/{run_id}/pooled", response_model=Pooled, responses=NOT_FOUND)
async def pooled_vector(run: RunDep, lab: LabDep, client: ClientDep):
    """The run's sentence vector; for an input longer than the model's max_seq_length, a pass of its own over
    the input cut there (as sentence-transformers encodes it), computed when first asked for."""
    return NumbersResponse(sentence_vector(await lab.pooled(run, client)))


def sentence_vector(run: Run) -> dict:
    """The pooling's vector, and the vector after each module of the model's pipeline."""
    stages = run.stages
    return {
        **pooled(run.spec.pooling, stages[0].vector, run.pooled_tokens),
        "stages": [
            {
                "module": stage.module,
                "title": stage.title,
                "vector": on_wire(stage.vector).numpy(),
                "norm": float(stage.vector.norm()),
            }
            for stage in stages
        ],
        "embedding": on_wire(stages[-1].vector).numpy(),
    }


def pooled(strategy: str, vector, tokens: int) -> dict:
    norm = vector.norm()
    return {
        "strategy": strategy,
        "tokens": tokens,
        "vector": on_wire(vector).numpy(),
        "norm": float(norm),
        "normalized": on_wire(vector / norm).numpy(),
    }


@router.get("/compare", response_model=CompareResponse, responses=NOT_FOUND)
def compare(run_a: PooledRunADep, run_b: PooledRunBDep, token_a: int, token_b: int):
    """One token's vector in run a against one in run b (the same word in two prompts, the same prompt
    under two masks, or a run against its ablated twin)."""
    run_a.check_token(token_a)
    run_b.check_token(token_b)
    return {
        "a": run_a.run_id,
        "b": run_b.run_id,
        "token_a": token_a,
        "token_b": token_b,
        **lessons.compare(run_a, token_a, run_b, token_b),
    }


@router.get("/runs/{run_id}/head-stats", response_model=HeadStatsResponse, responses=NOT_FOUND)
async def head_stats(run: RunDep, lab: LabDep, client: ClientDep):
    def content() -> dict:
        heads = lessons.head_stats(run)
        return {"threshold": lessons.LABEL_THRESHOLD, "added": lessons.added_names(run), "heads": heads}

    what = f"the head statistics of run {run.run_id}"
    return await answered(lab, client, what, lessons.head_stats_bytes(run), content)


@router.get("/runs/{run_id}/tokens/{token}/rollout", response_model=RolloutResponse, responses=NOT_FOUND)
async def rollout(run: RunDep, lab: LabDep, client: ClientDep, token: int):
    run.check_token(token)
    return await answered(
        lab,
        client,
        f"the rollout of run {run.run_id}",
        lessons.rollout_bytes(run) + len(run.tokens) * JSON_NUMBER_BYTES,
        lambda: {"index": token, "rollout": on_wire(lessons.rollout(run)[token]).numpy()},
    )


@router.get("/runs/{run_id}/tokens/{token}/nearest", response_model=NearestResponse, responses=NOT_FOUND)
def nearest(run: RunDep, lab: LabDep, token: int, k: Annotated[int, Query(ge=1, le=50)] = 5):
    run.check_token(token)
    engine = lab.engine_of(run)
    return {
        "index": token,
        "stages": lessons.nearest_rows(run, token, engine.unit_embedding_table, engine.loaded.tokenizer, k),
    }


@router.get("/runs/{run_id}/tokens/{token}/next", response_model=NextTokensResponse, responses=NOT_FOUND)
def next_tokens(run: RunDep, lab: LabDep, token: int, k: Annotated[int, Query(ge=1, le=NEXT_TOKENS)] = 5):
    """What the language-model head would write after this token: its k best candidates (models with an LM
    head; under the causal mask each position sees only itself and the tokens before it)."""
    run.check_token(token)
    if run.next_tokens is None:
        raise InvalidInput(f"{run.spec.model} has no language-model head: it predicts no next token")
    ids, logits, probabilities = (values[token, :k].tolist() for values in run.next_tokens)
    pieces = lab.engine_of(run).pieces(ids)
    return {
        "index": token,
        "candidates": [
            {"id": i, "token": piece, "logit": logit, "probability": probability}
            for i, piece, logit, probability in zip(ids, pieces, logits, probabilities, strict=True)
        ],
    }


@router.post("/pooling", response_model=PoolingResponse)
async def pooling(body: PoolingRequest, lab: LabDep, client: ClientDep):
    """CLS, mean and max pooling of one prompt side by side, and how an instruction prefix (or one of the
    model's prompts) moves its sentence vector."""
    engine = await lab.engine_for(body.model, client)
    run = await lab.pooled(await lab.serve_spec(engine.spec(body.text, mask=body.mask, prompt=""), client), client)
    other = (
        engine.spec(body.text, mask=body.mask, prompt=body.prompt)
        if body.prompt
        else engine.spec(body.prefix + body.text, mask=body.mask, prompt="")
    )
    prefixed = await lab.pooled(await lab.serve_spec(other, client), client)
    whole_input = lessons.whole_input_vector(run)
    vectors = lessons.pooling_strategies(run, engine.info["poolings"])
    names = list(vectors)
    return NumbersResponse(
        {
            "run_id": run.run_id,
            "strategies": {name: pooled(name, vector, run.pooled_tokens) for name, vector in vectors.items()},
            "whole_input": {
                **pooled(run.spec.pooling, whole_input, len(run.tokens)),
                "cosine": lessons.cosine(run.pooled, whole_input),
            },
            "cosines": {
                f"{x}/{y}": lessons.cosine(vectors[x], vectors[y]) for i, x in enumerate(names) for y in names[i + 1 :]
            },
            "prefix": {
                "text": (engine.loaded.pipeline.prompts[body.prompt] if body.prompt else body.prefix) + body.text,
                "run_id": prefixed.run_id,
                "cosine": lessons.cosine(run.embedding, prefixed.embedding),
            },
        }
    )


@router.get("/runs/{run_id}/layers/{layer}/heads/{head}", response_model=HeadResponse, responses=NOT_FOUND)
async def head(run: RunDep, lab: LabDep, client: ClientDep, layer: int, head: int):
    nbytes = run.head_bytes() + run.head_numbers() * (JSON_NUMBER_BYTES + 4)
    return await answered(
        lab,
        client,
        f"head {layer}.{head} of run {run.run_id}",
        nbytes,
        lambda: {"layer": layer, "head": head, "ablated": run.ablated(layer, head), **numbers(run.head(layer, head))},
    )


@router.get(
    "/runs/{run_id}/layers/{layer}/heads/{head}/queries/{query}", response_model=QueryResponse, responses=NOT_FOUND
)
async def query(run: RunDep, lab: LabDep, client: ClientDep, layer: int, head: int, query: int):
    row = run.query(layer, head, query)  # linear in the tokens: one row of scores
    return await answered(
        lab,
        client,
        f"query {query} of head {layer}.{head} of run {run.run_id}",
        json_bytes(row.values()),
        lambda: {"layer": layer, "head": head, "query": query, "ablated": run.ablated(layer, head), **numbers(row)},
    )


@router.get("/runs/{run_id}/layers/{layer}", response_model=LayerResponse, responses=NOT_FOUND)
async def layer(run: RunDep, lab: LabDep, client: ClientDep, layer: int):
    rows = run.layer(layer)
    what = f"block {layer}'s rows of run {run.run_id}"
    return await answered(lab, client, what, json_bytes(rows.values()), lambda: {"layer": layer, **numbers(rows)})


@router.get("/runs/{run_id}/embeddings", response_model=EmbeddingsResponse, responses=NOT_FOUND)
async def embeddings(run: RunDep, lab: LabDep, client: ClientDep):
    rows = run.embeddings()
    what = f"the embedding rows of run {run.run_id}"
    return await answered(lab, client, what, json_bytes(rows.values()), lambda: numbers(rows))


@router.get("/runs/{run_id}/tokens/{token}", response_model=TokenTraceResponse, responses=NOT_FOUND)
def token_trace(run: RunDep, token: int):
    trace = run.token_trace(token)  # one token's rows: its size is the model's, not the input's
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
async def attention(
    run: RunDep,
    lab: LabDep,
    client: ClientDep,
    view: Annotated[AttentionView, Query()],
    accept_encoding: Annotated[
        str, Header(description="zstd, br or gzip: the body comes compressed (not to a client on this machine)")
    ] = "",
):
    """The attention matrices a view asks for, encoded (app.web.encoding) and compressed as the client
    accepts (unless it is on this machine: app.web.compression), in pieces as they are made where the body
    is larger than one. A measure other than the weights is computed at turns of the model (Lab.measured)
    and kept; a window, or a long run's view, is computed a chunk of rows at a time (Lab.cells); the
    encoding runs in a thread."""
    pieces, headers = await view_answer(run, lab, view, client)
    headers["Vary"] = "Accept-Encoding"
    length = int(headers["Content-Length"])
    encoding = None if is_loopback(client.address) else chosen_encoding(accept_encoding)
    if encoding is not None and length >= MIN_BYTES:
        # Compressed by the threads that encode, not by the middleware on the event loop (app.web.compression).
        pieces = compressed(pieces, encoding)
        headers["Content-Encoding"] = encoding
        del headers["Content-Length"]
    if length <= PIECE_BYTES:
        # One piece: answered whole from this thread, not streamed with a thread hop per piece.
        return Response(b"".join(pieces), media_type=MEDIA_TYPE, headers=headers)
    return StreamingResponse(pieces, media_type=MEDIA_TYPE, headers=headers)


def embedded_attention(pieces: Iterator[bytes], headers: dict[str, str], view: AttentionView) -> dict | None:
    """What the attention endpoint sends, as one JSON field: its headers' numbers and the body in base64.
    None past one piece (PIECE_BYTES), which the endpoint sends in pieces: the analysis is answered all the
    same (a model reading more than 512 tokens makes a larger first heatmap, unless pooled by `size`)."""
    if int(headers["Content-Length"]) > PIECE_BYTES:
        return None
    return {
        "shape": [int(n) for n in headers["X-Attention-Shape"].split(",")],
        "dtype": view.dtype,
        "scale": float(headers["X-Attention-Scale"]) if view.dtype == "uint8" else None,
        "measure": view.measure,
        "window": [int(n) for n in headers["X-Attention-Window"].split(",")],
        "pooling": headers.get("X-Attention-Pooling"),
        "computed_in": headers["X-Attention-Computed-In"],
        "data": base64.b64encode(b"".join(pieces)).decode("ascii"),
    }


async def view_answer(run: Run, lab: Lab, view: AttentionView, client) -> tuple[Iterator[bytes], dict[str, str]]:
    """The view's matrices encoded (encode_attention: pieces of the body, headers). Whole blocks of its
    measure where the run's blocks are small and the view asks for every cell; else its window (every cell
    by default), exact or pooled by `size`, a chunk of rows at a time (Lab.cells)."""
    if view.heads is not None and view.head is not None:
        raise InvalidInput("give `head` or `heads`, not both")
    if view.blocks is not None and view.layer is not None:
        raise InvalidInput("`blocks=mean` averages every block: give no `layer`")
    n = len(run.tokens)
    if view.rows is None and view.cols is None and run.block_bytes <= cells.ROWS_FROM_BYTES:
        matrices = await lab.measured(run, view.measure, view.layer, client)
        values = sum(block.numel() for block in matrices) if view_computes(view, n) else 0
        pieces, headers = await beside_loop(values, encoded_view, matrices, view)
        headers["X-Attention-Window"] = f"0,{n},0,{n}"
        if view.size is not None and n > view.size:
            headers["X-Attention-Pooling"] = "max"
        headers["X-Attention-Computed-In"] = computed_in(run, view.measure)
        return pieces, headers
    plan, window = cell_plan(run, view)
    found = await lab.cells(run, plan, window, client)  # [layer, head, query, key]
    top = float(found.max()) if view.measure == "norm" else 1.0
    pieces, headers = encode_attention(list(found), view.dtype, None, top)  # pieces made as the body is sent
    headers["X-Attention-Measure"] = view.measure
    headers["X-Attention-Window"] = ",".join(
        str(bound) for bound in (window.rows.start, window.rows.stop, window.cols.start, window.cols.stop)
    )
    if window.pooled:
        headers["X-Attention-Pooling"] = "max"
    headers["X-Attention-Computed-In"] = computed_in(run, view.measure)
    return pieces, headers


# Work on at most this many attention values is done on the event loop: the hop to a worker thread and back took
# longer than encoding a 30-token run's 72 heads (64,800 values; bench/README.md).
INLINE_VALUES = 65_536


async def beside_loop(values: int, work: Callable[..., Result], *args) -> Result:
    """work(*args), which reads `values` attention values: on the event loop where they are few, else in a
    worker thread, so that a long run's encoding or mean never holds up the other requests."""
    if values <= INLINE_VALUES:
        return work(*args)
    return await run_in_threadpool(work, *args)


def computed_in(run: Run, measure: str) -> str:
    """What a measure's numbers were computed in: the weights in the model's own dtype (its eager attention's
    numbers); the other measures in float32 or more, from a bfloat16 or float16 model's numbers upcast."""
    return dtype_name(run.dtype) if measure == "weights" else "float32"


def cell_plan(run: Run, view: AttentionView) -> tuple[cells.Plan, cells.Window]:
    """What a view reads (its blocks, heads and means) and which cells of it (its window and size), checked."""
    n = len(run.tokens)
    if view.layer is not None:
        run.check_layer(view.layer)
    layers = tuple(range(run.n_layers)) if view.layer is None else (view.layer,)
    available = 1 if measures.MEASURES[view.measure].per_block else run.n_heads
    if view.head is not None:
        chosen = [view.head]
    elif view.heads is not None:
        chosen = sorted({int(h) for h in view.heads.split(",")})
    else:
        chosen = list(range(available))
    if chosen[-1] >= available:
        raise OutOfRange(f"head {chosen[-1]} does not exist: heads are 0 to {available - 1}")
    mean = "blocks" if view.blocks == "mean" else "heads" if view.heads is not None else None
    span = lambda text: range(*(int(bound) for bound in text.split(":"))) if text else range(n)  # noqa: E731
    window = cells.Window(span(view.rows), span(view.cols), view.size)
    plan = cells.Plan(view.measure, layers, tuple(chosen), mean)
    try:
        cells.check_window(window, plan, n)
    except ValueError as error:
        raise InvalidInput(str(error)) from None
    return plan, window


def view_computes(view: AttentionView, n: int) -> bool:
    """Whether encoded_view computes before the body's first piece (a mean of heads or blocks, a norm's largest
    value, a pooling to `size`); of the weights as they are it only takes slices, encoded as the body is sent."""
    pooled = view.size is not None and n > view.size
    return view.heads is not None or view.blocks is not None or view.measure == "norm" or pooled


def encoded_view(matrices: list[Tensor], view: AttentionView) -> tuple[Iterator[bytes], dict[str, str]]:
    """The matrices a view asks for, from its measure's whole blocks (Lab.measured), encoded as it asks
    (encode_attention: pieces of the body, headers)."""
    layer, head, heads, blocks = view.layer, view.head, view.heads, view.blocks
    # The head asked for among the measure's own heads (ALTI has one per block).
    if blocks == "mean" and head is not None:
        pick(matrices, 0, head)  # 404 for a head that does not exist
        matrices = [block[head : head + 1] for block in matrices]
    else:
        matrices = pick(matrices, None if layer is None else 0, head)
    if heads is not None or blocks is not None:
        available = len(matrices[0])  # the measure's heads per block (one after `head`, and for ALTI)
        chosen = sorted({int(h) for h in heads.split(",")}) if heads else list(range(available))
        if chosen[-1] >= available:
            raise OutOfRange(f"head {chosen[-1]} does not exist: heads are 0 to {available - 1}")
        matrices = measures.mean_view(matrices, chosen, blocks == "mean")
    # Weights and ALTI's shares lie in [0, 1]; norms do not, so uint8 spans this answer's own largest value.
    top = max(float(block.max()) for block in matrices) if view.measure == "norm" else 1.0
    pieces, headers = encode_attention(matrices, view.dtype, view.size, top)
    headers["X-Attention-Measure"] = view.measure
    return pieces, headers
