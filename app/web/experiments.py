"""The experiments' routes: Integrated Gradients and gradient × input, activation patching, and the faithfulness
scoreboard. Each runs the model again, as a piece of work of its own (app.serving.experiments)."""

from fastapi import APIRouter, Depends

from app.web.api import NumbersResponse
from app.web.deps import ClientDep, ExperimentsDep, request_reads
from app.web.encoding import on_wire
from app.web.schemas.common import ValidationErrorResponse
from app.web.schemas.experiments import (
    AttributionRequest,
    AttributionResponse,
    PatchRequest,
    PatchResponse,
    ScoreboardRequest,
    ScoreboardResponse,
)

router = APIRouter(
    prefix="/api",
    dependencies=[Depends(request_reads)],
    responses={422: {"model": ValidationErrorResponse, "description": "The request is not one the API takes"}},
)


@router.post("/attribution", response_model=AttributionResponse)
async def attribution(body: AttributionRequest, experiments: ExperimentsDep, client: ClientDep):
    """Gradient × input or Integrated Gradients (Captum), per token of `text`, of the two sentences' cosine or
    of the LM head's logit of the next token."""
    ask = body.model_dump(exclude={"model"})
    found = await experiments.attribution(body.model, client, **ask)
    return NumbersResponse(
        {
            **found,
            "tokens": [token.__dict__ for token in found["tokens"]],
            "attributions": on_wire(found["attributions"]).numpy(),
        }
    )


@router.post("/patch", response_model=PatchResponse)
async def patch(body: PatchRequest, experiments: ExperimentsDep, client: ClientDep):
    """Activation patching: input A run again with one activation (a site, at one position or all) taken from
    input B, or a sweep of such patches over every block × position or block × head; the effect on A's
    sentence vector (encoder) or next-token target (decoder)."""
    found = await experiments.patch(body.model, client, **body.model_dump(exclude={"model"}))
    return {
        **found,
        "a_tokens": [token.__dict__ for token in found["a_tokens"]],
        "b_tokens": [token.__dict__ for token in found["b_tokens"]],
    }


@router.post("/scoreboard", response_model=ScoreboardResponse)
async def scoreboard(body: ScoreboardRequest, experiments: ExperimentsDep, client: ClientDep):
    """The faithfulness scoreboard: per block and head, the rank correlations of four accounts of which keys
    a query draws on (weights, norm-weighted, ALTI, gradient × contribution) with each other and with an
    intervention that takes one key's contribution out of the head and runs the model again."""
    found = await experiments.scoreboard(body.model, client, **body.model_dump(exclude={"model"}))
    return {**found, "tokens": [token.__dict__ for token in found["tokens"]]}
