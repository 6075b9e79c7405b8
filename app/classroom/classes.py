"""Live classes: a teacher's view pushed to every learner who follows, and questions the class answers
together in rounds (peer instruction). Everything a class holds is in its backend (this process, or Redis
for several), under keys that expire with the class; events go out on the class's channel to every
stream (app.classroom.streams).

Only the teacher, who holds the class's secret, can move the class: the secret is given once, at the
start, and kept here only as its sha256.

A question is a state machine the server owns (Poll Everywhere, Kahoot): "open" (a round takes votes,
which stay hidden: only their count is published), "shown" (the round is closed and its tally published),
"revealed" (the answer, its exact value, every round's tally and the share right per round). A second
round opens only from round 1 shown; reveal closes an open round first. Every screen renders from the
state, which never carries the answer before reveal, so a screen that connects late learns nothing early.

A question may be a pre-test or a post-test (Hake's measure of what a class learned): one round, answered
alone, "open" then "closed" with nothing shown (no tally, no answer: a pre-test's would tell the post-test).
Once a pre-test and a post-test are closed, the class's share right in each and its normalised gain go to
every screen, and each learner may read its own; a post-test may then be revealed.

Bounds are kept per client (an address, and a browser within it by its lab_client cookie): one device
cannot hold more than a few live classes, add learners faster than a class joins, vote for others, or
hold the streams of a whole class. Presence and vote counts go out coalesced, at most once a second and
twice a second per class: a class of N streams costs N messages a second, not one per join to each."""

import asyncio
import csv
import hashlib
import hmac
import io
import json
import logging
import multiprocessing
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass

from app.classroom.backends import StoreDown
from app.classroom.schemas import (
    ClassGain,
    ClassSnapshot,
    EndEvent,
    Gain,
    GainEvent,
    Joined,
    Presence,
    QuestionEvent,
    QuestionState,
    ViewEvent,
    VotesEvent,
)
from app.classroom.streams import End, Streams
from app.engine.measures import worded
from app.engine.questions import Question
from app.serving.gate import Client

# Join codes avoid letters and digits that read alike on a projector (0/O, 1/I/L).
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 6
MAX_NICKNAME = 40
MAX_VIEW_BYTES = 128 * 1024
MAX_QUESTIONS = 500  # asked in one class: each is kept for the answers' CSV
HEARTBEAT_SECONDS = 15  # a comment line now and then keeps proxies and phones from closing an idle stream
PRESENCE_SECONDS = 1.0  # presence goes out at most this often per class
VOTES_SECONDS = 0.5  # and the vote count of the open round
TICK_SECONDS = 0.25
REAP_SECONDS = 2.0  # how often this process checks that the classes it streams are still on
log = logging.getLogger("uvicorn.error")


class ClassNotFound(LookupError):
    def __str__(self) -> str:
        return f"there is no class {self.args[0]} (or it has ended): ask the teacher for the code"


class NotTheTeacher(PermissionError):
    def __str__(self) -> str:
        return "only the teacher of this class can do that"


class NotYourLearner(PermissionError):
    def __str__(self) -> str:
        return "this learner joined the class from another browser"


class UnknownLearner(LookupError):
    def __str__(self) -> str:
        return "this learner is not in the class (it may have ended or restarted): join again"


class ClassLimit(RuntimeError):
    """A bound of the class mode was reached (classes, learners, actions per second): 429."""


class ViewTooLarge(ValueError):
    """413."""


class WrongPhase(RuntimeError):
    """The question is not in a phase that allows this (a vote for a closed round, a second round twice): 409."""


class BadChoice(ValueError):
    """A vote for no choice of the question: 422."""


class ClassModeOff(RuntimeError):
    """This lab cannot hold classes as it runs (several processes, no shared store): 503."""


@dataclass(frozen=True)
class ClassLimits:
    ttl_seconds: float
    max_classes: int
    max_learners: int
    actions_per_second: float
    classes_per_client: int
    starts_per_hour: int
    joins_per_minute: int
    learner_actions_per_second: float
    teacher_away_seconds: float
    streams_per_browser: int
    streams_per_address: int


def digest(text: str) -> str:
    """What the class store keeps of an address or a cookie: never the thing itself."""
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def browser_of(client: Client) -> str:
    """A browser: its lab_client cookie (kept when a phone changes networks), or, for a client that sends
    none, its address."""
    return digest(f"cookie:{client.cookie}" if client.cookie else f"address:{client.address}")


