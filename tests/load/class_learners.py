"""A live class under load: one teacher moving the view every second, N learners on event streams, each
from a loopback address of its own (a device of its own to the lab's per-client bounds), against this
machine only. Each change carries its send time; every learner must receive every change.

Long form, for the README's figures:  .venv/bin/python -m tests.load.class_learners --learners 200 --seconds 60
(`make class-load` starts a lab, runs this against it and stops the lab). The test suite runs a short form.
"""

import argparse
import asyncio
import json
import time
from urllib.parse import urlparse

import httpx

from tests.load.learners import peak_rss_mb, percentile


def learner_address(n: int) -> str:
    """Learner n's own loopback address: each learner is a device of its own to the lab's per-client bounds."""
    return f"127.1.{n // 250}.{n % 250 + 1}"


async def listen(base_url: str, n: int, code: str, arrivals: dict[int, float], ready: asyncio.Event, failures: list):
    transport = httpx.AsyncHTTPTransport(local_address=learner_address(n))
    timeout = httpx.Timeout(30, read=None)
    try:
        async with (
            httpx.AsyncClient(base_url=base_url, transport=transport, timeout=timeout) as client,
            client.stream("GET", f"/api/classes/{code}/events") as response,
        ):
            kind = None
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    if kind == "snapshot":
                        ready.set()
                    elif kind == "view":
                        view = json.loads(line[6:])["view"]
                        arrivals[view["seq"]] = time.time() - view["sent"]
    except (httpx.HTTPError, asyncio.CancelledError) as error:
        if not isinstance(error, asyncio.CancelledError):
            failures.append(type(error).__name__)


async def simulate(base_url: str, learners: int, seconds: float, server_pid: int | None = None) -> dict:
    if urlparse(base_url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError("load goes to this machine's loopback only")
    async with httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(30, read=None)) as teacher:
        started = (await teacher.post("/api/classes")).json()
        code, secret = started["code"], {"X-Class-Secret": started["secret"]}
        arrivals = [{} for _ in range(learners)]
        readies = [asyncio.Event() for _ in range(learners)]
        failures: list[str] = []
        tasks = [
            asyncio.create_task(listen(base_url, n, code, arrivals[n], readies[n], failures)) for n in range(learners)
        ]
        await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in readies)), 60)
        rss_before = peak_rss_mb(server_pid)
        sent = 0
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            view = {"layer": sent % 6, "head": sent % 12, "token": sent % 9, "seq": sent, "sent": time.time()}
            response = await teacher.put(f"/api/classes/{code}/view", json={"view": view}, headers=secret)
            assert response.status_code == 204, response.text
            sent += 1
            await asyncio.sleep(max(0.0, start + sent - time.monotonic()))
        await asyncio.sleep(2)  # the last change's deliveries
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await teacher.delete(f"/api/classes/{code}", headers=secret)
    delays = [delay for received in arrivals for delay in received.values()]
    return {
        "learners": learners,
        "changes_sent": sent,
        "deliveries": len(delays),
        "missed": sent * learners - len(delays),
        "p50_ms": round(percentile(delays, 0.5) * 1000, 1),
        "p95_ms": round(percentile(delays, 0.95) * 1000, 1),
        "max_ms": round(max(delays, default=float("nan")) * 1000, 1),
        "connection_errors": len(failures),
        "peak_rss_mb_before": rss_before,
        "peak_rss_mb": peak_rss_mb(server_pid),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--learners", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--server-pid", type=int, help="to read the server's peak RSS from /proc")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(simulate(args.url, args.learners, args.seconds, args.server_pid)), indent=2))


if __name__ == "__main__":
    main()
