"""ASGI middleware the whole app shares: a cap on request bodies, HEAD on every GET route, the headers
that keep the page's content from being run or framed elsewhere, and a one-line start-up failure."""

import json

# Plotly and the page set inline styles (element style attributes), hence 'unsafe-inline' for styles
# only; no inline or eval'd script is allowed. Images: Plotly renders PNG exports through data: URLs.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class LimitBody:
    """413 for a body over `max_bytes`: at once when Content-Length says so, else as soon as the bytes
    read pass the cap, so an oversized body is never read whole."""

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            return await self.refuse(send)
        seen = 0
        over = False

        # Past the cap the app is told the body has ended, and whatever it answers to the cut body
        # is replaced by the 413.
        async def counting_receive():
            nonlocal seen, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                over = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def refusing_send(message):
            if not over:
                await send(message)
            elif message["type"] == "http.response.start":
                await self.refuse(send)

        await self.app(scope, counting_receive, refusing_send)

    async def refuse(self, send):
        body = json.dumps({"detail": f"the request body is larger than {self.max_bytes:,} bytes"}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 413, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class HeadAsGet:
    """HEAD answers what GET would, headers only: for every GET route, the page and static files alike."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)

        async def headers_only(message):
            if message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": b""})
                return
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


class SecurityHeaders:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


class OneLineStartupFailure:
    """A start-up that fails for a reason the operator can fix (the model folder, the run store) is told
    to the server as one line, `attention-lab: …`, as `python -m app` says it, not as a traceback. The
    server prints it and stops: uvicorn stops every worker when one fails to start."""

    def __init__(self, app, errors: tuple[type[Exception], ...]):
        self.app = app
        self.errors = errors

    async def __call__(self, scope, receive, send):
        if scope["type"] != "lifespan":
            return await self.app(scope, receive, send)
        held = []

        async def holding_failure(message):
            if message["type"] == "lifespan.startup.failed":
                held.append(message)  # the traceback Starlette formatted: sent on only for other errors
            else:
                await send(message)

        try:
            await self.app(scope, receive, holding_failure)
        except BaseException as error:
            if held and isinstance(error, self.errors):
                await send({"type": "lifespan.startup.failed", "message": f"attention-lab: {error}"})
                return
            for message in held:
                await send(message)
            raise
