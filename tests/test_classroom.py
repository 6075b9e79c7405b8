"""The live class through real HTTP on loopback, each device on an address of its own (127.0.N.x per
test): a teacher and three learners through both rounds of a question, the teacher's view on every
learner's stream, learners who cannot pose as the teacher or as each other, one vote per learner per
round, presence sent coalesced, and floods of classes, joins, votes and streams from one address while
another address's class goes on."""

import csv
import io
import time

import httpx
import numpy as np
import pytest

from app.web.encoding import decode_attention
from tests.class_client import Listener, device, start_class
from tests.conftest import LabProcess

pytestmark = pytest.mark.slow

# Small per-client bounds, so that a flood reaches them in a moment.
BOUNDS = {
    "ATTENTION_LAB_MAX_CLASSES_PER_CLIENT": "2",
    "ATTENTION_LAB_CLASS_STARTS_PER_HOUR": "4",
    "ATTENTION_LAB_CLASS_JOINS_PER_MINUTE": "5",
    "ATTENTION_LAB_LEARNER_ACTIONS_PER_SECOND": "20",
    "ATTENTION_LAB_CLASS_STREAMS_PER_BROWSER": "3",
    "ATTENTION_LAB_CLASS_STREAMS_PER_ADDRESS": "8",
}
TEXT = "The bank of the river was steep and the bank was closed."


@pytest.fixture(scope="module")
def lab(tmp_path_factory, tiny_model_dir):
    lab = LabProcess(tmp_path_factory.mktemp("class"), env={"ATTENTION_LAB_MODEL_PATH": str(tiny_model_dir), **BOUNDS})
    lab.start()
    yield lab
    lab.stop()
    log = lab.log.read_text()
    assert "Traceback" not in log, log


def events_url(lab, code: str) -> str:
    return f"{lab.url}/api/classes/{code}/events"


