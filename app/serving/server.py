"""The HTTP server the lab runs on: uvicorn with its httptools parser and the lab's own protocol, which holds
the lab's limits. `python -m app` serves with it; so must `uvicorn app.main:app --http
app.serving.server:LabProtocol`, and a lab that uvicorn serves without it refuses to start (check_protocol).

Each request: the request line and headers together may take max_header_bytes: past that a request is
refused at once with 431 and nothing more of it is read (the protocol below holds at most that much of an
unfinished head; httptools itself bounds none). A request must arrive whole within request_timeout_seconds,
or it is answered 408 and its connection closed (a request sent slowly, or half sent and then left). A
request answered before its body arrived whole (a body past the limit, 413) keeps its connection: the rest of
its body is read and dropped, and the next request's head is counted from the parser's word that it began.

Connections are counted per client address, one counter per address as nginx's limit_conn keeps them
(Connections): a client over its bound is refused alone, and everyone else is untouched. Some of a
process's connections are always kept for ordinary requests: connections that hold a place without a
request being answered (just opened, a request arriving slowly, idle keep-alive) and event streams
together can never take them. Behind a trusted proxy (the trusted_proxies setting) the proxy's
connections carry many clients: they count toward the process's bound only, and the proxy bounds its
clients' connections itself (deploy/nginx.conf). X-Forwarded-For is read by the app, from those proxies
only (app.web.middleware.ForwardedClient): never by uvicorn, which by default trusts it from loopback.

httptools rather than h11, which reads and writes HTTP in Python: `make load` and a class burst are faster
with it (bench/README.md)."""

import asyncio
import ipaddress
import logging
import resource
from collections import OrderedDict
from enum import Enum

from uvicorn import Config
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import Settings, SettingsError, get_settings

TOO_LARGE = (
    "The request's address or headers are larger than the lab accepts ({limit:,} bytes). "
    "A link to the lab keeps its text after the # sign, which is not sent to the server: "
    "ask for a new link with the page's Copy link button, or open the lab and paste the text."
)
TOO_SLOW = "The request did not arrive whole within {seconds:g} s."
TOO_MANY_HERE = "This address already has {limit:,} connections open to the lab: close some, then try again."
TOO_MANY = "The lab has {limit:,} connections open: try again in a moment."
HEAD_END = b"\r\n\r\n"
STREAM_EXTENSION = "attention_lab.stream"  # in a request's scope: call it when the answer is an event stream
FILES_BESIDE_CONNECTIONS = 256  # open files a process needs besides its connections: the model, stores, logs
# A connection answered before its request was read whole (refused, or the request too large or too slow) is
# read to its end before it closes, for at most LINGER_SECONDS (nginx's lingering close): closed with the
# client's bytes unread, its socket sends a reset, which can reach the client before it has read the answer.
# At most MOST_LINGERING at once (open files besides the connections' own); past them a connection closes at once.
LINGER_SECONDS = 1.0
MOST_LINGERING = 512
log = logging.getLogger("uvicorn.error")


class State(Enum):
    WAITING = "waiting"  # no whole request to answer: just opened, a request arriving, or idle keep-alive
    ANSWERING = "answering"  # a whole request, being answered
    STREAMING = "streaming"  # an answer that goes on (a class's event stream)


