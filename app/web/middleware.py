"""ASGI middleware the whole app shares: a cap on request bodies, HEAD on every GET route, the headers
that keep the page's content from being run or framed elsewhere, a one-line start-up failure, the client
cookie that fair queuing goes by, the end of work nobody waits for, answers sent in bounded pieces, the
client a trusted proxy forwards, and event streams counted by the server.

Settings are read from the app's state, which the lifespan fills: building the app reads none, so a bad
setting fails at start-up, in one line, however the server is started."""

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import secrets

from starlette.requests import cookie_parser
from starlette_compress import CompressMiddleware

from app.serving.server import STREAM_EXTENSION, is_loopback, is_trusted

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


CLIENT_COOKIE = "lab_client"
# Each piece of an answer must be taken by the client within the slow-reader timeout; the transport
# holds at most about one piece for a reader that stalls.
SEND_PIECE_BYTES = 1024 * 1024
log = logging.getLogger("uvicorn.error")


class SlowReader(Exception):
    """The client took no piece of its answer within the slow-reader timeout."""


class LimitBody:
    """413 for a body over the max_body_bytes setting: at once when Content-Length says so, else as soon
    as the bytes read pass the cap, so an oversized body is never read whole."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        max_bytes = scope["app"].state.settings.max_body_bytes
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > max_bytes:
            return await self.refuse(send, max_bytes)
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
            if seen > max_bytes:
                over = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def refusing_send(message):
            if not over:
                await send(message)
            elif message["type"] == "http.response.start":
                await self.refuse(send, max_bytes)

        await self.app(scope, counting_receive, refusing_send)

    async def refuse(self, send, max_bytes: int):
        detail = f"the request body is larger than {max_bytes:,} bytes (ATTENTION_LAB_MAX_BODY_BYTES)"
        body = json.dumps({"detail": detail}).encode()
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


def signature(browser: str, secret: bytes) -> str:
    return base64.urlsafe_b64encode(hmac.digest(secret, browser.encode(), hashlib.sha256)[:18]).decode()


def verified_browser(cookie: str, secret: bytes) -> str:
    """The browser a `lab_client` cookie names, if the lab signed it; "" otherwise."""
    browser, _, mac = cookie.partition(".")
    return browser if browser and hmac.compare_digest(mac, signature(browser, secret)) else ""


class ClientCookie:
    """Gives a browser without a valid one a `lab_client` cookie, signed with the lab's secret (kept in the run
    store, so that every worker and replica, and the lab after a restart, verifies it): learners behind one
    address (a school's NAT, the lab's own proxy) then take separate turns at the model. A cookie that does
    not verify (one a client made up) is replaced, and its request counts as one without a cookie. The
    browser it names is scope["lab_client"] ("" for none), which app.web.deps reads."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        secret = scope["app"].state.secret
        sent = cookie_parser(dict(scope["headers"]).get(b"cookie", b"").decode("latin-1")).get(CLIENT_COOKIE, "")
        scope["lab_client"] = verified_browser(sent, secret)
        if scope["lab_client"]:
            return await self.app(scope, receive, send)
        browser = secrets.token_urlsafe(12)
        value = f"{browser}.{signature(browser, secret)}"
        cookie = f"{CLIENT_COOKIE}={value}; Path=/; Max-Age=31536000; HttpOnly; SameSite=Strict"

        async def with_cookie(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie.encode())]}
            await send(message)

        await self.app(scope, receive, with_cookie)


class CancelOnDisconnect:
    """A request whose client disconnects before its answer is complete is cancelled: if it waits for the
    model, it leaves the queue, and a pass nobody else waits for is called off (app.serving.lab).

    Once the request's body is read, the next message from the server is the disconnect; a watcher waits
    for it beside the app. A request without a body is read by the watcher at once."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        has_body = headers.get(b"content-length", b"0") != b"0" or b"transfer-encoding" in headers
        body_read = asyncio.Event()
        gone = asyncio.Event()
        first: list[dict] = []  # the bodiless request's one message, read by the watcher, for the app

        async def app_receive():
            if not has_body:
                await body_read.wait()  # the watcher reads the one message
            if first:
                return first.pop()
            if body_read.is_set():
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_read.set()
            return message

        async def watch():
            if not has_body:
                first.append(await receive())
                body_read.set()
            await body_read.wait()
            if (await receive())["type"] == "http.disconnect":
                gone.set()

        app = asyncio.ensure_future(self.app(scope, app_receive, send))
        watcher = asyncio.ensure_future(watch())
        disconnected = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({app, disconnected}, return_when=asyncio.FIRST_COMPLETED)
            if not app.done():
                app.cancel()
            await asyncio.gather(app, return_exceptions=True)
            if not app.cancelled() and app.exception() is not None:
                raise app.exception()
        finally:
            watcher.cancel()
            disconnected.cancel()


class BoundedSend:
    """Sends each answer in pieces of at most SEND_PIECE_BYTES, each of which the client must take within
    the slow_reader_seconds setting (the server waits for a reader's socket to drain before the next
    piece): a reader that stalls holds one piece, not the whole answer, and is then dropped."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        timeout = scope["app"].state.settings.slow_reader_seconds

        async def send_in_pieces(message):
            if message["type"] != "http.response.body":
                return await send(message)
            body = message.get("body", b"")
            more = message.get("more_body", False)
            for start in range(0, max(len(body), 1), SEND_PIECE_BYTES):
                last = start + SEND_PIECE_BYTES >= len(body)
                piece = body[start : start + SEND_PIECE_BYTES]
                try:
                    async with asyncio.timeout(timeout):
                        await send({"type": "http.response.body", "body": piece, "more_body": more or not last})
                except TimeoutError:
                    raise SlowReader from None

        try:
            await self.app(scope, receive, send_in_pieces)
        except SlowReader:
            # The answer is left incomplete: the server closes the connection.
            client = "{}:{}".format(*scope["client"]) if scope.get("client") else "a client"
            log.warning("dropped %s, which took nothing of its answer for %g s", client, timeout)