def test_a_teacher_and_three_learners_through_both_rounds(lab):
    teacher = device("127.0.1.1")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": TEXT}).json()
    # The teacher's page opens its stream with the cookie the class's start gave its browser.
    teaching = Listener(events_url(lab, code), "127.0.1.1", cookies=teacher.cookies).wait_ready()
    learners = [device(f"127.0.1.{n}") for n in (2, 3, 4)]
    ids = [
        learner.post(f"{classes}/learners", json={"nickname": name}).json()["learner"]
        for learner, name in zip(learners, ["Ada", "", "=SUM(A1)"], strict=True)
    ]
    streams = [Listener(events_url(lab, code), f"127.0.1.{n}").wait_ready() for n in (2, 3, 4)]
    try:
        teaching.wait_for("presence", where=lambda data: data == {"learners": 3, "following": 3, "connected": 3})

        asked = teacher.post(
            f"{classes}/question",
            json={
                "kind": "attends",
                "run_id": run["run_id"],
                "token": 2,
                "layer": 1,
                "head": 3,
                "step": {"index": 0, "title": "Banks"},
            },
            headers=secret,
        )
        assert asked.status_code == 201, asked.text
        question = asked.json()
        # The answer, independently: the largest weight of token 2's row in block 1, head 3.
        got = teacher.get(f"{lab.url}/api/runs/{run['run_id']}/attention", params={"dtype": "float32"})
        row = decode_attention(got.content, got.headers)[1, 3, 2]
        best = int(np.argmax(row))
        choice_of = {choice["token"]: choice["index"] for choice in question["choices"]}
        right, wrong, other = choice_of[best], choice_of[(best + 1) % len(row)], choice_of[(best + 2) % len(row)]
        for stream in streams:
            seen, _ = stream.wait_for("question", where=lambda data: data["question"]["id"] == question["id"])
            assert seen["question"]["answer"] is None and seen["question"]["phase"] == "open"

        def vote(n: int, round: int, choice: int) -> httpx.Response:
            body = {"question": question["id"], "round": round, "choice": choice}
            return learners[n].put(f"{classes}/learners/{ids[n]}/vote", json=body)

        assert vote(0, 1, wrong).status_code == 200
        assert vote(0, 1, right).json() == {"question": question["id"], "round": 1, "choice": right}  # replaces
        assert vote(1, 1, wrong).status_code == 200
        assert vote(2, 1, other).status_code == 200
        counted, _ = streams[0].wait_for("votes", where=lambda data: data["votes"] == [3])
        assert set(counted) == {"question", "round", "votes"}  # counts only while the round is open

        shown = teacher.post(f"{classes}/question/show", headers=secret).json()
        assert shown["phase"] == "shown" and shown["tallies"] == [{str(right): 1, str(wrong): 1, str(other): 1}]
        assert shown["answer"] is None
        assert vote(1, 1, right).status_code == 409  # round 1 is closed
        assert vote(1, 2, right).status_code == 409  # round 2 is not open yet

        again = teacher.post(f"{classes}/question/again", headers=secret).json()
        assert (again["phase"], again["round"], again["votes"]) == ("open", 2, [3, 0])
        assert vote(0, 2, wrong).status_code == 200
        assert vote(1, 2, right).status_code == 200  # learner 2 keeps its round-1 vote
        streams[1].wait_for("votes", where=lambda data: data["round"] == 2 and data["votes"] == [3, 2])

        revealed = teacher.post(f"{classes}/question/reveal", headers=secret).json()
        assert revealed["phase"] == "revealed" and revealed["answer"]["choice"] == right
        assert revealed["answer"]["value"] == pytest.approx(float(row[best]), rel=1e-6)
        assert revealed["tallies"] == [{str(right): 1, str(wrong): 1, str(other): 1}, {str(wrong): 1, str(right): 1}]
        assert revealed["correct"] == [pytest.approx(1 / 3), pytest.approx(1 / 2)]
        for stream in [*streams, teaching]:
            seen, _ = stream.wait_for("question", where=lambda data: data["question"]["phase"] == "revealed")
            assert seen["question"]["answer"] == revealed["answer"]
        # A learner's answer is its round-2 vote where it voted again, else its round-1 vote.
        scores = [learners[n].get(f"{classes}/learners/{ids[n]}/score").json() for n in range(3)]
        assert [(score["right"], score["asked"]) for score in scores] == [(0, 1), (1, 1), (0, 1)]
        assert all(score["gain"] is None for score in scores)  # no pre-test nor post-test in this class

        answers = teacher.get(f"{classes}/answers.csv", headers=secret)
        assert answers.status_code == 200 and answers.headers["content-type"].startswith("text/csv")
        labels = {choice["index"]: choice["label"] for choice in question["choices"]}
        rows = list(csv.DictReader(io.StringIO(answers.text, newline="")))
        votes = ["round 1", "round 2", "answer", "right in round 1", "right in round 2"]
        assert [[row["learner"], *(row[column] for column in votes)] for row in rows if row["row"] == "learner"] == [
            ["Ada", labels[right], labels[wrong], labels[right], "yes", "no"],
            ["learner 2", labels[wrong], labels[right], labels[right], "no", "yes"],
            ["'=SUM(A1)", labels[other], "", labels[right], "no", ""],  # defused for spreadsheets
        ]
        # The class on the question, and on the lesson (this one question): 1 of 3 right, then 1 of 2.
        shares = ["share right in round 1", "share right in round 2", "change in points"]
        summary = {row["row"]: [float(row[column]) for column in shares] for row in rows if row["row"] != "learner"}
        assert summary["question"] == summary["lesson"] == [0.3333, 0.5, 16.7]
        assert all(row["step"] == "0" and row["step title"] == "Banks" for row in rows if row["row"] != "lesson")
        assert {row["question id"] for row in rows if row["row"] != "lesson"} == {question["id"]}
        assert "127.0" not in answers.text
        assert teacher.get(f"{classes}/answers.csv").status_code == 200  # the teacher's cookie, as a link
        assert learners[0].get(f"{classes}/answers.csv").status_code == 403
    finally:
        for stream in [*streams, teaching]:
            stream.close()


def share(votes: list[int], right: int) -> float:
    return sum(vote == right for vote in votes) / len(votes)


def hake(pre: float, post: float) -> float | None:
    return None if pre == 1 else (post - pre) / (1 - pre)


