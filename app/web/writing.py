"""The writing routes: a decoder continues a prompt (POST /api/generate), each step opened; the same writing as a
stream of server-sent events, to the client that asks for it and to any that follows it by its id."""

import re
from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import StreamingResponse

from app.engine.writing import Knobs
from app.serving.gate import Client
from app.serving.server import is_loopback
from app.web.compression import chosen_encoding
from app.web.deps import ClientDep, WritingsDep
from app.web.events import RESPONSES, EventStream
from app.web.schemas.common import ErrorResponse
from app.web.schemas.writing import GenerateRequest, GenerateResponse

router = APIRouter(prefix="/api/generate")
REFUSED = {
    422: {"model": ErrorResponse, "description": "The model reads and does not write, or a knob is out of bounds"},
    429: {"model": ErrorResponse, "description": "This client or address has as many writings under way as it may"},
    503: {"model": ErrorResponse, "description": "The model is busy, or failed"},
}
EVENTS = (
    "Server-Sent Events: \"writing\" first (the writing's id, prompt and knobs, as in POST /api/generate's answer), "
    'then a "step" for each token as it is written (one of the answer\'s `steps`), every one once and in order, '
    'and "done" last (`ids`, `tokens`, `written`, `stop`), or "error" (`detail`) where the writing failed after '
    "its first token. A refusal before the first token is an ordinary answer (422, 429, 503). Leaving the stream "
    "calls the writing off at its next token once nobody else follows it. The events come compressed as the "
    "client accepts (zstd, br or gzip), unless it is on this machine."
)
# Every event of a writing's stream carries a step's attention rows (80 kB of base64 a step after a 256-token
# prompt): compressed by the middleware on the event loop, they held it longer than the step took to write. So
# the streams compress their own events, in a thread, for a client elsewhere, and send them plain to a client on
# this machine, whose loopback carries the bytes for less than compressing them (app.web.compression): the
# middleware lets these paths of a loopback client past it (app.web.middleware.Compress).
PLAIN_TO_THIS_MACHINE = re.compile(r"/api/generate(/[^/]+)?/stream$")
AcceptEncoding = Annotated[
    str, Header(description="zstd, br or gzip: the events come compressed (not to a client on this machine)")
]


def knobs_of(body: GenerateRequest) -> Knobs:
    return Knobs(body.max_new_tokens, body.do_sample, body.temperature, body.top_k, body.top_p, body.seed)


def stream_encoding(client: Client, accept_encoding: str) -> str | None:
    """How a writing's events go to a client: plain on this machine, else as it accepts (PLAIN_TO_THIS_MACHINE)."""
    return None if is_loopback(client.address) else chosen_encoding(accept_encoding)


@router.post("", response_model=GenerateResponse, responses=REFUSED)
async def generate(body: GenerateRequest, writings: WritingsDep, client: ClientDep):
    """A decoder continues `text`, as model.generate does with the same knobs after torch.manual_seed(seed), one
    token at a turn of the model; the answer comes once the writing has ended. Each step is opened: its funnel
    (the top 10 after the softmax and after each logits processor), the draw, the new attention row of every
    block and head, and the cache of keys and values. A request with the same body while it is under way follows
    the same writing."""
    spec = await writings.spec(body.model, body.text, knobs_of(body), client)
    return await writings.written(spec, client)


@router.post(
    "/stream",
    response_class=StreamingResponse,
    responses={**RESPONSES, **REFUSED},
    description=f"POST /api/generate's writing as it is written. {EVENTS}",
)
async def generate_stream(
    body: GenerateRequest, writings: WritingsDep, client: ClientDep, accept_encoding: AcceptEncoding = ""
):
    spec = await writings.spec(body.model, body.text, knobs_of(body), client)
    return EventStream(writings.follow(spec, client), stream_encoding(client, accept_encoding))


@router.get(
    "/{writing_id}/stream",
    response_class=StreamingResponse,
    responses={**RESPONSES, **REFUSED, 404: {"model": ErrorResponse, "description": "Unknown or expired writing"}},
    description="The writing named by its `writing_id`, followed: the one under way on this worker from its first "
    "token, the one that ended as this worker keeps it (at once: nothing is written again), or written again from "
    f"its spec (the same tokens, on any worker). {EVENTS}",
)
async def follow(writing_id: str, writings: WritingsDep, client: ClientDep, accept_encoding: AcceptEncoding = ""):
    spec = await writings.stored(writing_id)
    return EventStream(writings.follow(spec, client), stream_encoding(client, accept_encoding))
