"""The HTTP server `python -m app` runs: uvicorn with its httptools parser and the lab's limits.

The request line and headers together may take max_header_bytes: past that a request is refused at once
with 431 and nothing more of it is read (the protocol below holds at most that much of an unfinished
head; httptools itself bounds none). uvicorn bounds idle keep-alive and the connections of a process (503
past max_connections). What uvicorn does not bound is a request that is sent slowly, or half sent and then
left: the protocol below gives each request request_timeout_seconds to arrive whole, then answers 408 and
closes the connection.

httptools rather than h11, which reads and writes HTTP in Python: with servers alternating, `make load`
answered 312 requests/s against 297, and a class burst took 550 ms against 596."""

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import Settings, get_settings

TOO_LARGE = (
    "The request's address or headers are larger than the lab accepts ({limit:,} bytes). "
    "A link to the lab keeps its text after the # sign, which is not sent to the server: "
    "ask for a new link with the page's Copy link button, or open the lab and paste the text."
)
TOO_SLOW = "The request did not arrive whole within {seconds:g} s."
HEAD_END = b"\r\n\r\n"


class LabProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a deadline for each request to arrive and plain answers past a
    limit."""

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        settings = get_settings()
        self.request_timeout_seconds = settings.request_timeout_seconds
        self.max_header_bytes = settings.max_header_bytes
        self._request_deadline: asyncio.TimerHandle | None = None
        self._head: bytes | None = b""  # what has arrived of the request head being read; None in a body

    def data_received(self, data: bytes) -> None:
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

    def on_message_complete(self) -> None:
        self._stop_deadline()
        self._head = b""  # the next request on this connection begins with its head
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._stop_deadline()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        super().connection_lost(exc)

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
        self.transport.write(head.encode() + body)
        self.transport.close()


def server_options(settings: Settings) -> dict:
    """uvicorn.run's options for the lab's limits."""
    return {
        "http": LabProtocol,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "limit_concurrency": settings.max_connections,
        "timeout_graceful_shutdown": settings.shutdown_grace_seconds,
        "server_header": False,
    }
