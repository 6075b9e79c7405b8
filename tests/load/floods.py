"""A class beside hostile devices, for a minute or more: learners on their own addresses analysing and
looking at heads while one device holds 700 class streams and 600 half-sent requests (reopening what the
lab closes), another runs Integrated Gradients at the lab's bound (256 steps at 256 tokens) and leaves
halfway now and then, and 40 devices ask for every block's ALTI of a new 512-token run at once, again and
again. Against 127.0.0.1 only.

    .venv/bin/python -m tests.load.floods --url http://127.0.0.1:8765 --seconds 60 --server-pid PID

(`make load` runs it after the learners' load test.) The suite's short forms are tests/test_client_bounds.py
and tests/test_heavy_work.py."""

import argparse
import asyncio
import json
import multiprocessing
import random
import statistics
import time
from collections import Counter
from urllib.parse import urlparse

import httpx

from tests.floods import gather_cookies, half_sent, rss_mb, stream
from tests.load.learners import percentile

LEARNERS = 10
STREAMS, SLOW = 700, 600  # from the flooding device, as in the suite's test


class Latencies:
    def __init__(self):
        self.seconds: dict[str, list[float]] = {}
        self.statuses: Counter = Counter()

    def add(self, kind: str, status: int | str, seconds: float) -> None:
        self.seconds.setdefault(kind, []).append(seconds)
        self.statuses[f"{kind} {status}"] += 1

    def report(self) -> dict:
        return {
            kind: {
                "count": len(values),
                "p50_ms": round(statistics.median(values) * 1000, 1),
                "p95_ms": round(percentile(values, 0.95) * 1000, 1),
                "max_ms": round(max(values) * 1000, 1),
            }
            for kind, values in self.seconds.items()
        }


async def timed(client: httpx.AsyncClient, tally: Latencies, kind: str, method: str, url: str, **kwargs):
    start = time.monotonic()
    try:
        response = await client.request(method, url, **kwargs)
    except httpx.HTTPError as error:
        tally.add(kind, type(error).__name__, time.monotonic() - start)
        return None
    tally.add(kind, response.status_code, time.monotonic() - start)
    return response


async def learner(url: str, number: int, deadline: float, tally: Latencies) -> None:
    transport = httpx.AsyncHTTPTransport(local_address=f"127.0.2.{number + 1}")
    rng = random.Random(number)
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:
        step = 0
        while time.monotonic() < deadline:
            step += 1
            await timed(client, tally, "health", "GET", f"{url}/api/health")
            text = f"learner {number} asks about the river bank number {step}"
            response = await timed(client, tally, "analyze", "POST", f"{url}/api/analyze", json={"text": text})
            if response is not None and response.status_code == 200:
                run = response.json()["run_id"]
                path = f"{url}/api/runs/{run}/layers/{rng.randrange(6)}/heads/{rng.randrange(12)}"
                await timed(client, tally, "head", "GET", path)
            await asyncio.sleep(rng.uniform(0.2, 1.0))


async def flooder(url: str, port: int, deadline: float, counts: Counter) -> None:
    """700 class streams and 600 half-sent requests from 127.0.0.3, each reopened when the lab ends it."""
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address="127.0.0.3")) as client:
        code = (await client.post(f"{url}/api/classes")).json()["code"]
    cookies = await asyncio.to_thread(gather_cookies, url, "127.0.0.3", STREAMS)

    async def keep_streaming(cookie: str) -> None:
        while time.monotonic() < deadline:
            held = await stream(port, "127.0.0.3", f"/api/classes/{code}/events", cookie)
            counts[f"stream {held.status}"] += 1
            if held.reading is not None:
                await asyncio.wait({held.reading}, timeout=max(0.0, deadline - time.monotonic()))
            held.close()
            await asyncio.sleep(1)

    async def keep_slow() -> None:
        while time.monotonic() < deadline:
            held = await half_sent(port, "127.0.0.3")
            status = None
            while status is None and time.monotonic() < deadline:
                try:
                    data = await asyncio.wait_for(held.reader.read(200), 1)
                    status = int(data.split()[1]) if data.startswith(b"HTTP/1.1 ") else 0
                except TimeoutError:
                    continue
                except ConnectionError:
                    status = 0
            counts[f"slow {status}"] += 1
            held.close()
            await asyncio.sleep(2)

    await asyncio.gather(*(keep_streaming(cookie) for cookie in cookies), *(keep_slow() for _ in range(SLOW)))


