"""Devices of a live class for the tests, over real sockets: each its own loopback address (127.x.y.z, a
separate device to the lab's per-client bounds) and cookie jar (a browser), and event streams read on a
thread the way a browser's EventSource reads them (reconnecting, if asked, after the stream ends)."""

import json
import threading
import time

import httpx


def device(address: str, **options) -> httpx.Client:
    """A browser on its own address: the lab's lab_client cookie is kept from its first answer on."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30, **options)


class Listener:
    """A class's event stream: (event, data, monotonic time) for every event received. `reconnect`: open it
    again after it ends without "ended", as an EventSource does (the `retry` the stream asked for)."""

    def __init__(self, url: str, address: str = "127.0.0.1", headers=None, cookies=None, reconnect=False):
        self.url = url
        self.events: list[tuple[str, dict, float]] = []
        self.statuses: list[int] = []
        self.streams_ended = 0
        self.ready = threading.Event()
        self.closed = threading.Event()  # ended for good ("ended", or a stream ended with reconnect off)
        self._stop = threading.Event()
        self._client = device(address, headers=headers, cookies=cookies)
        self._client.timeout = httpx.Timeout(30, read=None)
        self._reconnect = reconnect
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float = 15) -> "Listener":
        assert self.ready.wait(timeout), f"the stream did not open: {self.statuses}"
        return self

    def _read(self):
        retry = 1.0
        try:
            while not self._stop.is_set():
                ended = False
                try:
                    with self._client.stream("GET", self.url) as response:
                        self.statuses.append(response.status_code)
                        if response.status_code != 200:
                            response.read()
                            self.refusal = response
                            return
                        assert response.headers["content-type"].startswith("text/event-stream")
                        kind = None
                        for line in response.iter_lines():
                            if line.startswith("retry: "):
                                retry = int(line[len("retry: ") :]) / 1000
                            elif line.startswith("event: "):
                                kind = line[len("event: ") :]
                            elif line.startswith("data: "):
                                self.events.append((kind, json.loads(line[len("data: ") :]), time.monotonic()))
                                self.ready.set()
                                ended = ended or kind == "ended"
                except Exception:
                    if self._stop.is_set():  # closed by the test: the client went away under the read
                        return
                    if not self._reconnect:
                        raise
                self.streams_ended += 1
                if ended or not self._reconnect:
                    return
                time.sleep(retry)
        finally:
            self.closed.set()

    def of(self, kind: str) -> list[dict]:
        return [data for event, data, _ in list(self.events) if event == kind]

    def wait_for(self, kind: str, timeout: float = 5, where=lambda data: True) -> tuple[dict, float]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event, data, at in list(self.events):
                if event == kind and where(data):
                    return data, at
            time.sleep(0.02)
        raise AssertionError(f"no {kind} event in {timeout} s: {self.events}")

    def close(self):
        self._stop.set()
        self._client.close()


def start_class(client: httpx.Client, url: str) -> tuple[str, dict]:
    """A new class from this device: its code and the teacher's header."""
    response = client.post(f"{url}/api/classes")
    assert response.status_code == 201, response.text
    started = response.json()
    return started["code"], {"X-Class-Secret": started["secret"]}