class ForwardedClient:
    """A request from a trusted proxy (the trusted_proxies setting; none by default) is taken to come from
    the client its X-Forwarded-For names: the last address in it that is not a trusted proxy itself (each
    proxy appends the address it received from, so what a client wrote itself comes first), with the
    scheme its X-Forwarded-Proto names. From anyone else both headers are ignored."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("client"):
            trusted = scope["app"].state.settings.trusted_proxies
            if trusted and is_trusted(scope["client"][0], trusted):
                headers = dict(scope["headers"])
                client = forwarded_for(headers.get(b"x-forwarded-for", b"").decode("latin-1"), trusted)
                if client is not None:
                    scope = {**scope, "client": (client, 0)}
                proto = headers.get(b"x-forwarded-proto", b"").decode("latin-1").strip()
                if proto in ("http", "https"):
                    scope = {**scope, "scheme": proto}
        await self.app(scope, receive, send)


def forwarded_for(header: str, trusted) -> str | None:
    """The client an X-Forwarded-For names: its last address that is not a trusted proxy; None if it
    names no address."""
    addresses = []
    for part in header.split(","):
        try:
            addresses.append(str(ipaddress.ip_address(part.strip())))
        except ValueError:
            return None  # a header this damaged says nothing reliable
    for address in reversed(addresses):
        if not is_trusted(address, trusted):
            return address
    return addresses[0] if addresses else None


class NoRoomForStream(Exception):
    """The server has no room for one more event stream: answered 503 instead."""


class StreamsCounted:
    """An answer that is an event stream holds its connection for as long as it lasts: the lab's server
    (app.serving.server, through the request's STREAM_EXTENSION) counts it among the connections that
    may never take the places kept for ordinary requests. Where it has no room left, the stream is
    answered 503 and the app's stream ends at once (its send raises)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        stream_starts = scope.get("extensions", {}).get(STREAM_EXTENSION) if scope["type"] == "http" else None
        if stream_starts is None:
            return await self.app(scope, receive, send)
        refused = False

        async def counted_send(message):
            nonlocal refused
            if refused:
                raise NoRoomForStream
            if message["type"] == "http.response.start" and is_event_stream(message) and not stream_starts():
                refused = True
                body = json.dumps({"detail": "the lab has no room for more event streams: try again in a moment"})
                headers = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", b"5"),
                ]
                await send({"type": "http.response.start", "status": 503, "headers": headers})
                await send({"type": "http.response.body", "body": body.encode()})
                raise NoRoomForStream
            await send(message)

        try:
            await self.app(scope, receive, counted_send)
        except NoRoomForStream:
            pass


def is_event_stream(start: dict) -> bool:
    return any(
        name.lower() == b"content-type" and value.startswith(b"text/event-stream") for name, value in start["headers"]
    )


class Compress:
    """starlette_compress's middleware, except for the answers a route sends plain to a client on this machine (the
    paths `plain_to_this_machine` matches, from a loopback address): those pass it untouched. The middleware picks
    its encoder from the request alone, before any route runs, and compresses every answer whose Content-Encoding is
    absent or identity: an answer cannot tell it "leave me as I am" without claiming an encoding it does not have,
    so the paths are named here. Such a route compresses its answer itself, off the event loop, for a client
    elsewhere (app.web.compression), and the Content-Encoding it sets makes the middleware pass that one too."""

    def __init__(self, app, plain_to_this_machine: re.Pattern):
        self.app = app
        self.compressing = CompressMiddleware(app)
        self.plain_to_this_machine = plain_to_this_machine

    async def __call__(self, scope, receive, send):
        if (
            scope["type"] == "http"
            and scope.get("client")
            and self.plain_to_this_machine.search(scope["path"])
            and is_loopback(scope["client"][0])
        ):
            return await self.app(scope, receive, send)
        await self.compressing(scope, receive, send)