async def integrated_gradients(url: str, deadline: float, tally: Latencies) -> None:
    """IG at the bound from 127.0.0.5, one after another; every other one left after 5 s."""
    body = {"text": " ".join(f"w{n}" for n in range(300)), "other": "a short sentence", "steps": 256}
    transport = httpx.AsyncHTTPTransport(local_address="127.0.0.5")
    async with httpx.AsyncClient(transport=transport, timeout=300) as client:
        leave = False
        while time.monotonic() < deadline:
            leave = not leave
            start = time.monotonic()
            try:
                async with asyncio.timeout(5 if leave else max(1.0, deadline - time.monotonic())):
                    response = await client.post(f"{url}/api/attribution", json=body)
                tally.add("ig", response.status_code, time.monotonic() - start)
            except TimeoutError:
                tally.add("ig", "left", time.monotonic() - start)


async def alti_rounds(url: str, deadline: float, tally: Latencies, peak: list[float], pid: int | None) -> None:
    """A new 512-token run, then every block's ALTI of it from 40 addresses at once; again until the end."""
    round_ = 0
    while time.monotonic() < deadline:
        round_ += 1
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.6")
        async with httpx.AsyncClient(transport=transport, timeout=300) as client:
            text = " ".join(f"alti{round_}x{n}" for n in range(600))
            response = await client.post(f"{url}/api/analyze", json={"text": text})
            if response.status_code != 200:
                continue
            run = response.json()["run_id"]

        async def one(n: int, path: str = f"{url}/api/runs/{run}/attention?measure=alti") -> None:
            transport = httpx.AsyncHTTPTransport(local_address=f"127.0.3.{n + 1}")
            async with httpx.AsyncClient(transport=transport, timeout=300) as client:
                await timed(client, tally, "alti", "GET", path)

        await asyncio.gather(*(one(n) for n in range(40)))
        if pid is not None:
            peak[0] = max(peak[0], rss_mb(pid))


async def watch_memory(pid: int | None, deadline: float, peak: list[float]) -> None:
    while pid is not None and time.monotonic() < deadline:
        peak[0] = max(peak[0], rss_mb(pid))
        await asyncio.sleep(0.1)


def hostile(url: str, seconds: float, server_pid: int | None, results: multiprocessing.Queue) -> None:
    """The hostile devices, in a process of their own: their client work does not slow the learners' own."""

    async def all_of_them():
        tally, counts, peak = Latencies(), Counter(), [0.0]
        deadline = time.monotonic() + seconds
        await asyncio.gather(
            flooder(url, urlparse(url).port, deadline, counts),
            integrated_gradients(url, deadline, tally),
            alti_rounds(url, deadline, tally, peak, server_pid),
        )
        results.put({"latencies": tally.report(), "statuses": dict(tally.statuses), "flood": dict(counts)})

    asyncio.run(all_of_them())


async def floods(url: str, seconds: float, server_pid: int | None) -> dict:
    if urlparse(url).hostname not in ("127.0.0.1", "localhost"):
        raise ValueError(f"floods go to this machine's loopback only, not {urlparse(url).hostname}")
    results = multiprocessing.Queue()
    devices = multiprocessing.Process(target=hostile, args=(url, seconds, server_pid, results))
    devices.start()
    await asyncio.sleep(5)  # the floods under way before the learners start (the stream cookies gathered)
    tally, peak = Latencies(), [rss_mb(server_pid) if server_pid else 0.0]
    start = time.monotonic()
    deadline = start + seconds - 5
    await asyncio.gather(
        watch_memory(server_pid, deadline, peak),
        *(learner(url, number, deadline, tally) for number in range(LEARNERS)),
    )
    hostile_report = await asyncio.to_thread(results.get, True, 600)
    devices.join(60)
    return {
        "seconds": seconds,
        "learners": LEARNERS,
        "learners_latencies": tally.report(),
        "learners_statuses": dict(sorted(tally.statuses.items())),
        "hostile_latencies": hostile_report["latencies"],
        "hostile_statuses": dict(sorted(hostile_report["statuses"].items())),
        "flood": dict(sorted(hostile_report["flood"].items(), key=str)),
        "server_peak_rss_mb": round(peak[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--server-pid", type=int, help="to read the server's memory from /proc")
    args = parser.parse_args()
    report = asyncio.run(floods(args.url, args.seconds, args.server_pid))
    print(json.dumps(report, indent=2))
    learners = [report["learners_latencies"].get(kind, {}).get("max_ms", 0) for kind in ("health", "analyze")]
    bad = [status for status in report["learners_statuses"] if "200" not in status]
    raise SystemExit(1 if max(learners) > 2000 or bad else 0)


if __name__ == "__main__":
    main()