def test_a_pre_test_two_questions_in_rounds_and_a_post_test_measure_what_the_class_learned(lab):
    """A teacher and three learners from the pre-test to the post-test's reveal. Every right choice comes from
    NumPy on the run's float32 weights, and every share, change and gain is worked out here from the votes
    cast here: the server's numbers are only compared with them."""
    teacher = device("127.0.11.1")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": TEXT}).json()["run_id"]
    got = teacher.get(f"{lab.url}/api/runs/{run}/attention", params={"dtype": "float32"})
    weights = decode_attention(got.content, got.headers).astype(np.float64)  # [layer, head, query, key]
    learners = [device(f"127.0.11.{n}") for n in (2, 3, 4)]
    ids = [learner.post(f"{classes}/learners", json={}).json()["learner"] for learner in learners]
    stream = Listener(events_url(lab, code), "127.0.11.2").wait_ready()

    def ask(body: dict) -> dict:
        asked = teacher.post(f"{classes}/question", json={"run_id": run, **body}, headers=secret)
        assert asked.status_code == 201, asked.text
        return asked.json()

    def attends(token: int, layer: int, head: int, test: str | None = None) -> tuple[dict, int, int]:
        """The question, its right choice and one wrong one: the key the token's row peaks at."""
        question = ask({"kind": "attends", "token": token, "layer": layer, "head": head, "test": test})
        row = weights[layer, head, token]
        index = {choice["token"]: choice["index"] for choice in question["choices"]}
        return question, index[int(np.argmax(row))], index[int(np.argmin(row))]

    def vote(question: dict, round_: int, choices: list[int]):
        for learner, learner_id, choice in zip(learners, ids, choices, strict=True):
            body = {"question": question["id"], "round": round_, "choice": choice}
            assert learner.put(f"{classes}/learners/{learner_id}/vote", json=body).status_code == 200

    def move(name: str, status: int = 200) -> dict:
        moved = teacher.post(f"{classes}/question/{name}", headers=secret)
        assert moved.status_code == status, moved.text
        return moved.json()

    try:
        # The pre-test: one round, alone; no histogram, no answer, no second round, nothing revealed.
        pre, right, wrong = attends(5, 1, 3, "pre")
        pre_votes = [right, wrong, wrong]
        vote(pre, 1, pre_votes)
        for refused in ("show", "again", "reveal"):
            assert "pre-test" in move(refused, 409)["detail"]
        closed = move("close")
        assert (closed["phase"], closed["test"], closed["tallies"], closed["answer"]) == ("closed", "pre", [], None)
        late = Listener(events_url(lab, code), "127.0.11.5").wait_ready()  # a screen that joins now
        snapshot = late.of("snapshot")[0]
        late.close()
        assert snapshot["question"]["tallies"] == [] and snapshot["question"]["answer"] is None
        assert snapshot["gain"] is None
        pre_right = [vote == right for vote in pre_votes]

        # Two questions in rounds (peer instruction): a token's peak, then block 0's previous-token head.
        def in_rounds(question: dict, right_choice: int, one: list[int], two: list[int]) -> list[float]:
            vote(question, 1, one)
            move("show")
            move("again")
            vote(question, 2, two)
            revealed = move("reveal")
            assert revealed["answer"]["choice"] == right_choice
            shares = [share(one, right_choice), share(two, right_choice)]
            assert revealed["correct"] == [pytest.approx(shares[0]), pytest.approx(shares[1])]
            return shares

        first, right1, wrong1 = attends(9, 0, 2)
        changes = [in_rounds(first, right1, [right1, wrong1, wrong1], [right1, right1, wrong1])]
        second = ask({"kind": "head", "layer": 0, "pattern": "previous"})  # choice n is head n
        previous = weights[0].diagonal(offset=-1, axis1=-2, axis2=-1).mean(-1)  # [head]
        right2, wrong2 = int(np.argmax(previous)), int(np.argmin(previous))
        changes.append(in_rounds(second, right2, [wrong2, wrong2, right2], [right2, right2, right2]))

        # The post-test: the pre-test's question again; closing it measures the class.
        post, right, wrong = attends(5, 1, 3, "post")
        post_votes = [right, right, wrong]
        vote(post, 1, post_votes)
        assert move("close")["phase"] == "closed"
        post_right = [vote == right for vote in post_votes]
        class_pre, class_post = sum(pre_right) / 3, sum(post_right) / 3
        seen, _ = stream.wait_for("gain")
        expected = {"learners": 3, "pre": class_pre, "post": class_post, "gain": hake(class_pre, class_post)}
        assert {key: seen["gain"][key] for key in expected} == pytest.approx(expected)
        assert teacher.get(classes).json()["gain"] == seen["gain"]  # and so to a screen that joins late
        for n, (learner, learner_id) in enumerate(zip(learners, ids, strict=True)):
            own = learner.get(f"{classes}/learners/{learner_id}/score").json()["gain"]
            mine = {"pre": float(pre_right[n]), "post": float(post_right[n]), "gain": hake(pre_right[n], post_right[n])}
            assert {key: own[key] for key in mine} == pytest.approx(mine)
            assert (own["why"] is None) == (mine["gain"] is not None)
        assert move("reveal")["answer"]["choice"] == right  # the post-test's answer, at last

        # The CSV: per question its shares and change, the lesson's, each learner's gain and the class's.
        rows = list(csv.DictReader(io.StringIO(teacher.get(f"{classes}/answers.csv", headers=secret).text)))
        numbers = ["share right in round 1", "share right in round 2", "change in points"]
        read = lambda row, columns: [float(row[column]) if row[column] else None for column in columns]  # noqa: E731
        summary = {row["question id"]: read(row, numbers) for row in rows if row["row"] == "question"}
        for question, (one, two) in zip((first, second), changes, strict=True):
            assert summary[question["id"]] == pytest.approx([one, two, 100 * (two - one)], abs=0.06)
        assert summary[pre["id"]] == pytest.approx([class_pre, None, None], abs=1e-4)
        assert summary[post["id"]] == pytest.approx([class_post, None, None], abs=1e-4)
        (lesson,) = [row for row in rows if row["row"] == "lesson"]
        means = [sum(shares[n] for shares in changes) / 2 for n in (0, 1)]
        assert read(lesson, numbers) == pytest.approx([*means, 100 * (means[1] - means[0])], abs=0.06)
        tests = ["pre-test share right", "post-test share right", "gain g"]
        gains = [row for row in rows if row["row"] == "learner gain"]
        assert [row["learner"] for row in gains] == ["learner 1", "learner 2", "learner 3"]
        for row, was, now in zip(gains, pre_right, post_right, strict=True):
            assert read(row, tests[:2]) == [float(was), float(now)]
            assert row["gain g"].startswith("The gain g") if was else float(row["gain g"]) == hake(was, now)
        (whole,) = [row for row in rows if row["row"] == "class gain"]
        assert read(whole, tests) == pytest.approx([class_pre, class_post, hake(class_pre, class_post)], abs=1e-4)
    finally:
        stream.close()


