"""Live class mode through real HTTP: a teacher's view reaches every learner's event stream, questions are
tallied and revealed, forged teacher actions are refused, and two lab processes share a class over a real
Redis."""

import json
import threading
import time

import httpx
import pytest

from tests.conftest import LabProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir):
    lab = LabProcess(tmp_path_factory.mktemp("class"), env={"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir)})
    lab.start()
    yield lab
    lab.stop()


class Listener:
    """A learner's event stream, read on a thread: (event, data, seconds since the listener started)."""

    def __init__(self, url: str):
        self.events: list[tuple[str, dict, float]] = []
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(url,), daemon=True)
        self._thread.start()
        assert self.ready.wait(15), "the stream did not open"

    def _read(self, url):
        try:
            with httpx.Client(timeout=None) as client, client.stream("GET", url) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                kind = None
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith("event: "):
                        kind = line[len("event: ") :]
                    elif line.startswith("data: "):
                        self.events.append((kind, json.loads(line[len("data: ") :]), time.monotonic()))
                        if kind == "snapshot":
                            self.ready.set()
        except httpx.TransportError:
            if not self._stop.is_set():  # a closed listener's stream ends when its lab stops
                raise

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


def start_class(url: str) -> dict:
    response = httpx.post(f"{url}/api/classes")
    assert response.status_code == 201, response.text
    return response.json()


def test_the_teachers_view_reaches_every_learner_within_a_second(lab):
    started = start_class(lab.url)
    code, teacher = started["code"], {"X-Class-Secret": started["secret"]}
    assert started["join_url"].endswith(f"/?class={code}")
    learners = [httpx.post(f"{lab.url}/api/classes/{code}/learners", json={"nickname": f"n{i}"}) for i in range(3)]
    assert all(response.status_code == 201 for response in learners)
    listeners = [Listener(f"{lab.url}/api/classes/{code}/events") for _ in range(3)]
    try:
        view = {"text": "the river bank", "layer": 1, "head": 3, "token": 2}
        sent = time.monotonic()
        assert httpx.put(f"{lab.url}/api/classes/{code}/view", json={"view": view}, headers=teacher).status_code == 204
        for listener in listeners:
            data, at = listener.wait_for("view", where=lambda data: data["view"] == view)
            assert at - sent < 1
        snapshot = httpx.get(f"{lab.url}/api/classes/{code}").json()
        assert snapshot["view"] == view and snapshot["learners"] == 3 and snapshot["connected"] == 3
    finally:
        for listener in listeners:
            listener.close()


def test_a_forged_teacher_action_is_refused(lab):
    started = start_class(lab.url)
    code = started["code"]
    view = {"view": {"layer": 5}}
    assert httpx.put(f"{lab.url}/api/classes/{code}/view", json=view).status_code == 403
    assert (
        httpx.put(f"{lab.url}/api/classes/{code}/view", json=view, headers={"X-Class-Secret": "guess"}).status_code
        == 403
    )
    other = start_class(lab.url)  # a teacher of another class is not this class's teacher
    forged = httpx.put(f"{lab.url}/api/classes/{code}/view", json=view, headers={"X-Class-Secret": other["secret"]})
    assert forged.status_code == 403 and "only the teacher" in forged.json()["detail"]
    assert httpx.get(f"{lab.url}/api/classes/{code}").json()["view"] is None
    assert httpx.get(f"{lab.url}/api/classes/ZZZZZZ").status_code == 404
    assert httpx.get(f"{lab.url}/api/classes/nope").status_code == 422


def test_the_class_answers_a_question_together_and_sees_the_reveal(lab):
    started = start_class(lab.url)
    code, teacher = started["code"], {"X-Class-Secret": started["secret"]}
    learners = [httpx.post(f"{lab.url}/api/classes/{code}/learners", json={}).json()["learner"] for _ in range(30)]
    listener = Listener(f"{lab.url}/api/classes/{code}/events")
    try:
        question = {
            "text": "“bank” attends most to?",
            "layer": 1,
            "head": 0,
            "token": 3,
            "run_id": "r",
            "choices": list("abcde"),
        }
        assert httpx.post(f"{lab.url}/api/classes/{code}/question", json=question, headers=teacher).status_code == 204
        asked, _ = listener.wait_for("question")
        question_id = asked["question"]["id"]
        for number, learner in enumerate(learners):
            chosen = {"question": question_id, "token": number % 3}
            assert (
                httpx.post(f"{lab.url}/api/classes/{code}/learners/{learner}/answers", json=chosen).status_code == 200
            )
        data, _ = listener.wait_for("tally", where=lambda data: sum(data["tally"].values()) == 30)
        assert data["tally"] == {"0": 10, "1": 10, "2": 10}
        revealed = httpx.post(
            f"{lab.url}/api/classes/{code}/reveal", json={"answer": 1, "weight": 0.42}, headers=teacher
        )
        assert revealed.status_code == 200
        reveal, _ = listener.wait_for("reveal")
        assert reveal["answer"] == 1 and reveal["weight"] == 0.42
        scores = [
            httpx.get(f"{lab.url}/api/classes/{code}/learners/{learner}/score").json()["score"] for learner in learners
        ]
        assert scores.count("1/1") == 10 and scores.count("0/1") == 20
        late = httpx.post(
            f"{lab.url}/api/classes/{code}/learners/{learners[0]}/answers", json={"question": question_id, "token": 1}
        )
        assert late.status_code == 429 and "closed" in late.json()["detail"]
    finally:
        listener.close()


def test_following_and_going_free_are_counted_for_the_teacher(lab):
    started = start_class(lab.url)
    code = started["code"]
    learner = httpx.post(f"{lab.url}/api/classes/{code}/learners", json={"nickname": "Ada"}).json()["learner"]
    listener = Listener(f"{lab.url}/api/classes/{code}/events")
    try:
        assert (
            httpx.put(
                f"{lab.url}/api/classes/{code}/learners/{learner}", json={"following": False, "nickname": "Ada L."}
            ).status_code
            == 204
        )
        listener.wait_for("presence", where=lambda data: data["following"] == 0 and data["learners"] == 1)
    finally:
        listener.close()
    assert httpx.put(f"{lab.url}/api/classes/{code}/learners/nobody", json={"following": True}).status_code == 404


def test_the_qr_code_is_drawn_by_the_lab(lab):
    code = start_class(lab.url)["code"]
    response = httpx.get(f"{lab.url}/api/classes/{code}/qr.svg")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    assert response.text.lstrip().startswith("<svg")


def test_two_lab_processes_share_a_class_over_redis(tmp_path, tiny_model_dir, redis_server):
    env = {"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir), "ATTENTION_LAB_STORE": redis_server.url}
    for name in "ab":
        (tmp_path / name).mkdir()
    first, second = LabProcess(tmp_path / "a", env=env), LabProcess(tmp_path / "b", env=env)
    first.start()
    second.start()
    try:
        started = start_class(first.url)
        code, teacher = started["code"], {"X-Class-Secret": started["secret"]}
        listener = Listener(f"{second.url}/api/classes/{code}/events")  # a learner served by the other process
        try:
            view = {"layer": 4, "head": 7}
            assert (
                httpx.put(f"{first.url}/api/classes/{code}/view", json={"view": view}, headers=teacher).status_code
                == 204
            )
            listener.wait_for("view", timeout=2, where=lambda data: data["view"] == view)
            assert httpx.put(f"{second.url}/api/classes/{code}/view", json={"view": view}).status_code == 403
        finally:
            listener.close()
    finally:
        first.stop()
        second.stop()
