"""A serving process gives its cores to the model's passes and one core to every other thread
(app.engine.threads): more OpenMP threads than cores make all of them sleep between operations."""

import asyncio
import threading

import pytest
import torch
from fastapi.testclient import TestClient

from app.engine.threads import CORES, ModelThreads
from app.main import create_app
from tests.conftest import run_async

pytestmark = pytest.mark.skipif(CORES == 1, reason="torch has one core here: nothing to tell apart")


def on_a_new_thread(work):
    found = []
    thread = threading.Thread(target=lambda: found.append(work()))
    thread.start()
    thread.join()
    return found[0]


def test_while_a_lab_serves_its_passes_have_every_core_and_every_other_thread_one(tiny):
    before = on_a_new_thread(torch.get_num_threads)
    seen = []
    with TestClient(create_app(tiny)) as client:
        handle = tiny.model.register_forward_pre_hook(lambda module, args: seen.append(torch.get_num_threads()))
        try:
            assert client.post("/api/analyze", json={"text": "the river bank was steep"}).status_code == 200
            attribution = {"text": "the river bank", "other": "a shore"}
            assert client.post("/api/attribution", json=attribution).status_code == 200
        finally:
            handle.remove()
        elsewhere = on_a_new_thread(torch.get_num_threads)
    assert seen and set(seen) == {CORES}  # the pass, and attribution's passes
    assert elsewhere == 1
    assert on_a_new_thread(torch.get_num_threads) == before  # a stopped lab gives the threads back


def test_passes_that_may_run_at_once_share_the_cores():
    threads = ModelThreads(CORES)
    try:
        counts = run_async(asyncio.wait_for(gather_counts(threads, CORES), 30))
    finally:
        threads.close()
    assert counts == [1] * CORES


async def gather_counts(threads: ModelThreads, n: int) -> list[int]:
    arrived = threading.Barrier(n)  # every thread of the pool at once, so that each answers for itself

    def count() -> int:
        arrived.wait()
        return torch.get_num_threads()

    return await asyncio.gather(*(threads.run(count) for _ in range(n)))
