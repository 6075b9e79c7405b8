"""A classroom at once: simulated learners analysing prompts and exploring heads, against 127.0.0.1 only.

Long form, for the README's figures:  .venv/bin/python -m tests.load.learners --learners 50 --seconds 60
(`make load` starts a lab, runs this against it and stops the lab). The test suite runs a short form.
"""

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlparse

import httpx

DEFAULT_PROMPT = "The animal didn't cross the street because it was too tired"
MAX_REQUESTS_PER_LEARNER = 2_000  # a bound besides the clock


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=dict)  # request kind -> seconds
    statuses: Counter = field(default_factory=Counter)
    failures: Counter = field(default_factory=Counter)  # transport errors by type

    def record(self, kind: str, status: int, seconds: float) -> None:
        self.latencies.setdefault(kind, []).append(seconds)
        self.statuses[status] += 1


def own_prompt(learner: int, step: int) -> str:
    return f"Learner {learner} wonders whether the bank by the river number {step} is open on Sunday"


async def learner(client: httpx.AsyncClient, number: int, deadline: float, tally: Tally, rng: random.Random):
    """Open the page (which gives the browser its lab_client cookie), then analyse a prompt (most of a
    class types the default one), look at a few heads, think, repeat."""
    await timed(client, tally, "page", "GET", "/")
    for step in range(MAX_REQUESTS_PER_LEARNER):
        if time.monotonic() >= deadline:
            return
        text = DEFAULT_PROMPT if rng.random() < 0.6 else own_prompt(number, step)
        response = await timed(client, tally, "analyze", "POST", "/api/analyze", json={"text": text})
        if response is None:
            continue
        if response.status_code in (429, 503):
            await asyncio.sleep(
                min(float(response.headers.get("Retry-After", 1)), max(0.0, deadline - time.monotonic()))
            )
            continue
        if response.status_code != 200:
            continue
        run = response.json()
        n = len(run["tokens"])
        await timed(client, tally, "overview", "GET", f"/api/runs/{run['run_id']}/attention", params={"size": 64})
        for _ in range(3):
            layer, head, query = rng.randrange(6), rng.randrange(12), rng.randrange(n)
            path = f"/api/runs/{run['run_id']}/layers/{layer}/heads/{head}/queries/{query}"
            await timed(client, tally, "head", "GET", path)
        await asyncio.sleep(rng.uniform(0.2, 1.0))  # reading what came back


async def timed(client, tally: Tally, kind: str, method: str, path: str, **kwargs) -> httpx.Response | None:
    start = time.monotonic()
    try:
        response = await client.request(method, path, **kwargs)
    except httpx.HTTPError as error:
        tally.failures[type(error).__name__] += 1
        return None
    tally.record(kind, response.status_code, time.monotonic() - start)
    return response


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def peak_rss_mb(pid: int | None) -> float | None:
    if pid is None:
        return None
    with open(f"/proc/{pid}/status") as status:
        fields = dict(line.split(":", 1) for line in status)
    return int(fields["VmHWM"].split()[0]) / 1024


async def simulate(base_url: str, learners: int, seconds: float, server_pid: int | None = None, seed: int = 0) -> dict:
    host = urlparse(base_url).hostname
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"load goes to this machine's loopback only, not {host}")
    tally = Tally()
    # Each learner is a browser of its own, with its own connection and its own lab_client cookie.
    clients = [httpx.AsyncClient(base_url=base_url, timeout=60) for _ in range(learners)]
    try:
        start = time.monotonic()
        deadline = start + seconds
        rng = random.Random(seed)
        await asyncio.gather(
            *(
                learner(client, number, deadline, tally, random.Random(rng.random()))
                for number, client in enumerate(clients)
            )
        )
        elapsed = time.monotonic() - start
    finally:
        await asyncio.gather(*(client.aclose() for client in clients))
    every = [seconds for values in tally.latencies.values() for seconds in values]
    return {
        "learners": learners,
        "seconds": round(elapsed, 1),
        "requests": len(every),
        "throughput_per_s": round(len(every) / elapsed, 1),
        "p50_ms": round(percentile(every, 0.5) * 1000, 1),
        "p95_ms": round(percentile(every, 0.95) * 1000, 1),
        "by_kind": {
            kind: {
                "count": len(values),
                "p50_ms": round(statistics.median(values) * 1000, 1),
                "p95_ms": round(percentile(values, 0.95) * 1000, 1),
            }
            for kind, values in tally.latencies.items()
        },
        "statuses": dict(sorted(tally.statuses.items())),
        "server_errors_other_than_503": sum(
            n for status, n in tally.statuses.items() if status >= 500 and status != 503
        ),
        "refused_429": tally.statuses.get(429, 0),
        "transport_failures": dict(tally.failures),
        "peak_rss_mb": peak_rss_mb(server_pid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--learners", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--server-pid", type=int, help="to read the server's peak RSS from /proc")
    args = parser.parse_args()
    report = asyncio.run(simulate(args.url, args.learners, args.seconds, args.server_pid))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
