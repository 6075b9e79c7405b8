"""An anonymous class (issue 54): a teacher of minors starts a class whose answers carry no names. Learners who
send a nickname anyway (an old page, a hand-made request) are numbered in the CSV, and no nickname reaches the
class store (this process's memory, or the suite's real Redis), the run store's SQLite file, the lab's log or any
answer. A class with names keeps them: the control that the search below would find a name that was kept."""

import csv
import io

import pytest
import redis

from app.classroom.answers import answers_csv
from app.classroom.backends import MemoryBackend, RedisBackend
from app.classroom.classes import Classes
from app.engine.questions import Choice, Question
from app.serving.gate import Client
from tests.class_client import device
from tests.conftest import run_async
from tests.test_class_rules import LIMITS

NICKNAMES = ["Quokka-Ada-54", "Wombat-Bo-54", "Numbat-Cy-54"]  # found nowhere else in the suite
QUESTION = Question("head", "Which head?", (Choice("head 0", 0.1), Choice("head 1", 0.7), Choice("head 2", 0.2)))


def stored_text(backend) -> str:
    """Everything the class store holds, keys and values, as one text."""
    if isinstance(backend, MemoryBackend):
        return repr(backend._values)
    store = redis.Redis.from_url(backend.url, decode_responses=True)
    try:
        parts = []
        for key in store.scan_iter(count=1000):
            kind = store.type(key)
            value = store.hgetall(key) if kind == "hash" else store.get(key) if kind == "string" else kind
            parts.append(f"{key}={value!r}")
        return "\n".join(parts)
    finally:
        store.close()


@pytest.fixture(params=["memory", "redis"])
def backend(request):
    if request.param == "memory":
        return lambda: MemoryBackend()
    url = request.getfixturevalue("redis_server").url

    def made():
        made = RedisBackend(url, timeout_seconds=2)
        made.url = url
        return made

    return made


def a_class(make_backend, anonymous: bool) -> tuple[list[dict], str]:
    """Three learners join with nicknames, rename themselves, vote and see the reveal: the CSV's rows and the
    class store's whole text, read before the class ends."""

    async def run():
        backend = make_backend()
        classes = Classes(backend, LIMITS)
        try:
            code, _ = await classes.start_class(Client("10.0.54.1"), anonymous=anonymous)
            voters = [Client(f"10.0.54.{n}", cookie=f"anonymous{n}") for n in (2, 3, 4)]
            joined = [await classes.join(code, voter, name) for voter, name in zip(voters, NICKNAMES, strict=True)]
            assert all(learner.anonymous == anonymous for learner in joined)
            again = await classes.join(code, voters[0], NICKNAMES[0])  # a reload rejoins, its name sent again
            assert again.rejoined and again.learner == joined[0].learner
            for learner, voter, name in zip(joined, voters, NICKNAMES, strict=True):
                await classes.update(code, learner.learner, voter, True, name)
            asked = await classes.rounds.ask(code, QUESTION, {"layer": 0}, None, None)
            for learner, voter, choice in zip(joined, voters, [1, 0, 1], strict=True):
                await classes.vote(code, learner.learner, voter, asked.id, 1, choice)
            await classes.rounds.reveal(code)
            snapshot = await classes.snapshot(code)
            assert snapshot.anonymous == anonymous
            answers = await answers_csv(classes.store, code)
            stored = stored_text(backend)
            await classes.end(code, "the test is over")
            return list(csv.DictReader(io.StringIO(answers, newline=""))), stored
        finally:
            await backend.close()

    return run_async(run())


def test_an_anonymous_class_numbers_its_learners_and_its_store_keeps_no_nickname(backend):
    rows, stored = a_class(backend, anonymous=True)
    assert [row["learner"] for row in rows if row["row"] == "learner"] == ["learner 1", "learner 2", "learner 3"]
    assert [row["round 1"] for row in rows if row["row"] == "learner"] == ["head 1", "head 0", "head 1"]
    answers = " ".join(value for row in rows for value in row.values())
    kept = [name for name in NICKNAMES if name in stored or name in answers]
    assert kept == [], kept


def test_a_class_with_names_lists_them_and_keeps_them_in_its_store(backend):
    rows, stored = a_class(backend, anonymous=False)
    assert [row["learner"] for row in rows if row["row"] == "learner"] == NICKNAMES
    assert all(name in stored for name in NICKNAMES)


def test_an_anonymous_class_through_the_api_leaves_no_name_in_any_file_nor_the_log(live_lab, data_dir):
    """On the lab as a user runs it (run specs in SQLite): the start request's field, the snapshot and the join
    saying so, the CSV numbering learners, and after the class no nickname in the data folder or the log."""
    url = live_lab.url
    teacher = device("127.0.54.1")
    started = teacher.post(f"{url}/api/classes", json={"anonymous": True})
    assert started.status_code == 201, started.text
    assert started.json()["anonymous"] is True
    code, secret = started.json()["code"], {"X-Class-Secret": started.json()["secret"]}
    classes = f"{url}/api/classes/{code}"
    assert teacher.get(classes).json()["anonymous"] is True
    learners = [device(f"127.0.54.{n}") for n in (2, 3, 4)]
    try:
        ids = []
        for learner, name in zip(learners, NICKNAMES, strict=True):
            joined = learner.post(f"{classes}/learners", json={"nickname": name})
            assert joined.status_code == 201 and joined.json()["anonymous"] is True, joined.text
            assert name not in joined.text
            ids.append(joined.json()["learner"])
            renamed = learner.put(f"{classes}/learners/{ids[-1]}", json={"following": False, "nickname": name})
            assert renamed.status_code == 204
        run = teacher.post(f"{url}/api/analyze", json={"text": "the bank of the river"}).json()["run_id"]
        ask = {"kind": "head", "run_id": run, "layer": 0, "pattern": "previous"}
        question = teacher.post(f"{classes}/question", json=ask, headers=secret).json()
        for learner, id_, choice in zip(learners, ids, [0, 1, 0], strict=True):
            body = {"question": question["id"], "round": 1, "choice": choice}
            assert learner.put(f"{classes}/learners/{id_}/vote", json=body).status_code == 200
        assert teacher.post(f"{classes}/question/reveal", headers=secret).status_code == 200
        answers = teacher.get(f"{classes}/answers.csv", headers=secret).text
        rows = list(csv.DictReader(io.StringIO(answers, newline="")))
        assert [row["learner"] for row in rows if row["row"] == "learner"] == ["learner 1", "learner 2", "learner 3"]
        snapshot = teacher.get(classes).text
        assert teacher.delete(classes, headers=secret).status_code == 204
        files = [path for path in [*data_dir.rglob("*"), live_lab.log] if path.is_file()]
        assert any(path.suffix == ".sqlite3" for path in files), files
        kept = [
            (name, str(path))
            for path in files
            for name in NICKNAMES
            if name.encode() in path.read_bytes() or name.encode("utf-16-le") in path.read_bytes()
        ]
        kept += [(name, "an answer") for name in NICKNAMES if name in answers or name in snapshot]
        assert kept == [], kept
    finally:
        for client in [teacher, *learners]:
            client.close()


def test_a_start_request_with_an_unknown_field_is_refused(live_lab):
    answer = device("127.0.54.9").post(f"{live_lab.url}/api/classes", json={"anonymus": True})
    assert answer.status_code == 422 and "anonymus" in answer.text