def test_the_teachers_view_reaches_every_learner_within_a_second(lab):
    teacher = device("127.0.2.1")
    code, secret = start_class(teacher, lab.url)
    for n in (2, 3, 4):
        assert device(f"127.0.2.{n}").post(f"{lab.url}/api/classes/{code}/learners", json={}).status_code == 201
    streams = [Listener(events_url(lab, code), f"127.0.2.{n}").wait_ready() for n in (2, 3, 4)]
    try:
        view = {"text": "the river bank", "layer": 1, "head": 3, "token": 2}
        sent = time.monotonic()
        assert teacher.put(f"{lab.url}/api/classes/{code}/view", json={"view": view}, headers=secret).status_code == 204
        for stream in streams:
            _, at = stream.wait_for("view", where=lambda data: data["view"] == view)
            assert at - sent < 1
        late = Listener(events_url(lab, code), "127.0.2.5").wait_ready()  # a screen that joins late
        assert late.of("snapshot")[0]["view"] == view
        late.close()
        assert teacher.get(f"{lab.url}/api/classes/{code}").json()["view"] == view
        # Presence is read at most once a second per class (PRESENCE_SECONDS): a snapshot may lag a join by
        # that much, and the presence event that follows the joins counts all three.
        streams[0].wait_for("presence", where=lambda data: data["learners"] == 3)
    finally:
        for stream in streams:
            stream.close()


