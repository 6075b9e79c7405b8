"""Server-Sent Events for any router: a stream of named events, opened when the response is sent (so that a
refusal before it, 404, 403, 429 or 503, is still an ordinary answer) and closed with the response whichever way
it ends. A class's changes go out this way, as will a training's curves and a generation's tokens."""

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.web.compression import compressed_as_they_come

RETRY_MS = 1000  # how soon a browser's EventSource reconnects after a stream ends
MEDIA_TYPE = "text/event-stream"
RESPONSES = {200: {"content": {MEDIA_TYPE: {}}}}  # what a route that streams events answers, for /docs

Event = tuple[str, object] | None  # (name, data sent as JSON), or None: a comment that keeps the line open


class EventStream(StreamingResponse):
    """The events of `following` (an async context manager yielding an async iterator of Event) as SSE, compressed
    in `encoding` by the stream itself where one is given (app.web.compression.compressed_as_they_come)."""

    def __init__(self, following: AbstractAsyncContextManager[AsyncIterator[Event]], encoding: str | None = None):
        headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
        if encoding is not None:
            headers |= {"Content-Encoding": encoding, "Vary": "Accept-Encoding"}
        super().__init__(iter(()), media_type=MEDIA_TYPE, headers=headers)
        self.following = following
        self.encoding = encoding

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self.following as events:
            texts = sse(events)
            self.body_iterator = texts if self.encoding is None else compressed_as_they_come(texts, self.encoding)
            await super().__call__(scope, receive, send)


async def sse(events: AsyncIterator[Event]) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    async for event in events:
        yield ": still here\n\n" if event is None else f"event: {event[0]}\ndata: {json.dumps(event[1])}\n\n"