class Rate:
    """At most `per_second` actions a second per key, in this process."""

    def __init__(self, per_second: float):
        self.per_second = per_second
        self._moments: dict[str, deque[float]] = {}

    def take(self, key: str, message: str) -> None:
        now = time.monotonic()
        recent = self._moments.setdefault(key, deque())
        while recent and now - recent[0] >= 1:
            recent.popleft()
        if len(recent) >= self.per_second:
            raise ClassLimit(message)
        recent.append(now)
        if len(self._moments) > 10_000:  # forget keys that have been quiet for a second
            self._moments = {key: times for key, times in self._moments.items() if times and now - times[-1] < 1}


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


class Classes:
    def __init__(self, backend, limits: ClassLimits, unavailable: str | None = None):
        self.backend = backend
        self.limits = limits
        self.unavailable = unavailable  # why this lab holds no classes, or None
        ends_with_process = backend.name == "memory"
        self.streams = Streams(backend, limits.streams_per_browser, limits.streams_per_address, ends_with_process)
        self._teacher_actions = Rate(limits.actions_per_second)
        self._learner_actions = Rate(limits.learner_actions_per_second)
        self._kept_alive: dict[str, float] = {}  # code -> when this process last renewed the teacher's time
        self._locks: dict[str, asyncio.Lock] = {}  # one teacher move at a time per class, in this process
        self._presence_due: set[str] = set()
        self._votes_due: set[str] = set()
        self._presence: dict[str, tuple[float, asyncio.Task]] = {}  # code -> (read at, reading)
        self._ticking: asyncio.Task | None = None

    def start(self) -> None:
        self.streams.start()
        self._ticking = asyncio.create_task(self._tick())

    async def close(self) -> None:
        if self._ticking is not None:
            self._ticking.cancel()
            await asyncio.gather(self._ticking, return_exceptions=True)
        await self.streams.close()
        await self.backend.close()

    def _key(self, code: str, part: str = "") -> str:
        return f"lab:class:{code}{':' + part if part else ''}"

    def _alive_key(self, code: str) -> str:
        # Present while the teacher has a page open (or moved the class) within teacher_away_seconds.
        return f"lab:class-alive:{code}"

    # Starting and ending

    async def start_class(self, client: Client, anonymous: bool = False) -> tuple[str, str]:
        """A new class: its join code and the teacher's secret. An address holds at most
        classes_per_client live classes and starts at most starts_per_hour an hour. An anonymous class keeps
        no nickname (a class of minors leaves no names on the teacher's computer): its learners are numbers."""
        address = digest(client.address)
        owned = f"lab:class-owner:{address}"
        live = 0
        for code in await self.backend.hgetall(owned):
            if await self.backend.get(self._alive_key(code)) is None:
                await self.backend.hdel(owned, code)
            else:
                live += 1
        if live >= self.limits.classes_per_client:
            raise ClassLimit(
                f"this device already runs {live} classes (at most {self.limits.classes_per_client}): end one first"
            )
        if not await self._take_window(f"lab:class-starts:{address}", self.limits.starts_per_hour, 3600):
            raise ClassLimit(f"this device started {self.limits.starts_per_hour} classes this hour: try again later")
        if await self.backend.count_keys("lab:class-alive:") >= self.limits.max_classes:
            raise ClassLimit(f"{self.limits.max_classes} classes are running on this lab: try again later")
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        secret = secrets.token_urlsafe(24)
        record = {"secret": digest_secret(secret), "started": time.time(), "owner": address, "anonymous": anonymous}
        ttl = self.limits.ttl_seconds
        await self.backend.set(self._key(code), json.dumps(record), ttl)
        await self.backend.set(self._alive_key(code), "1", min(ttl, self.limits.teacher_away_seconds))
        await self.backend.hset(owned, {code: "1"}, ttl)
        return code, secret

    async def _take_window(self, key: str, limit: int, window: float) -> bool:
        """One more of at most `limit` in any `window` seconds, shared by every worker through the store.
        The window slides (this window's count plus the last one's, weighted by how much of it is still
        within `window`): fixed windows let a client take twice the limit across a boundary. A refused
        attempt is given back, so a client retrying past the bound is not shut out for longer."""
        now = time.time()
        current, elapsed = divmod(now, window)
        taken = await self.backend.incr(f"{key}:{int(current)}", 1, 2 * window)
        before = int(await self.backend.get(f"{key}:{int(current) - 1}") or 0)
        if taken + before * (1 - elapsed / window) > limit:
            await self.backend.incr(f"{key}:{int(current)}", -1, 2 * window)
            return False
        return True

    async def end(self, code: str, reason: str) -> None:
        """The class is over: every key goes, and every stream gets "ended" and closes."""
        found = await self.backend.get(self._key(code))
        questions = await self.backend.hgetall(self._key(code, "questions"))
        per_question = [
            self._key(code, f"{part}:{qid}") for qid in questions for part in ("votes-1", "votes-2", "revealed")
        ]
        parts = (
            "view",
            "question",
            "questions",
            "open",
            "learners",
            "browsers",
            "scores",
            "connected",
            "joined",
            "gain",
        )
        await self.backend.delete(
            self._key(code), self._alive_key(code), *(self._key(code, part) for part in parts), *per_question
        )
        if found is not None:
            await self.backend.hdel(f"lab:class-owner:{json.loads(found)['owner']}", code)
        for held in (self._locks, self._kept_alive, self._presence):
            held.pop(code, None)
        self._presence_due.discard(code)
        self._votes_due.discard(code)
        await self._publish(code, "ended", EndEvent(reason=reason))

    async def _record(self, code: str) -> dict:
        """The class's record, if it is on: started, not past its hours, its teacher not away too long."""
        if len(code) != CODE_LENGTH:
            raise ClassNotFound(code)
        found, alive = await self.backend.mget(self._key(code), self._alive_key(code))
        if found is None or alive is None:
            raise ClassNotFound(code)
        return json.loads(found)

    async def _ttl(self, code: str, record: dict | None = None) -> float:
        record = record or await self._record(code)
        return max(1.0, record["started"] + self.limits.ttl_seconds - time.time())

    async def keep_alive(self, code: str, record: dict | None = None) -> None:
        """The teacher is here: the class goes on for teacher_away_seconds more (within its hours)."""
        ttl = await self._ttl(code, record)
        await self.backend.expire(self._alive_key(code), min(ttl, self.limits.teacher_away_seconds))
        self._kept_alive[code] = time.monotonic()

    def is_teacher(self, record: dict, secret: str | None) -> bool:
        return bool(secret) and hmac.compare_digest(digest_secret(secret), record["secret"])

    async def check_teacher(self, code: str, secret: str | None) -> dict:
        record = await self._record(code)
        if not self.is_teacher(record, secret):
            raise NotTheTeacher()
        self._teacher_actions.take(code, f"at most {self.limits.actions_per_second:g} class actions a second")
        if time.monotonic() - self._kept_alive.get(code, 0) > 1:
            await self.keep_alive(code, record)
        return record

    async def _publish(self, code: str, kind: str, event) -> None:
        await self.streams.publish(code, json.dumps({"kind": kind, **event.model_dump(mode="json")}))

    # The teacher's moves (each checked with check_teacher first)

    async def show(self, code: str, view: dict) -> None:
        """The teacher's view becomes the class's: kept for learners who join later, sent to the rest."""
        encoded = json.dumps(view)
        if len(encoded) > MAX_VIEW_BYTES:
            raise ViewTooLarge(f"a class view is at most {MAX_VIEW_BYTES:,} bytes; this one is {len(encoded):,}")
        await self.backend.set(self._key(code, "view"), encoded, await self._ttl(code))
        await self._publish(code, "view", ViewEvent(view=view))

    def _lock(self, code: str) -> asyncio.Lock:
        return self._locks.setdefault(code, asyncio.Lock())

    async def ask(
        self, code: str, question: Question, view: dict, step: dict | None, text: str | None, test: str | None = None
    ) -> QuestionState:
        """A new question, its first round open; `test`: "pre" or "post" for a test. The one before stays in the
        class's record (for the CSV); a test still open is closed first, so that its votes count."""
        async with self._lock(code):
            ttl = await self._ttl(code)
            if await self.backend.hlen(self._key(code, "questions")) >= MAX_QUESTIONS:
                raise ClassLimit(f"a class asks at most {MAX_QUESTIONS} questions")
            before = await self._current(code) if await self.backend.get(self._key(code, "question")) else None
            if before is not None and before["test"] and before["phase"] == "open":
                await self._close_test(code, before, ttl)
            # An attends question is asked in a view: its cells' words are that view's (shares when renormalised).
            words = worded(question.measure, view.get("sinks", "show")) if question.measure else None
            record = {
                "id": secrets.token_hex(4),
                "asked": time.time(),
                "kind": question.kind,
                "test": test,
                "text": text or question.text,
                "step": step,
                "view": view,
                "measure": {"key": question.measure, "symbol": words.symbol, "name": words.name} if words else None,
                "choices": [
                    {
                        "index": index,
                        "label": choice.label,
                        "token": choice.token,
                        "head": choice.head,
                        "document": choice.document,
                    }
                    for index, choice in enumerate(question.choices)
                ],
                "values": [choice.value for choice in question.choices],
                "ranks": [choice.rank for choice in question.choices] if question.ranked else None,
                "ranked": question.ranked,
                "answer": question.answer,
                "right": list(question.right),
                "phase": "open",
                "round": 1,
                "tallies": [],
                "correct": None,
                "learners": None,
            }
            await self._save(code, record, ttl)
            await self.backend.set(self._key(code, "question"), record["id"], ttl)
            await self.backend.set(self._key(code, "open"), f"{record['id']}:1", ttl)
            return await self._announce(code, record)

    async def _save(self, code: str, record: dict, ttl: float) -> None:
        await self.backend.hset(self._key(code, "questions"), {record["id"]: json.dumps(record)}, ttl)

    async def _current(self, code: str) -> dict:
        qid = await self.backend.get(self._key(code, "question"))
        found = await self.backend.hget(self._key(code, "questions"), qid) if qid else None
        if found is None:
            raise WrongPhase("there is no question: ask one first")
        return json.loads(found)

    async def _close_round(self, code: str, record: dict) -> None:
        """No vote lands in the open round from now on (the vote's check and write are one step in the
        store), and its tally is final: kept in the record."""
        await self.backend.delete(self._key(code, "open"))
        votes = await self.backend.hgetall(self._key(code, f"votes-{record['round']}:{record['id']}"))
        record["tallies"].append(tally(votes))

    def _untested(self, record: dict, move: str) -> None:
        if record["test"]:
            raise WrongPhase(f"a {record['test']}-test {move}: it has one round, answered alone; close it")

    async def show_votes(self, code: str) -> QuestionState:
        """The open round closes and its histogram goes to every screen, without the answer."""
        async with self._lock(code):
            record = await self._current(code)
            self._untested(record, "shows no votes")
            if record["phase"] != "open":
                raise WrongPhase(f"round {record['round']}'s votes are {record['phase']} already")
            await self._close_round(code, record)
            record["phase"] = "shown"
            await self._save(code, record, await self._ttl(code))
            return await self._announce(code, record)

    async def again(self, code: str) -> QuestionState:
        """Round 2 of the same question, after the class has seen round 1's votes (and talked)."""
        async with self._lock(code):
            record = await self._current(code)
            self._untested(record, "has no second round")
            if (record["phase"], record["round"]) != ("shown", 1):
                raise WrongPhase("a second round opens once round 1's votes are shown, and only once")
            record["phase"], record["round"] = "open", 2
            ttl = await self._ttl(code)
            await self._save(code, record, ttl)
            await self.backend.set(self._key(code, "open"), f"{record['id']}:2", ttl)
            return await self._announce(code, record)

    async def close_test(self, code: str) -> QuestionState:
        """A test's only round closes, and nothing of it is shown: its votes count towards the class's gain."""
        async with self._lock(code):
            record = await self._current(code)
            if not record["test"]:
                raise WrongPhase("only a pre-test or a post-test closes without its votes: show them, or reveal")
            if record["phase"] != "open":
                raise WrongPhase(f"this {record['test']}-test is {record['phase']} already")
            await self._close_test(code, record, await self._ttl(code))
            return await self._announce(code, record)

    async def _close_test(self, code: str, record: dict, ttl: float) -> None:
        await self._close_round(code, record)
        record["phase"], record["correct"] = "closed", [share_right(record["tallies"][0], record["right"]), None]
        record["learners"] = await self.backend.hlen(self._key(code, "learners"))
        await self._save(code, record, ttl)
        gain, _ = await self._gains(code)
        if gain is not None:
            await self.backend.set(self._key(code, "gain"), gain.model_dump_json(), ttl)
            await self._publish(code, "gain", GainEvent(gain=gain))

    async def reveal(self, code: str) -> QuestionState:
        """The answer, its value, each round's tally and share right; every learner's score counts it. A
        post-test is closed first; a pre-test is never revealed (the post-test asks it again)."""
        async with self._lock(code):
            record = await self._current(code)
            ttl = await self._ttl(code)
            if record["test"] == "pre":
                raise WrongPhase("a pre-test's answer is not revealed: the post-test asks the class again")
            if record["test"] == "post" and record["phase"] == "open":
                await self._close_test(code, record, ttl)
            # Once, even from two workers at the same moment: a score counts each question once.
            if record["phase"] == "revealed" or not await self.backend.set_nx(
                self._key(code, f"revealed:{record['id']}"), "1", ttl
            ):
                raise WrongPhase("this question is revealed already")
            if record["phase"] == "open":
                await self._close_round(code, record)
            rounds = [
                await self.backend.hgetall(self._key(code, f"votes-{number}:{record['id']}"))
                for number in range(1, record["round"] + 1)
            ]
            right = {str(index) for index in record["right"]}
            record["correct"] = [*(share_right(tally(votes), record["right"]) for votes in rounds), None][:2]
            learners = await self.backend.hgetall(self._key(code, "learners"))
            scores = await self.backend.hgetall(self._key(code, "scores"))
            updated = {}
            for learner in learners:
                # A learner's answer is its last vote: round 2's where it voted again, else round 1's.
                final = next((votes[learner] for votes in reversed(rounds) if learner in votes), None)
                got, asked = (int(n) for n in scores.get(learner, "0/0").split("/"))
                updated[learner] = f"{got + (final in right)}/{asked + 1}"
            if updated:
                await self.backend.hset(self._key(code, "scores"), updated, ttl)
            record["phase"], record["learners"] = "revealed", len(learners)
            await self._save(code, record, ttl)
            return await self._announce(code, record)

    async def _announce(self, code: str, record: dict) -> QuestionState:
        state = await self._public(code, record)
        await self._publish(code, "question", QuestionEvent(question=state))
        return state

    async def _public(self, code: str, record: dict) -> QuestionState:
        """What every screen may know of the question now: never the answer before reveal, nor the tally
        of a round still open (only its count)."""
        votes = [sum(closed.values()) for closed in record["tallies"]]
        if record["phase"] == "open":
            votes.append(await self.backend.hlen(self._key(code, f"votes-{record['round']}:{record['id']}")))
        revealed = record["phase"] == "revealed"
        answer = record["answer"]
        return QuestionState(
            **{key: record[key] for key in ("id", "kind", "test", "text", "step", "view", "measure", "choices")},
            phase=record["phase"],
            round=record["round"],
            votes=votes,
            tallies=record["tallies"] if revealed or not record["test"] else [],
            answer={
                "choice": answer,
                "label": record["choices"][answer]["label"],
                "value": record["values"][answer],
                "right": record["right"],
            }
            if revealed
            else None,
            correct=record["correct"] if revealed else None,
            values=record["values"] if revealed else None,
            ranks=record.get("ranks") if revealed else None,
            ranked=record.get("ranked"),
        )

    async def question(self, code: str) -> QuestionState | None:
        try:
            return await self._public(code, await self._current(code))
        except WrongPhase:
            return None

    async def answers_csv(self, code: str) -> str:
        """The class's answers, one kind of row each (the column "row"), in the order asked and joined:
        - "learner": one learner on one question, both rounds' votes by label, the answer and whether each
          vote was right, once revealed (a test's once closed: this file is the teacher's);
        - "question": the whole class on it, each round's share right and the change in points;
        - "lesson": the means of those shares over the questions revealed after two rounds, and the change;
        - "learner gain" and "class gain", once a pre-test and a post-test are closed: pre, post and g.
        Nicknames, or "learner N" in join order (always in an anonymous class); no address, no id."""
        anonymous = is_anonymous(await self._record(code))
        records = sorted(
            (json.loads(found) for found in (await self.backend.hgetall(self._key(code, "questions"))).values()),
            key=lambda record: record["asked"],
        )
        learners = sorted(
            (
                json.loads(entry) | {"id": learner}
                for learner, entry in (await self.backend.hgetall(self._key(code, "learners"))).items()
            ),
            key=lambda entry: entry["number"],
        )
        name = {
            entry["id"]: (not anonymous and entry["nickname"]) or f"learner {entry['number']}" for entry in learners
        }
        rows = []
        paired = []  # each question's share right in round 1 and round 2, where it was revealed after both
        for record in records:
            rounds = [
                await self.backend.hgetall(self._key(code, f"votes-{number}:{record['id']}")) for number in (1, 2)
            ]
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
        gain, gains = await self._gains(code)
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

    # What learners do

    async def join(self, code: str, client: Client, nickname: str) -> Joined:
        """A learner for this browser: the one it joined with before, or a new one. New learners from one
        address come at most joins_per_minute a minute (a class behind one NAT joins from one address). An
        anonymous class drops the nickname unread."""
        record = await self._record(code)
        ttl = await self._ttl(code, record)
        browser = browser_of(client)
        anonymous = is_anonymous(record)
        nickname = "" if anonymous else nickname.strip()[:MAX_NICKNAME]
        # This browser's learner: by its cookie, or one its address joined before it had a cookie.
        for key in dict.fromkeys([browser, browser_of(Client(client.address))]):
            known = await self.backend.hget(self._key(code, "browsers"), key)
            if known is None or await self.backend.hget(self._key(code, "learners"), known) is None:
                continue
            try:
                entry = await self._learner(code, known, client, acting=False)
            except NotYourLearner:
                continue
            if nickname:
                entry["nickname"] = nickname
                await self.backend.hset(self._key(code, "learners"), {known: json.dumps(entry)}, ttl)
            return Joined(learner=known, rejoined=True, anonymous=anonymous)
        if await self.backend.hlen(self._key(code, "learners")) >= self.limits.max_learners:
            raise ClassLimit(f"this class is full ({self.limits.max_learners} learners)")
        if not await self._take_window(f"lab:class-joins:{digest(client.address)}", self.limits.joins_per_minute, 60):
            raise ClassLimit(f"{self.limits.joins_per_minute} learners joined from this address this minute: wait")
        learner = secrets.token_hex(8)
        number = await self.backend.incr(self._key(code, "joined"), 1, ttl)
        # A browser's first request carries no cookie yet (the lab gives one with its answer): a learner
        # joined so is bound to its address until its first action with a cookie binds it to that.
        entry = {
            "nickname": nickname,
            "following": True,
            "number": number,
            "browser": browser if client.cookie else None,
            "address": digest(client.address),
        }
        await self.backend.hset(self._key(code, "learners"), {learner: json.dumps(entry)}, ttl)
        await self.backend.hset(self._key(code, "browsers"), {browser: learner}, ttl)
        self._presence_due.add(code)
        return Joined(learner=learner, rejoined=False, anonymous=anonymous)

    async def _learner(self, code: str, learner: str, client: Client, acting: bool = True) -> dict:
        """The learner, if this browser joined it; its actions count against its own rate."""
        await self._record(code)
        found = await self.backend.hget(self._key(code, "learners"), learner)
        if found is None:
            raise UnknownLearner(learner)
        entry = json.loads(found)
        browser = browser_of(client)
        if entry["browser"] is None and client.cookie and hmac.compare_digest(entry["address"], digest(client.address)):
            entry["browser"] = browser
            ttl = await self._ttl(code)
            await self.backend.hset(self._key(code, "learners"), {learner: json.dumps(entry)}, ttl)
            await self.backend.hset(self._key(code, "browsers"), {browser: learner}, ttl)
        if not hmac.compare_digest(entry["browser"] or browser_of(Client(client.address)), browser):
            raise NotYourLearner()
        if acting:
            self._learner_actions.take(
                f"{code}:{learner}", f"at most {self.limits.learner_actions_per_second:g} actions a second"
            )
        return entry

    async def update(self, code: str, learner: str, client: Client, following: bool, nickname: str) -> None:
        """Whether the learner follows the teacher or explores alone, and the name it goes by (none in an
        anonymous class)."""
        entry = {**await self._learner(code, learner, client), "following": following}
        anonymous = is_anonymous(await self._record(code))
        entry["nickname"] = "" if anonymous else nickname.strip()[:MAX_NICKNAME]
        await self.backend.hset(self._key(code, "learners"), {learner: json.dumps(entry)}, await self._ttl(code))
        self._presence_due.add(code)

    async def vote(self, code: str, learner: str, client: Client, question: str, round: int, choice: int) -> None:
        """The learner's vote in an open round; a later vote in the same round replaces it."""
        await self._learner(code, learner, client)
        found = await self.backend.hget(self._key(code, "questions"), question)
        if found is None:
            raise WrongPhase("that question is closed")
        record = json.loads(found)
        if not 0 <= choice < len(record["choices"]):
            raise BadChoice(
                f"choice {choice} is not one of this question's: choices are 0 to {len(record['choices']) - 1}"
            )
        voted = await self.backend.hset_if(
            self._key(code, "open"),
            f"{question}:{round}",
            self._key(code, f"votes-{round}:{question}"),
            learner,
            str(choice),
            await self._ttl(code),
        )
        if not voted:
            raise WrongPhase(f"round {round} of that question is not open")
        self._votes_due.add(code)

    async def score(self, code: str, learner: str, client: Client) -> dict:
        await self._learner(code, learner, client)
        right, asked = (await self.backend.hget(self._key(code, "scores"), learner) or "0/0").split("/")
        _, gains = await self._gains(code)
        return {"right": int(right), "asked": int(asked), "gain": gains.get(learner)}

    async def _gains(self, code: str) -> tuple[ClassGain | None, dict[str, Gain]]:
        """What the closed pre-tests and post-tests measured, once there is one of each: the class's, and each
        learner's. A learner's pre is the share of the pre-test questions it answered
        that it got right (the same for post); the class's pre and post are the means over the learners who
        answered both (Hake's matched learners), and its gain is computed from those means."""
        records = [json.loads(found) for found in (await self.backend.hgetall(self._key(code, "questions"))).values()]
        tests = [record for record in records if record["test"] and record["phase"] in ("closed", "revealed")]
        if {record["test"] for record in tests} != {"pre", "post"}:
            return None, {}
        learners = await self.backend.hgetall(self._key(code, "learners"))
        counts = {learner: {"pre": [0, 0], "post": [0, 0]} for learner in learners}  # test -> [right, answered]
        for record in tests:
            right = {str(index) for index in record["right"]}
            for learner, vote in (await self.backend.hgetall(self._key(code, f"votes-1:{record['id']}"))).items():
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

    # Reading a class

    async def snapshot(self, code: str) -> ClassSnapshot:
        """What a screen that connects now needs: the view, the question's state and the class's numbers."""
        record = await self._record(code)
        view, gain = await self.backend.mget(self._key(code, "view"), self._key(code, "gain"))
        return ClassSnapshot(
            code=code,
            anonymous=is_anonymous(record),
            view=json.loads(view) if view else None,
            question=await self.question(code),
            gain=json.loads(gain) if gain else None,
            **(await self.presence(code)).model_dump(),
        )

    async def presence(self, code: str) -> Presence:
        """Learners, following, connected: read at most once a second per class in this process, however
        many streams connect at once."""
        read_at, reading = self._presence.get(code, (0.0, None))
        if reading is None or time.monotonic() - read_at > PRESENCE_SECONDS or reading.cancelled():
            reading = asyncio.ensure_future(self._read_presence(code))
            self._presence[code] = (time.monotonic(), reading)
            reading.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            return await asyncio.shield(reading)
        except StoreDown:
            self._presence.pop(code, None)
            raise

    async def _read_presence(self, code: str) -> Presence:
        learners = [json.loads(entry) for entry in (await self.backend.hgetall(self._key(code, "learners"))).values()]
        connected = int(await self.backend.get(self._key(code, "connected")) or 0)
        following = sum(entry["following"] for entry in learners)
        return Presence(learners=len(learners), following=following, connected=connected)

    @asynccontextmanager
    async def follow(self, code: str, client: Client, secret: str | None) -> AsyncIterator[AsyncIterator]:
        """The class's events for one screen: (kind, data) pairs, the snapshot first, then each change as it
        happens; None now and then for a heartbeat. A teacher's screen (it holds the secret) keeps the
        class on while it is open; a wrong secret is refused, so no learner passes for the teacher."""
        record = await self._record(code)
        teacher = secret is not None
        if teacher and not self.is_teacher(record, secret):
            raise NotTheTeacher()
        async with self.streams.open(code, client.address, browser_of(client)) as stream:
            if teacher:
                await self.keep_alive(code, record)
            snapshot = await self.snapshot(code)  # after the stream is open: nothing falls between the two
            if not teacher:
                await self._connected(code, +1)
            try:
                yield self._events(code, stream, teacher, snapshot)
            finally:
                if not teacher:
                    # Counted out even when the stream is cancelled (its client left, the server stops); a
                    # store that is down meanwhile costs the count, not a traceback.
                    leaving = asyncio.ensure_future(self._connected(code, -1))
                    leaving.add_done_callback(lambda done: done.cancelled() or done.exception())
                    with suppress(StoreDown, ClassNotFound):
                        await asyncio.shield(leaving)

    async def _events(self, code: str, stream, teacher: bool, snapshot: ClassSnapshot):
        yield "snapshot", snapshot.model_dump(mode="json")
        # A teacher's screen renews the teacher's time a few times within it.
        wait = min(HEARTBEAT_SECONDS, self.limits.teacher_away_seconds / 4) if teacher else HEARTBEAT_SECONDS
        while True:
            item = await stream.next(wait)
            if item is None:
                if teacher:
                    try:
                        await self.keep_alive(code)
                    except (ClassNotFound, StoreDown):
                        return  # the reaper ends the class's streams, or the store is down: reconnect
                yield None
            elif isinstance(item, End):
                if item.kind is not None:
                    yield item.kind, {"reason": item.reason}
                return
            else:
                event = json.loads(item)
                kind = event.pop("kind")
                yield kind, event
                if kind == "ended":
                    return

    async def _connected(self, code: str, change: int) -> None:
        await self.backend.incr(self._key(code, "connected"), change, await self._ttl(code))
        self._presence_due.add(code)

    # Coalesced events and the end of classes nobody teaches

    async def _tick(self) -> None:
        reaped = time.monotonic()
        while True:
            await asyncio.sleep(TICK_SECONDS)
            for code in list(self._votes_due):
                await self._quietly(self._send_votes(code))
            for code in list(self._presence_due):
                await self._quietly(self._send_presence(code))
            if time.monotonic() - reaped >= REAP_SECONDS:
                reaped = time.monotonic()
                for code in self.streams.codes():
                    await self._quietly(self._reap(code))
                self.backend.sweep()

    async def _quietly(self, work) -> None:
        """One class's coalesced events or end, without stopping the others': a store down for a moment
        (the subscription's watch says so once, not every tick), or a class that ended meanwhile, is
        expected; anything else is logged and the ticks go on."""
        try:
            await work
        except (StoreDown, ClassNotFound, WrongPhase):
            pass
        except Exception:
            log.exception("A class's coalesced events failed")

    async def _send_votes(self, code: str) -> None:
        if not await self.backend.set_nx(self._key(code, "votes-sent"), "1", VOTES_SECONDS):
            return  # another worker sent them within the interval: this process tries again next tick
        self._votes_due.discard(code)
        record = await self._current(code)
        if record["phase"] == "open":
            state = await self._public(code, record)
            await self._publish(code, "votes", VotesEvent(question=state.id, round=state.round, votes=state.votes))

    async def _send_presence(self, code: str) -> None:
        if not await self.backend.set_nx(self._key(code, "presence-sent"), "1", PRESENCE_SECONDS):
            return
        self._presence_due.discard(code)
        self._presence.pop(code, None)
        await self._publish(code, "presence", await self.presence(code))

    async def _reap(self, code: str) -> None:
        """A class this process streams that is over (its hours, or its teacher away too long) ends here."""
        found, alive = await self.backend.mget(self._key(code), self._alive_key(code))
        if found is not None and alive is not None:
            return
        if found is None:
            reason = "the class has ended"
        else:
            minutes = self.limits.teacher_away_seconds / 60
            reason = f"the teacher has had no page open for {minutes:g} minutes"
        log.info("Class %s ends: %s", code, reason)
        await self.end(code, reason)


