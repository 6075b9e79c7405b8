"""Admission, overload and faults through the real HTTP app."""

import asyncio
import threading
import time

import pytest
from fastapi.testclient import TestClient

import app.serving.gate
from app.main import create_app
from app.serving.gate import Busy, Client, PassGate, Rotation, Stopping
from app.settings import get_settings
from tests.conftest import make_lab, run_async


def test_gate_admits_queues_and_refuses():
    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=1, max_waiting_per_client=4, max_wait_seconds=5)
        release = asyncio.Event()
        order = []

        async def request(name):
            async with gate.admit():
                order.append(name)
                await release.wait()

        first = asyncio.create_task(request("first"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(request("second"))  # waits for the one pass
        await asyncio.sleep(0.01)
        with pytest.raises(Busy) as refused:
            async with gate.admit():
                pass
        assert refused.value.retry_after > 0
        release.set()
        await asyncio.gather(first, second)
        assert order == ["first", "second"] and gate.waiting == 0

    run_async(scenario())


def test_gate_gives_up_after_the_longest_wait():
    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=5, max_waiting_per_client=4, max_wait_seconds=0.05)
        async with gate.admit():
            with pytest.raises(Busy, match="waited"):
                async with gate.admit():
                    pass
        async with gate.admit():  # free again
            pass

    run_async(scenario())


def test_turns_go_round_the_keys_and_the_tiers_ahead_of_the_round_go_first():
    turns = Rotation(tiers=2)
    for key in "ABC":
        for number in range(2):
            turns.append((key,), f"{key}{number}")
    assert [turns.popleft() for _ in range(3)] == ["A0", "B0", "C0"]
    turns.append(("A",), "A2")  # into the round, behind B and C, whose second items wait
    turns.append(("H",), "H0", tier=1)  # rested, heavy work's first slice
    turns.append(("L",), "L0", tier=0)  # rested, a short pass
    turns.append(("M",), "M0", tier=0)
    turns.append(("L",), "L1", tier=1)  # L waits already: behind its own first, wherever asked
    assert turns.peek() == "L0" and turns.count(("L",)) == 2
    # Ahead of the round first, the round every other turn while both wait.
    assert [turns.popleft() for _ in range(8)] == ["L0", "A1", "M0", "B1", "H0", "C1", "L1", "A2"]
    assert len(turns) == 0


def test_a_steady_stream_of_newcomers_never_holds_the_round_back():
    turns, served = Rotation(tiers=2), []
    turns.append(("heavy",), "heavy")
    for number in range(10):
        turns.append((f"learner{number}",), f"learner{number}", tier=0)
        served.append(turns.popleft())
        if served[-1] == "heavy":
            turns.append(("heavy",), "heavy")  # its next slice, asked as this one ends
    assert served == [name for number in range(5) for name in (f"learner{number}", "heavy")]


def test_a_learner_waits_one_turn_beside_a_crowd_of_heavy_work(monkeypatch):
    """Twenty addresses each run heavy work a slice a turn, asking for the next turn as the last one ends; a
    learner who asks meanwhile, now and then, gets the next turn each time, not a turn after every one of
    theirs (that wait grew with the crowd: 1.4-1.7 s, every time, beside 24 Integrated Gradients)."""
    monkeypatch.setattr(app.serving.gate, "REST_SECONDS", 0.01)

    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=64, max_waiting_per_client=4, max_wait_seconds=5)
        order, asked = [], []
        crowd_started = asyncio.Event()

        async def heavy(number):
            for _ in range(8):
                async with gate.admit(Client(f"10.0.0.{number}")):
                    order.append(number)
                    if len(order) == 30:
                        crowd_started.set()
                    await asyncio.sleep(0.001)

        async def learner():
            await crowd_started.wait()
            for _ in range(2):
                asked.append(len(order))
                async with gate.admit(Client("10.0.9.9"), short=True):
                    order.append("learner")
                await asyncio.sleep(0.02)  # reading the answer: longer than REST_SECONDS

        await asyncio.gather(*(heavy(number) for number in range(20)), learner())
        return order, asked

    order, asked = run_async(scenario())
    served = [index for index, who in enumerate(order) if who == "learner"]
    assert [at - when for at, when in zip(served, asked, strict=True)] in ([0, 0], [0, 1], [1, 0], [1, 1])


def test_a_short_pass_goes_before_the_first_slices_of_heavy_work_asked_for_at_once():
    """Twenty addresses ask for heavy work at the same moment, each new to the gate; a learner's short pass asked
    just after them waits for the slice under way only."""

    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=64, max_waiting_per_client=4, max_wait_seconds=5)
        order = []
        release = asyncio.Event()

        async def request(client, name, short=False):
            async with gate.admit(client, short=short):
                order.append(name)
                await release.wait()

        tasks = [asyncio.create_task(request(Client(f"10.0.0.{n}"), f"heavy{n}")) for n in range(20)]
        while gate.waiting < 19:
            await asyncio.sleep(0)
        tasks.append(asyncio.create_task(request(Client("10.0.9.9"), "learner", short=True)))
        while gate.waiting < 20:
            await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*tasks)
        return order

    order = run_async(scenario())
    assert order[:3] == ["heavy0", "learner", "heavy1"]


