"""Heavy work takes turns in slices and stops when nobody waits: Integrated Gradients at the lab's bound beside
a learner, the same IG called off when its client leaves, and 40 ALTI requests at once within the memory
bound. Against `python -m app` as an operator starts it (MiniLM, default settings), real sockets on
loopback, each device from an address of its own."""

import asyncio
import json
import math
import re
import socket
import threading
import time

import httpx
import pytest

from app.engine.attribution import steps_per_slice
from tests.class_client import device
from tests.conftest import LabProcess, run_async
from tests.floods import cpu_seconds, rss_mb

pytestmark = pytest.mark.slow

MEMORY_CAP_MB = (2 + 1.5) * 1024  # ATTENTION_LAB_MAX_STORE_BYTES (2 GiB) + 1.5 GiB, the README's cap


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab = LabProcess(tmp_path_factory.mktemp("heavy"), fresh=True)  # its peak RSS is measured
    lab.start()
    yield lab
    lab.stop()


def words(seed: str, count: int) -> str:
    return " ".join(f"{seed}{n}" for n in range(count))


def idle_after(pid: int, start: float, quiet: float = 0.5, share: float = 0.15, timeout: float = 30) -> float:
    """Seconds from `start` until the process used less than `share` of a core over `quiet` seconds."""
    samples = [(time.monotonic(), cpu_seconds(pid))]
    while time.monotonic() - start < timeout:
        time.sleep(0.05)
        samples.append((time.monotonic(), cpu_seconds(pid)))
        window = [(at, cpu) for at, cpu in samples if at >= samples[-1][0] - quiet]
        (first_at, first_cpu), (last_at, last_cpu) = window[0], window[-1]
        if last_at - first_at >= quiet * 0.9 and (last_cpu - first_cpu) / (last_at - first_at) < share:
            return first_at - start
    raise AssertionError(f"the server was still busy {timeout} s after its client left")


def test_integrated_gradients_at_its_bound_takes_turns_and_stops_when_its_client_leaves(lab):
    """256 steps at 256 tokens (65,536, the bound) from 127.0.0.3: a learner at 127.0.0.2 is answered within
    2 s meanwhile, every time; then the IG's client closes its connection, the IG is called off (the lab logs
    it, with the slices it had done: it was under way) and the server is idle again within about one slice."""
    body = json.dumps({"text": words("w", 300), "other": "a short sentence", "steps": 256}).encode()
    ig = socket.create_connection(("127.0.0.1", lab.port), source_address=("127.0.0.3", 0))
    before = cpu_seconds(lab.process.pid)
    ig.sendall(
        b"POST /api/attribution HTTP/1.1\r\nHost: lab\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    try:
        deadline = time.monotonic() + 30
        while cpu_seconds(lab.process.pid) - before < 1.0:  # the IG is under way
            assert time.monotonic() < deadline
            time.sleep(0.05)
        waits = []
        with device("127.0.0.2") as learner:
            for n in range(5):
                start = time.monotonic()
                response = learner.post(f"{lab.url}/api/analyze", json={"text": words(f"learner{n}x", 20)})
                waits.append(time.monotonic() - start)
                assert response.status_code == 200, response.text
        ig.setblocking(False)
        with pytest.raises(BlockingIOError):
            ig.recv(1)  # no answer yet: it was still computing all along
    finally:
        left = time.monotonic()
        ig.close()
    stopped = idle_after(lab.process.pid, left)
    log = lab.log.read_text()
    (called_off,) = re.findall(r"Integrated Gradients of 256 steps called off after (\d+) slices", log)
    slices = 1 + math.ceil(256 / steps_per_slice(256))  # the path's two ends, then the steps
    print(
        f"learner's analyze beside IG: {[round(w, 3) for w in waits]} s; IG called off after "
        f"{called_off} of {slices} slices, the server idle {stopped:.2f} s after its client left"
    )
    assert max(waits) < 2
    assert 0 < int(called_off) < slices  # under way when its client left, and not finished
    assert stopped < 1.5
    assert "Traceback" not in log


def test_forty_alti_requests_at_once_are_one_computation_within_the_memory_bound(lab):
    """Every block's ALTI of one 512-token run asked for by 40 devices at once: computed once, in slices,
    kept; the lab's memory stays under its cap, and a learner's analyze answers within 2 s meanwhile."""
    with device("127.0.0.4") as teacher:
        run = teacher.post(f"{lab.url}/api/analyze", json={"text": words("alti", 600)}).json()["run_id"]
    path = f"/api/runs/{run}/attention?measure=alti"
    before = rss_mb(lab.process.pid)
    peak = [before]
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            peak[0] = max(peak[0], rss_mb(lab.process.pid))
            time.sleep(0.02)

    async def forty() -> list[httpx.Response]:
        async def one(n: int) -> httpx.Response:
            transport = httpx.AsyncHTTPTransport(local_address=f"127.0.3.{n + 1}")
            async with httpx.AsyncClient(transport=transport, timeout=120) as client:
                return await client.get(f"{lab.url}{path}")

        return await asyncio.gather(*(one(n) for n in range(40)))

    sampler = threading.Thread(target=sample)
    sampler.start()
    answers = {}
    asking = threading.Thread(target=lambda: answers.update(all=run_async(forty())))
    started = time.monotonic()
    asking.start()
    try:
        waits = []
        with device("127.0.0.2") as learner:
            while asking.is_alive() and len(waits) < 5:
                start = time.monotonic()
                response = learner.post(f"{lab.url}/api/analyze", json={"text": words(f"beside{len(waits)}x", 20)})
                waits.append(time.monotonic() - start)
                assert response.status_code == 200, response.text
        asking.join(120)
        took = time.monotonic() - started
    finally:
        sampling.set()
        sampler.join()
    responses = answers["all"]
    assert {response.status_code for response in responses} == {200}
    assert len({response.content for response in responses}) == 1
    with device("127.0.0.4") as teacher:
        start = time.monotonic()
        assert teacher.get(f"{lab.url}{path}").content == responses[0].content
        again = time.monotonic() - start
    print(
        f"40 ALTI requests: {took:.1f} s, RSS {before:.0f} -> peak {peak[0]:.0f} MB (cap {MEMORY_CAP_MB:.0f}); "
        f"kept: {again * 1000:.0f} ms; learner's analyze beside them: {[round(w, 3) for w in waits]} s"
    )
    assert peak[0] < MEMORY_CAP_MB
    assert waits and max(waits) < 2
    assert again < 1  # kept, not computed again