class Connections:
    """This process's open connections by client address.

    - all of them: at most `total` (a new one past it is answered 503 and closed);
    - one address's: at most `per_client` (past it, 429 and closed), except a trusted proxy's;
    - the ones that hold a place without being answered (WAITING) and the event streams together leave
      `kept` places to ordinary requests: past that, the longest-waiting connection of the address that
      holds the most waiting ones is closed, and a new event stream is refused (503)."""

    def __init__(self, total: int, per_client: int, kept: int, trusted: list):
        self.total = total
        self.per_client = per_client
        self.held_limit = total - kept
        self.trusted = trusted
        self.open = 0
        self.streams = 0
        self.by_address: dict[str, int] = {}
        self.waiting: dict[str, OrderedDict] = {}  # address -> its WAITING connections, longest waiting first
        self.waiting_count = 0
        self.lingering = 0  # answered connections read to their end before they close (LabProtocol._answer)

    def refusal(self, address: str) -> tuple[int, str, str] | None:
        """Why a new connection from `address` cannot be taken: (status, reason, message), or None."""
        if self.open >= self.total:
            return 503, "Service Unavailable", TOO_MANY.format(limit=self.total)
        if self.by_address.get(address, 0) >= self.per_client and not is_trusted(address, self.trusted):
            return 429, "Too Many Requests", TOO_MANY_HERE.format(limit=self.per_client)
        return None

    def opened(self, connection: "LabProtocol") -> None:
        self.open += 1
        self.by_address[connection.address] = self.by_address.get(connection.address, 0) + 1
        self.set_state(connection, State.WAITING)

    def closed(self, connection: "LabProtocol") -> None:
        self.set_state(connection, None)
        self.open -= 1
        self.by_address[connection.address] -= 1
        if not self.by_address[connection.address]:
            del self.by_address[connection.address]

    def set_state(self, connection: "LabProtocol", state: State | None) -> bool:
        """Moves a connection to `state` (None: gone). False, and no move, for a stream with no room."""
        before = connection.state
        if before is state:
            return True
        if state is State.STREAMING:
            self._make_room(for_one_more=True)
            if self.streams + self.waiting_count >= self.held_limit:
                return False
        if before is State.WAITING:
            held = self.waiting[connection.address]
            del held[connection]
            if not held:
                del self.waiting[connection.address]
            self.waiting_count -= 1
        elif before is State.STREAMING:
            self.streams -= 1
        connection.state = state
        if state is State.WAITING:
            self.waiting.setdefault(connection.address, OrderedDict())[connection] = None
            self.waiting_count += 1
            self._make_room(keep=connection)
        elif state is State.STREAMING:
            self.streams += 1
        return True

    def _make_room(self, keep: "LabProtocol | None" = None, for_one_more: bool = False) -> None:
        """Closes waiting connections, the longest-waiting of the address with the most first, until the
        held ones (waiting and streaming) leave the kept places free. `keep`, the connection that has just
        arrived, is never closed for it: a new connection always gets to send its request."""
        while self.streams + self.waiting_count + for_one_more > self.held_limit:
            others = {address: held for address, held in self.waiting.items() if len(held) > (keep in held)}
            if not others:
                return
            address = max(others, key=lambda key: len(others[key]))
            longest = next(connection for connection in others[address] if connection is not keep)
            self.closed(longest)
            longest.transport.close()  # its connection_lost finds it counted out already


def is_trusted(address: str, networks) -> bool:
    """Whether `address` is in one of the trusted proxies' networks."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine's own loopback (an IPv4 one written as IPv6 too)."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return (getattr(ip, "ipv4_mapped", None) or ip).is_loopback


_connections: Connections | None = None


def connections(settings: Settings) -> Connections:
    """This process's connection counts (one per process: every connection of the server shares them)."""
    global _connections
    if _connections is None:
        _connections = Connections(
            effective_max_connections(settings),
            settings.max_connections_per_client,
            settings.connections_kept_for_requests,
            settings.trusted_proxies,
        )
    return _connections


class LabProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline for each request to arrive, plain answers past a limit,
    and its connection counted per client address."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = get_settings()
        # The lab's own limits, whatever uvicorn was given on its command line.
        self.timeout_keep_alive = settings.keep_alive_seconds
        self.limit_concurrency = None  # Connections bounds connections, by address
        if isinstance(self.app, ProxyHeadersMiddleware):
            self.app = self.app.app  # X-Forwarded-For is read by the app, from trusted proxies only
        self.request_timeout_seconds = settings.request_timeout_seconds
        self.max_header_bytes = settings.max_header_bytes
        self.bounds = connections(settings)
        self.state: State | None = None
        self.address = ""

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._request_deadline: asyncio.TimerHandle | None = None
        self._head: bytes | None = b""  # what has arrived of the request head being read; None in a body
        self._linger: asyncio.TimerHandle | None = None  # answered early: what the client sends is dropped
        self.address = self.client[0] if self.client else ""
        refusal = self.bounds.refusal(self.address)
        if refusal is not None:
            self._answer(*refusal)
            return
        self.bounds.opened(self)

    def data_received(self, data: bytes) -> None:
        if self.state is None or self._linger is not None:  # refused, answered early or let go: not read
            return
        # The clock starts with the first byte of a request and stops when the whole of it has arrived.
        if self._request_deadline is None:
            self._request_deadline = self.loop.call_later(self.request_timeout_seconds, self._too_slow)
        if self._head is not None:
            self._head += data
            end = self._head.find(HEAD_END)
            if (end if end >= 0 else len(self._head)) > self.max_header_bytes:
                self._stop_deadline()
                self._answer(431, "Request Header Fields Too Large", TOO_LARGE.format(limit=self.max_header_bytes))
                return
            if end >= 0:
                self._head = None
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope.setdefault("extensions", {})[STREAM_EXTENSION] = self._streaming

    def on_headers_complete(self) -> None:
        # The parser's word, not HEAD_END's: a head that began in the middle of the bytes just received (after
        # the end of the request before it) was never seen whole by data_received, and its body is no head.
        self._head = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_deadline()
        self._head = b""  # the next request on this connection begins with its head
        if self.state is State.WAITING and not self.cycle.response_complete:
            self.bounds.set_state(self, State.ANSWERING)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._stop_deadline()
        if self.state is not None and not self.transport.is_closing() and not self.pipeline:
            self.bounds.set_state(self, State.WAITING)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        if self._linger is not None:
            self._linger.cancel()
            self.bounds.lingering -= 1
        if self.state is not None:
            self.bounds.closed(self)
        super().connection_lost(exc)

    def _streaming(self) -> bool:
        """The answer under way is an event stream, which holds this connection: whether there is room."""
        return self.state is not None and self.bounds.set_state(self, State.STREAMING)

    def _stop_deadline(self) -> None:
        if self._request_deadline is not None:
            self._request_deadline.cancel()
            self._request_deadline = None

    def _too_slow(self) -> None:
        self._request_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:  # still in the request line or headers
            self._answer(408, "Request Timeout", TOO_SLOW.format(seconds=self.request_timeout_seconds))
        else:  # the body stalled: the app's receive() sees the disconnect and the request is cancelled
            self.transport.close()

    def _answer(self, status: int, reason: str, message: str) -> None:
        """The whole answer, then close: the request was never read whole, so there is no cycle to answer in."""
        body = message.encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain; charset=utf-8\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        if self.cycle is not None and not self.cycle.response_complete:
            # The request under way is answered here: whatever its app still sends is dropped, as for a client
            # that left, rather than written after the end of the stream.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.write(head.encode() + body)
        if self.bounds.lingering >= MOST_LINGERING or not self.transport.can_write_eof():
            self.transport.close()
            return
        # The answer, then the end of the stream; the client's end (eof_received) or LINGER_SECONDS close it.
        self.bounds.lingering += 1
        self._linger = self.loop.call_later(LINGER_SECONDS, self.transport.close)
        self.transport.write_eof()


def effective_max_connections(settings: Settings) -> int:
    """max_connections, within the open files this process may have: the soft limit is raised as far as
    the hard one allows, and the bound lowered (saying so) where even that is too few."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    beside = FILES_BESIDE_CONNECTIONS + MOST_LINGERING
    wanted = settings.max_connections + beside
    if soft != resource.RLIM_INFINITY and soft < wanted:
        soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return settings.max_connections
    lowered = max(soft - beside, settings.connections_kept_for_requests + 8)
    log.warning(
        "ATTENTION_LAB_MAX_CONNECTIONS=%d lowered to %d: this process may open %d files (ulimit -n)",
        settings.max_connections,
        lowered,
        soft,
    )
    return lowered


NOT_THE_LAB_PROTOCOL = (
    "serve the lab with its own HTTP protocol, which bounds connections per client: "
    "uvicorn app.main:app --http app.serving.server:LabProtocol (or python -m app)"
)


def check_protocol() -> None:
    """In the app's lifespan: under uvicorn, the lab starts only on LabProtocol, which holds the per-client
    connection bounds (served with another, one device could hold every connection). uvicorn runs the
    lifespan in a task of its LifespanOn, which holds the server's Config; under any other server (a test
    client, which has no connections) there is nothing to check."""
    coroutine = asyncio.current_task().get_coro()
    frame = getattr(coroutine, "cr_frame", None)
    config = getattr(frame.f_locals.get("self") if frame else None, "config", None)
    if isinstance(config, Config) and not issubclass(config.http_protocol_class, LabProtocol):
        raise SettingsError(NOT_THE_LAB_PROTOCOL)


def server_options(settings: Settings) -> dict:
    """uvicorn.run's options: the lab's protocol, and nothing trusted from X-Forwarded-For by uvicorn."""
    return {
        "http": LabProtocol,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
        "proxy_headers": False,
        "server_header": False,
    }
