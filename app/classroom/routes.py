"""The class mode's HTTP API: start a class, move it (the teacher, with the class's secret), join and
follow it (learners, over Server-Sent Events), and answer its questions."""

import asyncio
import io
import ipaddress
import json
import socket
from typing import Annotated

import segno
from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import StreamingResponse

from app.classroom.classes import Classes
from app.classroom.schemas import (
    Answer,
    ClassSnapshot,
    ClassStarted,
    ClassView,
    Code,
    Join,
    Joined,
    LearnerState,
    Question,
    Reveal,
    Score,
    Tally,
)

router = APIRouter(prefix="/api/classes", tags=["class mode"])
HEARTBEAT_SECONDS = 15  # a comment line now and then keeps proxies and phones from closing an idle stream


async def get_classes(request: Request) -> Classes:
    return request.app.state.classes


ClassesDep = Annotated[Classes, Depends(get_classes)]
Secret = Annotated[str | None, Header(alias="X-Class-Secret")]


def join_url(request: Request, code: str) -> tuple[str, bool]:
    """The link learners open, on the address the teacher's browser used. A teacher on 127.0.0.1 of a lab
    that listens on the network gets this computer's network address instead, which phones can reach."""
    base = request.base_url
    host = base.hostname or ""
    listening = request.app.state.settings.host
    if is_loopback(host) and not is_loopback(listening):
        base = base.replace(hostname=network_address())
    reachable = not is_loopback(base.hostname or "")
    return f"{str(base).rstrip('/')}/?class={code}", reachable


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def network_address() -> str:
    """This computer's address on its network: the one a UDP socket would send from (nothing is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
        except OSError:
            return "127.0.0.1"


@router.post("", response_model=ClassStarted, status_code=201)
async def start(request: Request, classes: ClassesDep):
    code, secret = await classes.start()
    url, reachable = join_url(request, code)
    return {"code": code, "secret": secret, "join_url": url, "reachable": reachable}


@router.get("/{code}", response_model=ClassSnapshot)
async def snapshot(code: Code, classes: ClassesDep):
    return await classes.snapshot(code)


@router.get("/{code}/qr.svg", response_class=Response, responses={200: {"content": {"image/svg+xml": {}}}})
async def qr(code: Code, request: Request, classes: ClassesDep):
    """The join link as a QR code, drawn here (segno): nothing is fetched from elsewhere."""
    await classes.snapshot(code)
    svg = io.BytesIO()
    segno.make(join_url(request, code)[0], error="m").save(svg, kind="svg", scale=8, border=2, xmldecl=False)
    return Response(svg.getvalue(), media_type="image/svg+xml")


@router.put("/{code}/view", status_code=204)
async def show(code: Code, body: ClassView, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    await classes.show(code, body.view)


@router.post("/{code}/question", status_code=204)
async def ask(code: Code, body: Question, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    await classes.ask(code, body.model_dump())


@router.post("/{code}/reveal", response_model=Tally)
async def reveal(code: Code, body: Reveal, classes: ClassesDep, secret: Secret = None):
    await classes.check_teacher(code, secret)
    return await classes.reveal(code, body.answer, body.weight)


@router.post("/{code}/learners", response_model=Joined, status_code=201)
async def join(code: Code, body: Join, classes: ClassesDep):
    return {"learner": await classes.join(code, body.nickname)}


@router.put("/{code}/learners/{learner}", status_code=204)
async def update(code: Code, learner: str, body: LearnerState, classes: ClassesDep):
    await classes.update(code, learner, body.following, body.nickname)


@router.post("/{code}/learners/{learner}/answers", response_model=Tally)
async def answer(code: Code, learner: str, body: Answer, classes: ClassesDep):
    return {"tally": await classes.answer(code, learner, body.question, body.token)}


@router.get("/{code}/learners/{learner}/score", response_model=Score)
async def score(code: Code, learner: str, classes: ClassesDep):
    return {"score": await classes.score(code, learner)}


@router.get("/{code}/events", response_class=StreamingResponse, responses={200: {"content": {"text/event-stream": {}}}})
async def events(code: Code, classes: ClassesDep):
    """Server-Sent Events: first the class as it is ("snapshot"), then each change as it happens ("view",
    "question", "tally", "reveal", "presence"). The browser's EventSource reconnects by itself, and gets a
    fresh snapshot, so nothing is missed across a dropped connection."""
    await classes.snapshot(code)  # 404 before the stream starts, for a class that does not exist

    async def stream():
        async with classes.events(code) as queue:
            await classes.connected(code, +1)
            try:
                yield "retry: 2000\n\n"
                yield message("snapshot", await classes.snapshot(code))
                while True:
                    try:
                        event = json.loads(await asyncio.wait_for(queue.get(), HEARTBEAT_SECONDS))
                    except TimeoutError:
                        yield ": still here\n\n"
                        continue
                    yield message(event.pop("kind"), event)
            finally:
                await asyncio.shield(classes.connected(code, -1))

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    )


def message(kind: str, data: dict) -> str:
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n"