def test_learners_cannot_pose_as_the_teacher_nor_as_each_other(lab):
    teacher, learner, other = device("127.0.3.1"), device("127.0.3.2"), device("127.0.3.3")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    view = {"view": {"layer": 5}}
    assert learner.put(f"{classes}/view", json=view).status_code == 403
    assert learner.put(f"{classes}/view", json=view, headers={"X-Class-Secret": "guess"}).status_code == 403
    other_code, other_secret = start_class(device("127.0.3.9"), lab.url)  # another class's teacher
    forged = learner.put(f"{classes}/view", json=view, headers=other_secret)
    assert forged.status_code == 403 and "only the teacher" in forged.json()["detail"]
    assert learner.delete(classes).status_code == 403
    assert learner.post(f"{classes}/question/reveal").status_code == 403
    # A stream that claims to be the teacher's without the secret is refused, not counted as the teacher.
    assert learner.get(f"{classes}/events", headers={"X-Class-Secret": "guess"}).status_code == 403
    assert learner.get(f"{classes}/events", headers=other_secret).status_code == 403
    assert teacher.get(classes).json()["view"] is None

    joined = learner.post(f"{classes}/learners", json={"nickname": "Ada"}).json()["learner"]
    assert learner.put(f"{classes}/learners/{joined}", json={"following": False}).status_code == 204
    # Another device that learns the id can neither vote, nor change, nor read as that learner.
    assert other.put(f"{classes}/learners/{joined}", json={"following": True}).status_code == 403
    vote = {"question": "0", "round": 1, "choice": 0}
    assert other.put(f"{classes}/learners/{joined}/vote", json=vote).status_code == 403
    assert other.get(f"{classes}/learners/{joined}/score").status_code == 403
    assert learner.put(f"{classes}/learners/nobody", json={"following": True}).status_code == 404
    assert teacher.get(f"{lab.url}/api/classes/ZZZZZZ").status_code == 404
    assert teacher.get(f"{lab.url}/api/classes/nope").status_code == 422
    assert other_code != code