def test_a_stopping_gate_tells_the_waiting_and_every_later_request_to_come_back():
    """SIGTERM calls stop(): the pass under way ends as it would, those waiting for one are answered at once,
    and so is each slice of heavy work that asks for its next turn."""

    async def scenario():
        gate = PassGate(max_passes=1, max_waiting=5, max_waiting_per_client=4, max_wait_seconds=5)

        async def request(address):
            async with gate.admit(Client(address)):
                pass

        async with gate.admit():
            waiting = [asyncio.create_task(request(address)) for address in ("10.0.0.1", "10.0.0.2")]
            while gate.waiting < 2:
                await asyncio.sleep(0)
            gate.stop()
            for task in waiting:
                with pytest.raises(Stopping):
                    await task
            assert gate.waiting == 0
        with pytest.raises(Stopping) as refused:
            await request("10.0.0.3")
        assert refused.value.retry_after > 0 and gate.running == 0

    run_async(scenario())


@pytest.fixture
def slow_client(monkeypatch, tiny):
    """The tiny model behind a gate of one pass and no waiting room; passes block until released."""
    monkeypatch.setenv("ATTENTION_LAB_MAX_WAITING", "0")
    get_settings.cache_clear()
    release = threading.Event()
    with TestClient(create_app(tiny)) as client:
        lab = client.app.state.lab
        real_forward = lab.engine._forward

        def slow_forward(*args):
            release.wait(10)
            return real_forward(*args)

        monkeypatch.setattr(lab.engine, "_forward", slow_forward)
        yield client, release
    get_settings.cache_clear()


def test_a_client_leaving_as_its_pass_ends_is_let_go_without_an_error(tiny, tmp_path):
    """A request cancelled (its client left) after its pass ended and before it was given the run: it ends as
    cancelled, and the run is kept for whoever asks next. (Over HTTP the lab logged `KeyError: <run_id>`.)"""
    lab = make_lab(tiny, tmp_path)

    async def scenario():
        spec = lab.spec("a client who leaves as its pass ends")
        asking = asyncio.ensure_future(lab.serve_spec(spec, Client("10.0.0.1")))
        while not lab.gate.running:  # its pass has its turn
            await asyncio.sleep(0)
        while lab.gate.running:  # and has ended: the run is on its way to the request
            await asyncio.sleep(0)
        asking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asking
        assert (await lab.serve_spec(spec)).run_id == spec.run_id

    run_async(scenario())


def test_a_full_queue_answers_503_with_retry_after_and_health_stays_up(slow_client):
    client, release = slow_client
    answers = []
    first = threading.Thread(target=lambda: answers.append(client.post("/api/analyze", json={"text": "first"})))
    first.start()
    deadline = time.monotonic() + 10
    while not client.app.state.lab.gate.running and time.monotonic() < deadline:
        time.sleep(0.01)
    refused = client.post("/api/analyze", json={"text": "second"})
    assert refused.status_code == 503
    assert int(refused.headers["Retry-After"]) > 0 and "try again" in refused.json()["detail"]
    assert client.get("/api/health").status_code == 200
    assert client.get("/").status_code == 200
    assert client.get("/static/lab.css").status_code == 200
    release.set()
    first.join(10)
    assert answers[0].status_code == 200
    assert client.post("/api/analyze", json={"text": "second"}).status_code == 200


def test_a_forward_pass_that_raises_fails_only_its_request(monkeypatch, tiny):
    with TestClient(create_app(tiny)) as client:
        lab = client.app.state.lab
        real_forward = lab.engine._forward

        def failing_forward(*args):
            raise RuntimeError("simulated fault")

        monkeypatch.setattr(lab.engine, "_forward", failing_forward)
        failed = client.post("/api/analyze", json={"text": "this one fails"})
        assert failed.status_code == 503 and "model failed" in failed.json()["detail"]
        monkeypatch.setattr(lab.engine, "_forward", real_forward)
        assert client.post("/api/analyze", json={"text": "this one fails"}).status_code == 200
        assert client.post("/api/analyze", json={"text": "the next one works"}).status_code == 200


def test_an_unexpected_error_anywhere_is_not_a_500(monkeypatch, tiny):
    with TestClient(create_app(tiny), raise_server_exceptions=False) as client:
        run_id = client.post("/api/analyze", json={"text": "fine"}).json()["run_id"]
        run = client.app.state.lab.runs.get(run_id)
        monkeypatch.setattr(type(run), "embeddings", lambda self: 1 / 0)
        response = client.get(f"/api/runs/{run_id}/embeddings")
        assert response.status_code == 503 and "unexpected" in response.json()["detail"]
        assert client.get("/api/health").status_code == 200


def test_runs_let_go_are_computed_again_when_asked_for(monkeypatch, tiny):
    monkeypatch.setenv("ATTENTION_LAB_MAX_RUNS", "1")  # every new run pushes the previous one out
    get_settings.cache_clear()
    try:
        with TestClient(create_app(tiny)) as client:
            first = client.post("/api/analyze", json={"text": "first"}).json()["run_id"]
            before = client.get(f"/api/runs/{first}/embeddings").json()
            second = client.post("/api/analyze", json={"text": "second"}).json()["run_id"]
            assert client.app.state.lab.runs.get(first) is None
            assert client.get(f"/api/runs/{first}/embeddings").json() == before
            assert client.app.state.lab.runs.get(second) is None  # the bound still holds
    finally:
        get_settings.cache_clear()
