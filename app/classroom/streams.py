"""The class event streams this process holds: one subscription to every class's channel, fanned out to
the streams of each class; bounds on the streams one client may hold; and the end of streams, each for a
reason the page can act on.

A stream ends:
- with "ended" when its class ends (the teacher ended it, it expired, the teacher has been away too long);
- with "closing" when this server stops (SIGTERM): the page reconnects, to another worker or to this one
  when it is back (with Redis, the class lives on; in memory it ended with the process, so "ended");
- with no event when the subscription broke or the stream fell behind: something may have been missed,
  so the browser's EventSource reconnects and takes a fresh snapshot. Nothing is lost silently.

A client is its address and, within it, its browser (its lab_client cookie): a browser holds at most
`per_browser` streams, and an address (learners behind one NAT, or one device minting cookies) at most
`per_address`. The counts are this process's: each worker bounds its own streams."""

import asyncio
import logging
import signal
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from app.classroom.backends import StoreDown, SubscriptionLost

CHANNEL = "lab:class-events:"  # + the class's code
QUEUE_BOUND = 256  # events a stream may be behind before it is ended (a stalled phone reconnects fresh)
READY_SECONDS = 5.0  # a new stream waits this long for the subscription before it is refused (503)
RENEW_SECONDS = (0.1, 2.0)  # the first and the longest wait before a broken subscription is renewed
log = logging.getLogger("uvicorn.error")


class TooManyStreams(RuntimeError):
    """This client holds as many class streams as it may (429); others are unaffected."""


class EventsDown(StoreDown):
    """The class events are not reaching this server (503)."""


@dataclass(frozen=True)
class End:
    """Why a stream ends: an event to send last ("ended", "closing"), or None to just end."""

    kind: str | None
    reason: str = ""


@dataclass(eq=False)
class Stream:
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(QUEUE_BOUND + 1))  # room for the End

    def put(self, item) -> None:
        if self.queue.full():
            return  # already ended: the End is in the queue
        if self.queue.qsize() == QUEUE_BOUND and not isinstance(item, End):
            item = End(None, "this stream fell behind")
        self.queue.put_nowait(item)

    async def next(self, timeout: float):
        """The next message (the JSON of an event) or End; None after `timeout` seconds with nothing to send."""
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None


class Streams:
    def __init__(self, backend, per_browser: int, per_address: int, classes_end_with_process: bool):
        self.backend = backend
        self.per_browser = per_browser
        self.per_address = per_address
        # A class in this process's memory ends when the process stops; one in Redis lives on.
        self.stop_event = (
            End("ended", "the lab stopped")
            if classes_end_with_process
            else End("closing", "this server is stopping: reconnecting")
        )
        self._streams: dict[str, set[Stream]] = {}  # code -> this process's streams of that class
        self._browsers: dict[tuple[str, str], int] = {}  # (address, browser) -> streams held
        self._addresses: dict[str, int] = {}
        self._ready = asyncio.Event()  # the subscription is live: a stream opened now misses nothing
        self.stopping = asyncio.Event()
        self._listening: asyncio.Task | None = None

    def start(self) -> None:
        self._listening = asyncio.create_task(self._listen())
        stop_on_signals(self.stop)

    async def close(self) -> None:
        if self._listening is not None:
            self._listening.cancel()
            await asyncio.gather(self._listening, return_exceptions=True)

    def codes(self) -> list[str]:
        """The classes this process holds streams of."""
        return list(self._streams)

    async def _listen(self) -> None:
        wait, problem = RENEW_SECONDS[0], None
        while True:
            try:
                async with self.backend.subscription(CHANNEL) as messages:
                    self._ready.set()
                    if problem is not None:
                        log.info("Class events flow again (the subscription was renewed)")
                    wait, problem = RENEW_SECONDS[0], None
                    async for channel, message in messages:
                        self._dispatch(channel.removeprefix(CHANNEL), message)
            except (SubscriptionLost, StoreDown) as error:
                if problem is None:  # one line per outage, not one per attempt
                    log.warning("Class events: %s; renewing the subscription, open class streams reconnect", error)
                problem = error
            except Exception as error:  # never left without a subscription, whatever broke it
                log.exception("Class events: the subscription failed; renewing it")
                problem = error
            self._ready.clear()
            self.end_all(End(None, "the class events were interrupted"))
            await asyncio.sleep(wait)
            wait = min(wait * 2, RENEW_SECONDS[1])

    def _dispatch(self, code: str, message: str) -> None:
        for stream in self._streams.get(code, ()):
            stream.put(message)

    def end(self, code: str, end: End) -> None:
        for stream in self._streams.get(code, ()):
            stream.put(end)

    def end_all(self, end: End) -> None:
        for code in list(self._streams):
            self.end(code, end)

    def stop(self) -> None:
        """The server is stopping: every stream sends its last event and ends, so that the server's graceful
        shutdown finds no request under way to cut (and logs no traceback)."""
        self.stopping.set()
        self.end_all(self.stop_event)

    async def publish(self, code: str, message: str) -> None:
        await self.backend.publish(CHANNEL + code, message)

    @asynccontextmanager
    async def open(self, code: str, address: str, browser: str) -> AsyncIterator[Stream]:
        """A stream of the class's events from now on, once this client may hold one more."""
        if self.stopping.is_set():
            raise EventsDown("this server is stopping: try again in a moment")
        if self._browsers.get((address, browser), 0) >= self.per_browser:
            raise TooManyStreams(f"this browser already follows {self.per_browser} class streams: close a tab")
        if self._addresses.get(address, 0) >= self.per_address:
            raise TooManyStreams(f"this address already holds {self.per_address} class streams")
        # Counted before the first wait, so that streams opened at the same moment cannot all pass the check.
        self._browsers[address, browser] = self._browsers.get((address, browser), 0) + 1
        self._addresses[address] = self._addresses.get(address, 0) + 1
        stream = Stream()
        try:
            try:
                await asyncio.wait_for(self._ready.wait(), READY_SECONDS)
            except TimeoutError:
                raise EventsDown(
                    f"the class events ({self.backend.name}) are not reaching this server: try again in a moment"
                ) from None
            self._streams.setdefault(code, set()).add(stream)
            yield stream
        finally:
            if stream in self._streams.get(code, ()):
                self._streams[code].discard(stream)
                if not self._streams[code]:
                    del self._streams[code]
            for counts, key in ((self._browsers, (address, browser)), (self._addresses, address)):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]


def stop_on_signals(callback) -> None:
    """Calls `callback` on the event loop when the process is told to stop (SIGTERM, SIGINT), before the
    handler already in place (uvicorn's, which starts the graceful shutdown). Only the main thread can set
    signal handlers; elsewhere (a test client's thread) there is nothing to chain."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(number)

        def handler(signum, frame, previous=previous):
            loop.call_soon_threadsafe(callback)
            if callable(previous):
                previous(signum, frame)

        signal.signal(number, handler)