def not_shared(backend, workers: int) -> str | None:
    """Why this lab can hold no class: it runs several server processes (`--workers`, which uvicorn starts
    as child processes), and a class in one process's memory would answer from one worker and not another
    (404 half of the time). Redis shares them; one process needs nothing."""
    several = workers > 1 or multiprocessing.parent_process() is not None
    if backend.name != "memory" or not several:
        return None
    return (
        "class mode is off: this lab runs several server processes and would keep each class in one of them; "
        "set ATTENTION_LAB_STORE=redis://… to share classes between them, or run one process"
    )


def is_anonymous(record: dict) -> bool:
    """Whether a class keeps no nicknames. A class that a lab before anonymous classes started (in a Redis
    shared with it) has no such field: it has names."""
    return record.get("anonymous", False)


def digest_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def share_right(counts: dict[str, int], right: list[int]) -> float | None:
    """The share of a round's votes that were right (None: nobody voted)."""
    total = sum(counts.values())
    return sum(counts.get(str(index), 0) for index in right) / total if total else None


def hake(pre: float | None, post: float | None) -> tuple[float | None, str | None]:
    """Hake's normalised gain g = (post − pre) / (1 − pre): the share of what was left to learn that was
    learned. (g, None), or (None, why not: a sentence, shown on its own on every screen and in the CSV)."""
    if pre is None or post is None:
        return None, f"No {'pre' if pre is None else 'post'}-test answered"
    if pre >= 1:
        return None, "The gain g is undefined: every pre-test answer was right (pre = 100%), nothing was left to gain"
    return (post - pre) / (1 - pre), None


def tally(votes: dict[str, str]) -> dict[str, int]:
    """How many learners chose each choice, by choice index: no names."""
    counts: dict[str, int] = {}
    for chosen in votes.values():
        counts[chosen] = counts.get(chosen, 0) + 1
    return counts