def test_one_vote_per_learner_per_round_within_the_choices(lab):
    teacher, learner = device("127.0.4.1"), device("127.0.4.2")
    code, secret = start_class(teacher, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    first = learner.post(f"{classes}/learners", json={"nickname": "Ada"}).json()
    assert first["rejoined"] is False
    again = learner.post(f"{classes}/learners", json={"nickname": "Ada L."}).json()
    # The same browser gets its learner back.
    assert again == {"learner": first["learner"], "rejoined": True, "anonymous": False}
    assert teacher.get(classes).json()["learners"] == 1
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": TEXT}).json()["run_id"]
    ask = {"kind": "head", "run_id": run, "layer": 0, "pattern": "previous"}
    question = teacher.post(f"{classes}/question", json=ask, headers=secret).json()
    voting = f"{classes}/learners/{first['learner']}/vote"
    for choice in (0, 1, 3, 2):  # each replaces the one before
        assert learner.put(voting, json={"question": question["id"], "round": 1, "choice": choice}).status_code == 200
    outside = learner.put(voting, json={"question": question["id"], "round": 1, "choice": 400})
    assert outside.status_code == 422 and "0 to 3" in outside.json()["detail"]
    assert learner.put(voting, json={"question": question["id"], "round": 1, "choice": -1}).status_code == 422
    assert learner.put(voting, json={"question": "deadbeef", "round": 1, "choice": 0}).status_code == 409
    assert learner.put(voting, json={"question": question["id"], "round": 3, "choice": 0}).status_code == 422
    shown = teacher.post(f"{classes}/question/show", headers=secret).json()
    assert shown["votes"] == [1] and shown["tallies"] == [{"2": 1}]
    assert learner.put(voting, json={"question": question["id"], "round": 1, "choice": 1}).status_code == 409
    assert teacher.post(f"{classes}/question/show", headers=secret).status_code == 409
    teacher.post(f"{classes}/question/again", headers=secret)
    assert teacher.post(f"{classes}/question/again", headers=secret).status_code == 409  # only one more round
    assert teacher.post(f"{classes}/question/reveal", headers=secret).status_code == 200
    assert teacher.post(f"{classes}/question/reveal", headers=secret).status_code == 409


def test_presence_goes_out_coalesced_at_most_once_a_second(lab):
    teacher = device("127.0.7.1")
    code, secret = start_class(teacher, lab.url)
    watching = Listener(events_url(lab, code), "127.0.7.1", headers=secret).wait_ready()
    arrivals = []
    try:
        started = time.monotonic()
        for n in range(2, 12):  # ten learners join and connect within a moment
            assert device(f"127.0.7.{n}").post(f"{lab.url}/api/classes/{code}/learners", json={}).status_code == 201
            arrivals.append(Listener(events_url(lab, code), f"127.0.7.{n}"))
        for stream in arrivals:
            stream.wait_ready()
        watching.wait_for("presence", where=lambda data: data["connected"] == 10 and data["learners"] == 10)
        sent = [at for kind, _, at in watching.events if kind == "presence"]
        assert all(later - earlier >= 0.9 for earlier, later in zip(sent, sent[1:], strict=False))
        assert len(sent) <= 2 + (time.monotonic() - started)  # never one per join or connect
    finally:
        for stream in [watching, *arrivals]:
            stream.close()


def test_an_oversized_view_is_413(lab):
    teacher = device("127.0.8.1")
    code, secret = start_class(teacher, lab.url)
    huge = {"view": {"text": "x" * 200_000}}
    refused = teacher.put(f"{lab.url}/api/classes/{code}/view", json=huge, headers=secret)
    assert refused.status_code == 413 and "131,072 bytes" in refused.json()["detail"]


def test_the_teacher_ends_the_class_and_every_stream_hears_it(lab):
    teacher = device("127.0.9.1")
    code, secret = start_class(teacher, lab.url)
    streams = [Listener(events_url(lab, code), f"127.0.9.{n}").wait_ready() for n in (2, 3)]
    teaching = Listener(events_url(lab, code), "127.0.9.1", headers=secret).wait_ready()
    assert teacher.delete(f"{lab.url}/api/classes/{code}", headers=secret).status_code == 204
    for stream in [*streams, teaching]:
        ended, _ = stream.wait_for("ended")
        assert ended == {"reason": "the teacher ended the class"}
        assert stream.closed.wait(5)
    assert teacher.get(f"{lab.url}/api/classes/{code}").status_code == 404
    assert device("127.0.9.4").post(f"{lab.url}/api/classes/{code}/learners", json={}).status_code == 404


def another_browser(lab) -> httpx.Client:
    """The flooding device again, under one more cookie the lab gave it (one it made up would not verify,
    and count as none)."""
    browser = device("127.0.5.1")
    browser.get(f"{lab.url}/api/health")
    return browser


def test_floods_from_one_address_leave_another_addresss_class_working(lab):
    honest, learner, flooder = device("127.0.6.1"), device("127.0.6.2"), device("127.0.5.1")
    code, secret = start_class(honest, lab.url)
    classes = f"{lab.url}/api/classes/{code}"
    mine = learner.post(f"{classes}/learners", json={"nickname": "Ada"}).json()["learner"]
    following = Listener(f"{classes}/events", "127.0.6.2").wait_ready()
    flood_streams = []
    try:
        # Classes: a few live at once per address, and a few starts an hour.
        started = [flooder.post(f"{lab.url}/api/classes") for _ in range(20)]
        assert [r.status_code for r in started] == [201, 201] + [429] * 18
        assert "end one first" in started[-1].json()["detail"]
        for made in started[:2]:
            flooder.delete(
                f"{lab.url}/api/classes/{made.json()['code']}", headers={"X-Class-Secret": made.json()["secret"]}
            )
        assert [flooder.post(f"{lab.url}/api/classes").status_code for _ in range(3)] == [201, 201, 429]
        assert start_class(device("127.0.6.3"), lab.url)  # another address still starts its class

        # Joins: a browser joins once; new learners from one address come a few a minute, whatever cookies.
        browsers = [another_browser(lab) for _ in range(40)]
        joins = [browser.post(f"{classes}/learners", json={}) for browser in browsers]
        joined = [n for n, r in enumerate(joins) if r.status_code == 201]
        assert 1 <= len(joined) <= 5 and joins[-1].status_code == 429
        assert [flooder.post(f"{classes}/learners", json={}).status_code for _ in range(5)].count(201) <= 1

        # Votes: one learner's flood counts once, and is cut at its actions a second.
        run = honest.post(f"{lab.url}/api/analyze", json={"text": TEXT}).json()["run_id"]
        question = honest.post(
            f"{classes}/question", json={"kind": "head", "run_id": run, "layer": 1, "pattern": "self"}, headers=secret
        ).json()
        fake, voter = joins[joined[0]].json()["learner"], browsers[joined[0]]
        vote = {"question": question["id"], "round": 1, "choice": 1}
        votes = [voter.put(f"{classes}/learners/{fake}/vote", json=vote) for _ in range(40)]
        assert {r.status_code for r in votes} == {200, 429}
        assert learner.put(f"{classes}/learners/{mine}/vote", json={**vote, "choice": 2}).status_code == 200
        shown = honest.post(f"{classes}/question/show", headers=secret).json()
        assert shown["tallies"] == [{"1": 1, "2": 1}]

        # Streams: a few per browser, a few more per address; past them 429, and only for this address.
        flood_streams = [Listener(f"{classes}/events", "127.0.5.1") for _ in range(5)]
        flood_streams += [Listener(f"{classes}/events", "127.0.5.1", cookies=browsers[n].cookies) for n in range(10)]
        deadline = time.monotonic() + 10
        while not all(stream.statuses for stream in flood_streams) and time.monotonic() < deadline:
            time.sleep(0.05)
        statuses = [stream.statuses[0] for stream in flood_streams]
        assert statuses[:5].count(200) == 3 and statuses.count(200) <= 8 and set(statuses) == {200, 429}

        view = {"layer": 1, "head": 2}
        sent = time.monotonic()
        assert honest.put(f"{classes}/view", json={"view": view}, headers=secret).status_code == 204
        _, at = following.wait_for("view", where=lambda data: data["view"] == view)
        assert at - sent < 1
        latecomer = Listener(f"{classes}/events", "127.0.6.4").wait_ready()
        latecomer.close()
    finally:
        for stream in [following, *flood_streams]:
            stream.close()


def test_the_qr_code_is_drawn_by_the_lab(lab):
    client = device("127.0.10.1")
    code, _ = start_class(client, lab.url)
    response = client.get(f"{lab.url}/api/classes/{code}/qr.svg")
    assert response.status_code == 200 and response.headers["content-type"] == "image/svg+xml"
    assert response.text.lstrip().startswith("<svg")


def test_a_question_asked_on_renormalised_cells_names_them_shares(lab):
    """Asked with the special tokens hidden and each row rescaled, a question's measure is named as the view's
    cells are: shares of the kept tokens' total, not the measure's own unit."""
    teacher = device("127.0.9.1")
    code, secret = start_class(teacher, lab.url)
    run = teacher.post(f"{lab.url}/api/analyze", json={"text": TEXT}).json()
    ask = {"kind": "attends", "run_id": run["run_id"], "token": 2, "layer": 1, "head": 0, "measure": "norm"}
    named = {}
    for sinks in ("show", "renormalise"):
        asked = teacher.post(f"{lab.url}/api/classes/{code}/question", json={**ask, "sinks": sinks}, headers=secret)
        assert asked.status_code == 201, asked.text
        named[sinks] = asked.json()["measure"]
    assert named["show"] == {"key": "norm", "symbol": "‖α·f(x)‖[i,j]", "name": "norm-weighted attention"}
    assert named["renormalise"] == {
        "key": "norm",
        "symbol": "share of ‖α·f(x)‖[i,j]",
        "name": "share of the kept tokens' norm-weighted attention",
    }
    teacher.delete(f"{lab.url}/api/classes/{code}", headers=secret)
