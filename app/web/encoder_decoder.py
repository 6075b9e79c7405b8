"""An encoder-decoder's runs (T5, BART, Marian): POST /api/analyze answers one (encoder_decoder_run, called by the
analyze route when the model is one), and GET /api/encoder-decoder/{run_id}/export sends its numbers as CSV or JSON,
read from the run the lab keeps (Lab.serve_pair), or recomputed from the spec the store keeps under its id."""

import csv
import io
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Query, Response

from app.classroom.answers import csv_cell
from app.engine.encoder_decoder import (
    KINDS,
    NOT_MEASURED,
    EncoderDecoderEngine,
    EncoderDecoderRun,
    pair_names,
    target_text,
)
from app.engine.errors import InvalidInput
from app.engine.spec import EncoderDecoderSpec
from app.serving.gate import Client
from app.serving.lab import Lab, RunNotFound
from app.web.deps import ClientDep, LabDep
from app.web.encoding import NumbersResponse, on_wire
from app.web.schemas.common import ErrorResponse
from app.web.schemas.runs import AnalyzeRequest

router = APIRouter(prefix="/api/encoder-decoder")
# What an encoder-decoder's run does not take: the one-text run's knobs (AnalyzeRequest's fields).
SINGLE_TEXT = ("text_pair", "mask", "pooling", "prompt", "patch", "attention")
WHERE = {"encoder": ("source", "source"), "decoder": ("target", "target"), "cross": ("target", "source")}
JSON_NUMBER_BYTES = 16  # orjson's float32 and its comma (app.web.api)


async def encoder_decoder_run(engine: EncoderDecoderEngine, body: AnalyzeRequest, lab: Lab, client: Client):
    """An encoder-decoder's run: the source and the target (written first where none is given), and its three kinds
    of attention, every block and head, as weights and norm-weighted. Its spec goes to the store (its id names it
    for the export); the run is the lab's (Lab.serve_pair: kept, or computed in turns of the gate); its JSON is
    made on a worker thread, holding the bytes it takes."""
    refused = [name for name in SINGLE_TEXT if getattr(body, name) is not None] + (["ablate"] if body.ablate else [])
    if refused:
        raise InvalidInput(
            f"{engine.info['name']} is an encoder-decoder ({engine.info['family']}): its run takes `text` (the source),"
            f" `target` and `max_new_tokens`, not {', '.join(f'`{name}`' for name in refused)}"
        )
    spec = engine.pair_spec(body.text, body.target, body.max_new_tokens)
    await lab.store(spec)
    run, nbytes = await computed(engine, spec, lab, client)
    return await lab.works.on_thread(
        f"the JSON of {spec.run_id}", nbytes, lambda: NumbersResponse(pair_json(engine, run)), client
    )


async def computed(engine: EncoderDecoderEngine, spec: EncoderDecoderSpec, lab: Lab, client: Client):
    """The run (kept, or computed: Lab.serve_pair) and the bytes an answer of its numbers takes (its JSON or CSV)."""
    run = await lab.serve_pair(engine, spec, client)
    source, target = len(run.source), len(run.target)
    cells = engine.heads * (engine.encoder_layers * source**2 + engine.decoder_layers * (target**2 + target * source))
    return run, 2 * cells * (JSON_NUMBER_BYTES + 4)


def pair_json(engine: EncoderDecoderEngine, run: EncoderDecoderRun) -> dict:
    """The run as EncoderDecoderResponse says it."""
    attention = {
        kind: {
            "rows": rows,
            "columns": columns,
            "names": pair_names(kind),
            # orjson writes only C-contiguous arrays
            "weights": np.ascontiguousarray(on_wire(run.all_weights(kind)).numpy()),
            "norm": np.ascontiguousarray(on_wire(engine.all_norms(run, kind)).numpy()),
        }
        for kind, (rows, columns) in WHERE.items()
    }
    spec = run.spec
    return {
        "run_id": run.run_id,
        "kind": "encoder-decoder",
        "model": engine.info,
        "source": {
            "text": spec.source,
            "tokens": [vars(token) for token in run.source],
            "truncated": run.source_truncated,
        },
        "target": {
            "text": target_text(engine, run),
            "tokens": [vars(token) for token in run.target],
            "written": run.written,
            "max_new_tokens": spec.max_new_tokens,
        },
        "attention": attention,
        "not_measured": NOT_MEASURED,
    }


CSV_COLUMNS = ["kind", "layer", "head", "query", "query token", "query segment"]
CSV_COLUMNS += ["key", "key token", "key segment", "weight", "norm-weighted"]


def pair_csv(engine: EncoderDecoderEngine, run: EncoderDecoderRun) -> str:
    """Every cell of the three kinds of attention, one row each: which attention, block and head, the query and the
    key by index, label and segment (source or target), the weight and the norm-weighted attention. Comment lines
    first: the model, the source, the target."""
    out = io.StringIO()
    write = csv.writer(out, lineterminator="\n").writerow
    target = target_text(engine, run)
    for about in (
        f"# model: {engine.info['name']} ({engine.info['family']}, encoder-decoder, {engine.info['dtype']})",
        f"# source: {run.spec.source}",
        f"# target ({'written by the model' if run.written else 'given'}): {target}",
    ):
        write([csv_cell(about.replace("\r", " ").replace("\n", " "))])
    write(CSV_COLUMNS)
    tokens = {"source": run.source, "target": run.target}
    for kind in KINDS:
        rows, columns = (tokens[side] for side in WHERE[kind])
        weights, norms = run.all_weights(kind).tolist(), engine.all_norms(run, kind).tolist()
        for layer, (block, block_norms) in enumerate(zip(weights, norms, strict=True)):
            for head, (matrix, matrix_norms) in enumerate(zip(block, block_norms, strict=True)):
                for query, (row, row_norms) in enumerate(zip(matrix, matrix_norms, strict=True)):
                    for key, (weight, norm) in enumerate(zip(row, row_norms, strict=True)):
                        write(
                            [kind, layer, head, query, csv_cell(rows[query].label), WHERE[kind][0]]
                            + [key, csv_cell(columns[key].label), WHERE[kind][1], weight, norm]
                        )
    return out.getvalue()


@router.get(
    "/{run_id}/export",
    responses={
        200: {"content": {"text/csv": {}, "application/json": {}}, "description": "The run's numbers"},
        404: {"model": ErrorResponse, "description": "No encoder-decoder run by that id is kept"},
    },
)
async def export(
    run_id: str,
    lab: LabDep,
    client: ClientDep,
    format: Annotated[
        Literal["csv", "json"], Query(description="csv: one row per cell; json: the analyze answer")
    ] = "csv",
):
    """An encoder-decoder run's numbers to save: CSV, one row per cell of the three kinds of attention naming the
    query and the key as source or target tokens, or the JSON POST /api/analyze answered. Read from the run this
    worker keeps, or recomputed from the spec the store keeps under the id (any worker, or a run let go)."""
    spec = await lab.stored_spec(run_id, EncoderDecoderSpec, RunNotFound)
    engine = await lab.engine_for(spec.model, client)
    run, nbytes = await computed(engine, spec, lab, client)
    if format == "json":
        return await lab.works.on_thread(
            f"the JSON of {run_id}", nbytes, lambda: NumbersResponse(pair_json(engine, run)), client
        )
    text = await lab.works.on_thread(f"the CSV of {run_id}", 4 * nbytes, lambda: pair_csv(engine, run), client)
    name = f"encoder-decoder-{run_id}.csv"
    return Response(text, media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{name}"'})
