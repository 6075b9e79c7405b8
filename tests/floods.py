"""Hostile devices for the tests, over raw sockets on loopback, each from an address of its own (127.x.y.z, a
separate device to the lab's per-client bounds): event streams held open, requests left half-sent
(slowloris), cookies gathered from the lab, and the server process's CPU time."""

import asyncio
import json
import os
import time

import httpx

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far, user and system."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmRSS"].split()[0]) / 1024


def gather_cookies(url: str, address: str, count: int) -> list[str]:
    """`count` lab_client cookies the lab gives one device that asks without one each time (what a device
    can do to pass for many browsers: a cookie it makes up does not verify)."""
    cookies = []
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30) as client:
        for _ in range(count):
            client.cookies.clear()
            cookies.append(client.get(f"{url}/api/health").cookies["lab_client"])
    return cookies


class Held:
    """A connection held open: an event stream being read, or a request left half-sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int | None):
        self.reader, self.writer, self.status = reader, writer, status
        self.events: list[tuple[str, dict]] = []
        self.reading: asyncio.Task | None = None

    async def read_events(self) -> None:
        kind = None
        try:
            while line := await self.reader.readline():
                line = line.decode().rstrip("\r\n")
                if line.startswith("event: "):
                    kind = line[len("event: ") :]
                elif line.startswith("data: "):
                    self.events.append((kind, json.loads(line[len("data: ") :])))
        except (ConnectionError, ValueError):
            pass

    def last(self, kind: str) -> dict | None:
        return next((data for event, data in reversed(self.events) if event == kind), None)

    def close(self) -> None:
        if self.reading is not None:
            self.reading.cancel()
        self.writer.close()


async def connect(port: int, address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(address, 0))


async def stream(port: int, address: str, path: str, cookie: str | None = None) -> Held:
    """GET `path` and keep reading it: an event stream. `status` is the answer's, or None when the lab closed
    the connection before answering; the events come into `events` as they arrive."""
    reader, writer = await connect(port, address)
    cookie_line = f"Cookie: lab_client={cookie}\r\n" if cookie else ""
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: lab\r\nAccept: text/event-stream\r\n{cookie_line}\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
    except (ConnectionError, asyncio.IncompleteReadError):
        return Held(reader, writer, None)
    held = Held(reader, writer, int(head.split()[1]))
    if held.status == 200:
        held.reading = asyncio.ensure_future(held.read_events())
    return held


async def half_sent(port: int, address: str) -> Held:
    """A request whose head is never finished (slowloris); answered() says what became of it."""
    reader, writer = await connect(port, address)
    try:
        writer.write(b"GET /api/health HTTP/1.1\r\nHost: lab\r\nX-Slow: ")
        await writer.drain()
    except ConnectionError:
        pass
    return Held(reader, writer, None)


async def answered(held: Held, wait: float = 0.5) -> int | None:
    """The status a half-sent request was answered with (0: closed without an answer), or None while the lab
    holds its connection open."""
    try:
        data = await asyncio.wait_for(held.reader.read(200), wait)
    except TimeoutError:
        return None
    except ConnectionError:
        return 0
    held.status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
    return held.status


def timed_get(client: httpx.Client, url: str, **kwargs) -> tuple[int, float]:
    start = time.monotonic()
    status = client.get(url, **kwargs).status_code
    return status, time.monotonic() - start


def timed_post(client: httpx.Client, url: str, **kwargs) -> tuple[int, float]:
    start = time.monotonic()
    status = client.post(url, **kwargs).status_code
    return status, time.monotonic() - start
