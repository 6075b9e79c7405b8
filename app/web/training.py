"""The training routes: grow a model in the lab from a spec, follow it, pause, resume or cancel it. A training
runs detached from the request that starts it; its checkpoints are models the lab serves (/api/models)."""

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Request

from app.classroom.classes import Classes
from app.engine.training.spec import MAX_CHECKPOINTS, TrainingSpec
from app.serving.gate import Client
from app.serving.training import NotYourTraining, Owner, TeacherOnly, Trainings, browser_of
from app.web.deps import ClientDep
from app.web.events import RESPONSES as events_responses
from app.web.events import EventStream
from app.web.schemas.common import ErrorResponse
from app.web.schemas.training import TrainingLimits, TrainingList, TrainingRequest, TrainingStatus

router = APIRouter(prefix="/api/train", tags=["training"])
Secret = Annotated[str | None, Header(alias="X-Class-Secret", description="The class's teacher's secret")]
NOT_FOUND = {404: {"model": ErrorResponse, "description": "No such training in this lab"}}
CONTROL = {
    **NOT_FOUND,
    403: {"model": ErrorResponse, "description": "Not the browser that started it, nor its class's teacher"},
    409: {"model": ErrorResponse, "description": "resume: another training is under way (one at a time)"},
}


async def get_trainings(request: Request) -> Trainings:
    return request.app.state.trainings


async def get_classes(request: Request) -> Classes | None:
    classes = request.app.state.classes
    return None if classes.unavailable else classes


TrainingsDep = Annotated[Trainings, Depends(get_trainings)]
ClassesDep = Annotated[Classes | None, Depends(get_classes)]


@router.post(
    "",
    response_model=TrainingStatus,
    responses={
        403: {"model": ErrorResponse, "description": "A class runs on the lab and this is not its teacher"},
        409: {"model": ErrorResponse, "description": "Another training is under way (one at a time per lab)"},
        422: {"model": ErrorResponse, "description": "A spec that cannot be grown, or past a bound (named)"},
    },
)
async def start(
    body: TrainingRequest, trainings: TrainingsDep, classes: ClassesDep, client: ClientDep, secret: Secret = None
):
    """Starts growing the spec's model (or goes on with it from its last saved state; a done one is answered as
    it is) and answers at once with its status: `train_id` names it. It runs detached from this request."""
    spec = TrainingSpec.of(**body.spec_fields())
    if body.class_code is not None:
        if classes is None:
            raise TeacherOnly()
        await classes.check_teacher(body.class_code, secret)
    elif classes is not None and await classes.running():
        raise TeacherOnly()
    return await trainings.start(spec, Owner(browser_of(client), body.class_code))


@router.get("", response_model=TrainingList)
async def listed(trainings: TrainingsDep):
    """The training under way, if any, and the lab's trainings, the latest first."""
    return {"active": await trainings.active(), "trainings": await trainings.listed()}


@router.get("/limits", response_model=TrainingLimits)
async def limits(trainings: TrainingsDep):
    """The empty spec's fields (the induction recipe) and this lab's bounds on a training."""
    bounds = trainings.bounds
    return {
        "defaults": asdict(TrainingSpec()),
        "bounds": {
            "weights": bounds.weights,
            "steps": bounds.steps,
            "batch_tokens": bounds.batch_tokens,
            "weight_tokens": bounds.weight_tokens,
            "text_bytes": bounds.text_bytes,
        },
        "max_checkpoints": MAX_CHECKPOINTS,
    }


@router.get("/{train_id}", response_model=TrainingStatus, responses=NOT_FOUND)
async def status(train_id: str, trainings: TrainingsDep):
    """The training's state, spec, loss at every step, checkpoints with their head scores, the phase change
    where the measures say it is, and `model`: the latest checkpoint's served name."""
    return await trainings.status(train_id)


async def allowed(trainings: Trainings, train_id: str, classes: Classes | None, client, secret: str | None) -> None:
    """The browser that started the training, or its class's teacher; anyone else is refused (403). A training
    started by a request without the lab's cookie (a script's, or a browser's very first) belongs to its address."""
    owner = await trainings.owner(train_id)
    if owner.browser in (browser_of(client), browser_of(Client(client.address))):
        return
    if owner.class_code is not None and classes is not None and secret:
        await classes.check_teacher(owner.class_code, secret)
        return
    raise NotYourTraining()


@router.post("/{train_id}/pause", response_model=TrainingStatus, responses=CONTROL)
async def pause(train_id: str, trainings: TrainingsDep, classes: ClassesDep, client: ClientDep, secret: Secret = None):
    """Pauses it at its next slice (its state saved: resume goes on exactly)."""
    await allowed(trainings, train_id, classes, client, secret)
    return await trainings.pause(train_id)


@router.post("/{train_id}/resume", response_model=TrainingStatus, responses=CONTROL)
async def resume(train_id: str, trainings: TrainingsDep, classes: ClassesDep, client: ClientDep, secret: Secret = None):
    """Goes on with a paused, stopped or cancelled training from its last saved state."""
    await allowed(trainings, train_id, classes, client, secret)
    return await trainings.resume(train_id)


@router.post("/{train_id}/cancel", response_model=TrainingStatus, responses=CONTROL)
async def cancel(train_id: str, trainings: TrainingsDep, classes: ClassesDep, client: ClientDep, secret: Secret = None):
    """Calls it off at its next slice; its checkpoints stay served models."""
    await allowed(trainings, train_id, classes, client, secret)
    return await trainings.cancel(train_id)


@router.get("/{train_id}/events", responses={**events_responses, **NOT_FOUND})
async def events(train_id: str, trainings: TrainingsDep, client: ClientDep):
    """Server-Sent Events while it lasts: `training` (the whole status, first), `progress` (state, step, steps,
    loss, seconds, model) about every 0.25 s while it runs, `checkpoint` (one checkpoint with its head scores)
    for each kept, `state` (progress with the phase change) when its state changes, and `end` once it is done,
    cancelled or failed."""
    return EventStream(trainings.follow(train_id, client))
