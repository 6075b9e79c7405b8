"""A stop answers cleanly: `python -m app` told to stop (SIGTERM) while Integrated Gradients at its bound runs
ends that work at its next slice, within the shutdown grace, with a 503 its client may retry elsewhere,
and logs no traceback (issue #45, item 3)."""

import asyncio
import logging
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.main import ended_within
from app.settings import Settings
from tests.conftest import LabProcess, run_async
from tests.floods import cpu_seconds

pytestmark = pytest.mark.slow

GRACE_SECONDS = Settings.model_fields["shutdown_grace_seconds"].default


@pytest.fixture
def lab(tmp_path):
    lab = LabProcess(tmp_path)
    lab.start()
    yield lab
    if lab.process.poll() is None:
        lab.stop()


def test_sigterm_during_integrated_gradients_at_its_bound_answers_503_and_exits_within_the_grace(lab):
    text = " ".join(f"w{n}" for n in range(300))  # read up to 256 tokens: 256 steps at 256 tokens, the bound
    body = {"text": text, "other": "a short sentence", "steps": 256}
    with ThreadPoolExecutor(1) as client:
        before = cpu_seconds(lab.process.pid)
        answer = client.submit(httpx.post, f"{lab.url}/api/attribution", json=body, timeout=60)
        deadline = time.monotonic() + 30
        while cpu_seconds(lab.process.pid) - before < 1.0:  # the IG is under way
            assert time.monotonic() < deadline and not answer.done()
            time.sleep(0.05)
        stopping = time.monotonic()
        lab.process.send_signal(signal.SIGTERM)
        response = answer.result()
    answered = time.monotonic() - stopping
    lab.process.wait(timeout=GRACE_SECONDS + 30)
    exited = time.monotonic() - stopping
    log = lab.log.read_text()
    print(f"answered {response.status_code} {answered:.2f} s after SIGTERM; the process exited after {exited:.2f} s")
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) > 0 and "stopping" in response.json()["detail"]
    assert re.search(r"Integrated Gradients of 256 steps stopped after \d+ slices: the server is stopping", log), log
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log
    assert exited < GRACE_SECONDS


def test_a_close_that_never_ends_holds_the_stop_for_its_bound_and_says_where_it_waited(caplog):
    """A store's close that, cancelled, waits again in its `finally` on a connection that never closes (as one kept a
    replica alive after SIGTERM) is left after its bound, and the log shows the await it was stuck in."""

    async def never_ends():
        try:
            await asyncio.sleep(3600)  # a subscription's read, cancelled by its close
        finally:
            await asyncio.sleep(3600)  # its connection's close, waited on

    async def closing():
        task = asyncio.create_task(never_ends())
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def stop():
        started = time.monotonic()
        await ended_within(0.2, closing(), "closing a store")
        return time.monotonic() - started

    with caplog.at_level(logging.WARNING, logger="uvicorn.error"):
        waited = run_async(stop())
    assert 0.2 <= waited < 2
    said = caplog.records[-1].getMessage()
    assert said.startswith("closing a store took longer than 0.2 s: the lab stops without it")
    assert "in never_ends" in said and "await asyncio.sleep(3600)  # its connection's close" in said
