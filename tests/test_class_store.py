"""The live class beyond one process: two lab processes sharing a class over a real Redis, a killed
pub/sub subscription found and renewed with no move of the teacher's lost, a Redis that is down named in
a 503 with no traceback, and three workers without Redis refusing class mode in one line."""

import signal
import time
from pathlib import Path

import pytest
import redis

from tests.class_client import Listener, device, start_class
from tests.conftest import LabProcess, RedisServer, free_port, start_together

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store():
    """A Redis of this module's own: its tests kill its connections and stop it."""
    server = RedisServer(free_port())
    server.start()
    yield server
    server.stop()


def three_workers_without_redis(folder: Path, model: Path) -> LabProcess:
    return LabProcess(
        folder, command=("-m", "app", "--workers", "3"), env={"ATTENTION_LAB_MODEL_PATH": str(model)}, workers=3
    )


@pytest.fixture(scope="module")
def all_labs(tmp_path_factory, tiny_model_dir, store) -> tuple[list[LabProcess], LabProcess]:
    """The two labs sharing the store, and the last test's three workers without one, started together: the three
    workers' start (their own imports, in processes of their own) is the longest, and the two labs' forks take
    their time beside it rather than before it."""
    env = {"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir), "ATTENTION_LAB_STORE": store.url}
    labs = [LabProcess(tmp_path_factory.mktemp(f"class-{name}"), env=env) for name in "ab"]
    three = three_workers_without_redis(tmp_path_factory.mktemp("three-workers"), tiny_model_dir)
    start_together(*labs, three)
    yield labs, three
    for lab in (*labs, three):
        if lab.process.poll() is None:
            lab.stop()
    for lab in labs:
        log = lab.log.read_text()
        assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def labs(all_labs) -> list[LabProcess]:
    return all_labs[0]


def seen(listener: Listener, view: dict, timeout: float) -> float:
    """When the listener first had `view`: in a "view" event, or in the snapshot of a reconnected stream."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for kind, data, at in list(listener.events):
            if kind in ("view", "snapshot") and data["view"] == view:
                return at
        time.sleep(0.02)
    raise AssertionError(f"{view} did not arrive in {timeout} s: {listener.events[-5:]}")


def test_two_lab_processes_share_a_class_and_its_questions(labs):
    first, second = labs
    teacher, learner = device("127.0.11.1"), device("127.0.11.2")
    code, secret = start_class(teacher, first.url)
    joined = learner.post(f"{second.url}/api/classes/{code}/learners", json={}).json()["learner"]
    following = Listener(f"{second.url}/api/classes/{code}/events", "127.0.11.2").wait_ready()
    try:
        view = {"layer": 4, "head": 7}
        assert (
            teacher.put(f"{first.url}/api/classes/{code}/view", json={"view": view}, headers=secret).status_code == 204
        )
        following.wait_for("view", timeout=2, where=lambda data: data["view"] == view)
        assert learner.put(f"{second.url}/api/classes/{code}/view", json={"view": view}).status_code == 403
        run = teacher.post(f"{first.url}/api/analyze", json={"text": "the bank of the river"}).json()["run_id"]
        ask = {"kind": "attends", "run_id": run, "token": 2, "layer": 1, "head": 0}
        question = teacher.post(f"{first.url}/api/classes/{code}/question", json=ask, headers=secret).json()
        vote = {"question": question["id"], "round": 1, "choice": 1}
        assert learner.put(f"{second.url}/api/classes/{code}/learners/{joined}/vote", json=vote).status_code == 200
        following.wait_for("votes", where=lambda data: data["votes"] == [1])
        revealed = teacher.post(f"{first.url}/api/classes/{code}/question/reveal", headers=secret).json()
        shown, _ = following.wait_for("question", where=lambda data: data["question"]["phase"] == "revealed")
        assert shown["question"]["answer"] == revealed["answer"] and revealed["tallies"] == [{"1": 1}]
        score = learner.get(f"{second.url}/api/classes/{code}/learners/{joined}/score").json()
        assert score == {"right": int(revealed["answer"]["choice"] == 1), "asked": 1, "gain": None}
    finally:
        following.close()


def test_a_killed_subscription_is_renewed_and_no_move_is_lost(labs, store):
    first, second = labs
    teacher = device("127.0.12.1")
    code, secret = start_class(teacher, first.url)
    learners = [
        Listener(f"{lab.url}/api/classes/{code}/events", f"127.0.12.{n}", reconnect=True).wait_ready()
        for n, lab in ((2, first), (3, second), (4, second))
    ]
    try:
        killed = redis.Redis.from_url(store.url).client_kill_filter(_type="pubsub")
        assert killed >= 2  # one subscription per lab process, whatever the number of streams
        moved = time.monotonic()
        move = {"layer": 1, "head": 1, "after": "the kill"}
        assert (
            teacher.put(f"{first.url}/api/classes/{code}/view", json={"view": move}, headers=secret).status_code == 204
        )
        for learner in learners:
            assert seen(learner, move, 5) - moved < 5
        # The streams ended so that the browsers took a fresh snapshot; the renewed subscription carries on.
        assert all(learner.streams_ended >= 1 and learner.statuses.count(200) >= 2 for learner in learners)
        following = {"layer": 0, "head": 2, "after": "the renewal"}
        sent = time.monotonic()
        assert (
            teacher.put(f"{first.url}/api/classes/{code}/view", json={"view": following}, headers=secret).status_code
            == 204
        )
        for learner in learners:
            _, at = learner.wait_for("view", where=lambda data: data["view"] == following)
            assert at - sent < 1
    finally:
        for learner in learners:
            learner.close()
    for lab in labs:
        assert "Class events: the subscription to the class store" in lab.log.read_text()


def test_a_store_that_is_down_is_named_in_a_503_and_the_class_mode_recovers(labs, store):
    first, _ = labs
    client = device("127.0.13.1")
    code, _ = start_class(client, first.url)
    store.stop()
    try:
        for refused in (
            client.get(f"{first.url}/api/classes/{code}"),
            client.post(f"{first.url}/api/classes"),
            client.get(f"{first.url}/api/classes/{code}/events"),
            client.post(f"{first.url}/api/classes/{code}/learners", json={}),
        ):
            assert refused.status_code == 503, refused.text
            assert f"the class store ({store.url}) is not answering" in refused.json()["detail"]
    finally:
        store.start()  # empty: the test's Redis saves nothing
    code, _ = start_class(client, first.url)
    # A stream waits a moment for the renewed subscription (it is renewed within seconds of the store's return).
    listener = Listener(f"{first.url}/api/classes/{code}/events", "127.0.13.2").wait_ready()
    listener.close()
    assert "Class events flow again" in first.log.read_text()


def test_a_stopping_lab_tells_its_streams_to_reconnect_while_the_class_lives_on(labs):
    """Last in the module: it stops the second lab."""
    first, second = labs
    teacher = device("127.0.18.1")
    code, secret = start_class(teacher, first.url)
    streams = [Listener(f"{second.url}/api/classes/{code}/events", f"127.0.18.{n}").wait_ready() for n in (2, 3, 4)]
    second.process.send_signal(signal.SIGTERM)
    for stream in streams:
        closing, _ = stream.wait_for("closing")
        assert closing == {"reason": "this server is stopping: reconnecting"} and stream.closed.wait(5)
    second.process.wait(timeout=30)
    assert teacher.get(f"{first.url}/api/classes/{code}").status_code == 200  # the class is in Redis
    Listener(f"{first.url}/api/classes/{code}/events", "127.0.18.2").wait_ready().close()


def test_three_workers_without_redis_refuse_class_mode_in_one_line(all_labs):
    _, lab = all_labs
    try:
        client = device("127.0.14.1")
        answers = [client.post(f"{lab.url}/api/classes") for _ in range(6)]
        assert {answer.status_code for answer in answers} == {503}
        assert all("ATTENTION_LAB_STORE=redis://" in answer.json()["detail"] for answer in answers)
        assert client.get(f"{lab.url}/api/classes/ABCDEF").status_code == 503
        assert client.post(f"{lab.url}/api/analyze", json={"text": "runs still work"}).status_code == 200
    finally:
        lab.stop()
    log = lab.log.read_text()
    said = [line for line in log.splitlines() if "class mode is off" in line]
    assert said and all(line == said[0] for line in said) and "Traceback" not in log
