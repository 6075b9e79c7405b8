"""A class's answers as the teacher takes them home, and what its tests measured: the answers' CSV (a row per
learner and question, per question, for the lesson, and the gains), and Hake's normalised gain of the pre-tests
and post-tests, the class's and each learner's."""

import csv
import io
import json

from app.classroom.schemas import ClassGain, Gain
from app.classroom.store import ClassStore, is_anonymous

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value) -> str | int | float:
    """Every CSV the lab writes, here and in the page (static/js/export.js csvCell, the same rule): a number
    goes out as a number; a text cell whose first character, after any leading spaces, is = + - @, a tab or
    a carriage return gets a ' in front, so that a spreadsheet shows it as text and never runs it as a
    formula (OWASP, "CSV Injection"). A negative number stays a number: only text is defused."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    text = "" if value is None else str(value)
    return f"'{text}" if text.lstrip(" ")[:1] in FORMULA_STARTS else text


CSV_COLUMNS = [
    "row",
    "step",
    "step title",
    "question id",
    "question",
    "test",
    "learner",
    "round 1",
    "round 2",
    "answer",
    "right in round 1",
    "right in round 2",
    "share right in round 1",
    "share right in round 2",
    "change in points",
    "pre-test share right",
    "post-test share right",
    "gain g",
]


def shares_cells(first: float | None, second: float | None) -> dict:
    """A question's (or the lesson's) share right in each round, and the change between them in points."""
    return {
        "share right in round 1": None if first is None else round(first, 4),
        "share right in round 2": None if second is None else round(second, 4),
        "change in points": None if first is None or second is None else round(100 * (second - first), 1),
    }


def gain_cells(gain: Gain) -> dict:
    return {
        "pre-test share right": None if gain.pre is None else round(gain.pre, 4),
        "post-test share right": None if gain.post is None else round(gain.post, 4),
        "gain g": gain.why if gain.gain is None else round(gain.gain, 4),
    }


async def answers_csv(store: ClassStore, code: str) -> str:
    """The class's answers, one kind of row each (the column "row"), in the order asked and joined:
    - "learner": one learner on one question, both rounds' votes by label, the answer and whether each
      vote was right, once revealed (a test's once closed: this file is the teacher's);
    - "question": the whole class on it, each round's share right and the change in points;
    - "lesson": the means of those shares over the questions revealed after two rounds, and the change;
    - "learner gain" and "class gain", once a pre-test and a post-test are closed: pre, post and g.
    Nicknames, or "learner N" in join order (always in an anonymous class); no address, no id."""
    anonymous = is_anonymous(await store.record(code))
    records = sorted(
        (json.loads(found) for found in (await store.backend.hgetall(store.key(code, "questions"))).values()),
        key=lambda record: record["asked"],
    )
    learners = sorted(
        (
            json.loads(entry) | {"id": learner}
            for learner, entry in (await store.backend.hgetall(store.key(code, "learners"))).items()
        ),
        key=lambda entry: entry["number"],
    )
    name = {entry["id"]: (not anonymous and entry["nickname"]) or f"learner {entry['number']}" for entry in learners}
    rows = []
    paired = []  # each question's share right in round 1 and round 2, where it was revealed after both
    for record in records:
        rounds = [await store.backend.hgetall(store.key(code, f"votes-{number}:{record['id']}")) for number in (1, 2)]
        known = record["phase"] in ("closed", "revealed")
        step = record["step"] or {}
        about = {
            "step": step.get("index"),
            "step title": step.get("title"),
            "question id": record["id"],
            "question": record["text"],
            "test": record["test"],
        }
        labels = [choice["label"] for choice in record["choices"]]
        answer = labels[record["answer"]] if known else None
        right = {str(index) for index in record["right"]}
        for entry in learners:
            if known and entry["number"] > record["learners"]:
                continue  # joined after the reveal: never asked
            votes = [votes.get(entry["id"]) for votes in rounds]
            said = [("yes" if vote in right else "no") if known and vote is not None else None for vote in votes]
            rows.append(
                {
                    "row": "learner",
                    **about,
                    "learner": name[entry["id"]],
                    "round 1": labels[int(votes[0])] if votes[0] is not None else None,
                    "round 2": labels[int(votes[1])] if votes[1] is not None else None,
                    "answer": answer,
                    "right in round 1": said[0],
                    "right in round 2": said[1],
                }
            )
        shares = record["correct"] if known else [None, None]
        rows.append({"row": "question", **about, "answer": answer, **shares_cells(*shares)})
        if record["phase"] == "revealed" and None not in shares:
            paired.append(shares)
    if paired:
        means = [sum(shares[number] for shares in paired) / len(paired) for number in (0, 1)]
        about = f"the lesson: the mean over {len(paired)} question{'s' if len(paired) > 1 else ''} in two rounds"
        rows.append({"row": "lesson", "question": about, **shares_cells(*means)})
    gain, gains = await class_gains(store, code)
    if gain is not None:
        about = {"question": "pre-test and post-test", "test": "pre and post"}
        for entry in learners:
            rows.append(
                {"row": "learner gain", **about, "learner": name[entry["id"]], **gain_cells(gains[entry["id"]])}
            )
        rows.append({"row": "class gain", **about, **gain_cells(gain)})
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, restval="", lineterminator="\r\n")
    writer.writeheader()
    writer.writerows({key: csv_cell(value) for key, value in row.items()} for row in rows)
    return out.getvalue()


async def class_gains(store: ClassStore, code: str) -> tuple[ClassGain | None, dict[str, Gain]]:
    """What the closed pre-tests and post-tests measured, once there is one of each: the class's, and each
    learner's. A learner's pre is the share of the pre-test questions it answered
    that it got right (the same for post); the class's pre and post are the means over the learners who
    answered both (Hake's matched learners), and its gain is computed from those means."""
    records = [json.loads(found) for found in (await store.backend.hgetall(store.key(code, "questions"))).values()]
    tests = [record for record in records if record["test"] and record["phase"] in ("closed", "revealed")]
    if {record["test"] for record in tests} != {"pre", "post"}:
        return None, {}
    learners = await store.backend.hgetall(store.key(code, "learners"))
    counts = {learner: {"pre": [0, 0], "post": [0, 0]} for learner in learners}  # test -> [right, answered]
    for record in tests:
        right = {str(index) for index in record["right"]}
        for learner, vote in (await store.backend.hgetall(store.key(code, f"votes-1:{record['id']}"))).items():
            mark = counts[learner][record["test"]]
            mark[0] += vote in right
            mark[1] += 1
    gains = {}
    for learner, marks in counts.items():
        pre, post = (marks[test][0] / marks[test][1] if marks[test][1] else None for test in ("pre", "post"))
        gain, why = hake(pre, post)
        gains[learner] = Gain(pre=pre, post=post, gain=gain, why=why)
    matched = [gain for gain in gains.values() if gain.pre is not None and gain.post is not None]
    pre = sum(gain.pre for gain in matched) / len(matched) if matched else None
    post = sum(gain.post for gain in matched) / len(matched) if matched else None
    gain, why = hake(pre, post)
    if not matched:
        why = "No learner answered both a pre-test and a post-test"
    return ClassGain(pre=pre, post=post, gain=gain, why=why, learners=len(matched)), gains


def hake(pre: float | None, post: float | None) -> tuple[float | None, str | None]:
    """Hake's normalised gain g = (post − pre) / (1 − pre): the share of what was left to learn that was
    learned. (g, None), or (None, why not: a sentence, shown on its own on every screen and in the CSV)."""
    if pre is None or post is None:
        return None, f"No {'pre' if pre is None else 'post'}-test answered"
    if pre >= 1:
        return None, "The gain g is undefined: every pre-test answer was right (pre = 100%), nothing was left to gain"
    return (post - pre) / (1 - pre), None
