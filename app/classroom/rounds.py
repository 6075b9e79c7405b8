"""A question is a state machine the server owns (Poll Everywhere, Kahoot): "open" (a round takes votes,
which stay hidden: only their count is published), "shown" (the round is closed and its tally published),
"revealed" (the answer, its exact value, every round's tally and the share right per round). A second
round opens only from round 1 shown; reveal closes an open round first. Every screen renders from the
state, which never carries the answer before reveal, so a screen that connects late learns nothing early.

A question may be a pre-test or a post-test (Hake's measure of what a class learned): one round, answered
alone, "open" then "closed" with nothing shown (no tally, no answer: a pre-test's would tell the post-test).
Once a pre-test and a post-test are closed, the class's share right in each and its normalised gain go to
every screen (app.classroom.answers); a post-test may then be revealed."""

import json
import secrets
import time
from collections.abc import Awaitable, Callable

from app.classroom.answers import class_gains
from app.classroom.errors import BadChoice, ClassLimit, WrongPhase
from app.classroom.schemas import GainEvent, QuestionEvent, QuestionState, VotesEvent
from app.classroom.store import ClassStore
from app.engine.measures import worded
from app.engine.questions import Question

MAX_QUESTIONS = 500  # asked in one class: each is kept for the answers' CSV
VOTES_SECONDS = 0.5  # the vote count of the open round goes out at most this often per class


class Rounds:
    """The questions of every class, asked in rounds: the teacher's moves (each checked by the class first,
    Classes.check_teacher), the learners' votes, and what every screen may know of the question now."""

    def __init__(self, store: ClassStore):
        self.store = store
        self.backend = store.backend
        self.votes_due: set[str] = set()  # classes whose vote count changed since it last went out

    def forget(self, code: str) -> None:
        """What this process held for a class that has ended."""
        self.votes_due.discard(code)

    async def ask(
        self,
        code: str,
        question: Question,
        view: dict,
        step: dict | None,
        text: str | None,
        test: str | None = None,
        answered_later: bool = False,
        written: str | None = None,
    ) -> QuestionState:
        """A new question, its first round open; `test`: "pre" or "post" for a test; `written`: a written question's
        words so far, for every screen. The one before stays in the class's record (for the CSV); a test still open
        is closed first, so that its votes count. `answered_later`: a question about what has not happened yet
        (which head a training will grow), its values and answer settled at its reveal (reveal's `settle`)."""
        async with self.store.lock(code):
            ttl = await self.store.ttl(code)
            if await self.backend.hlen(self.store.key(code, "questions")) >= MAX_QUESTIONS:
                raise ClassLimit(f"a class asks at most {MAX_QUESTIONS} questions")
            before = await self._current(code) if await self.backend.get(self.store.key(code, "question")) else None
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
                "values": None if answered_later else [choice.value for choice in question.choices],
                "ranks": [choice.rank for choice in question.choices] if question.ranked else None,
                "ranked": question.ranked,
                "words": written,
                "drawn": question.drawn,
                "answer": None if answered_later else question.answer,
                "right": [] if answered_later else list(question.right),
                "phase": "open",
                "round": 1,
                "tallies": [],
                "correct": None,
                "learners": None,
            }
            await self._save(code, record, ttl)
            await self.backend.set(self.store.key(code, "question"), record["id"], ttl)
            await self.backend.set(self.store.key(code, "open"), f"{record['id']}:1", ttl)
            return await self._announce(code, record)

    async def _save(self, code: str, record: dict, ttl: float) -> None:
        await self.backend.hset(self.store.key(code, "questions"), {record["id"]: json.dumps(record)}, ttl)

    async def _current(self, code: str) -> dict:
        qid = await self.backend.get(self.store.key(code, "question"))
        found = await self.backend.hget(self.store.key(code, "questions"), qid) if qid else None
        if found is None:
            raise WrongPhase("there is no question: ask one first")
        return json.loads(found)

    async def _close_round(self, code: str, record: dict) -> None:
        """No vote lands in the open round from now on (the vote's check and write are one step in the
        store), and its tally is final: kept in the record."""
        await self.backend.delete(self.store.key(code, "open"))
        votes = await self.backend.hgetall(self.store.key(code, f"votes-{record['round']}:{record['id']}"))
        record["tallies"].append(tally(votes))

    def _untested(self, record: dict, move: str) -> None:
        if record["test"]:
            raise WrongPhase(f"a {record['test']}-test {move}: it has one round, answered alone; close it")

    async def show_votes(self, code: str) -> QuestionState:
        """The open round closes and its histogram goes to every screen, without the answer."""
        async with self.store.lock(code):
            record = await self._current(code)
            self._untested(record, "shows no votes")
            if record["phase"] != "open":
                raise WrongPhase(f"round {record['round']}'s votes are {record['phase']} already")
            await self._close_round(code, record)
            record["phase"] = "shown"
            await self._save(code, record, await self.store.ttl(code))
            return await self._announce(code, record)

    async def again(self, code: str) -> QuestionState:
        """Round 2 of the same question, after the class has seen round 1's votes (and talked)."""
        async with self.store.lock(code):
            record = await self._current(code)
            self._untested(record, "has no second round")
            if (record["phase"], record["round"]) != ("shown", 1):
                raise WrongPhase("a second round opens once round 1's votes are shown, and only once")
            record["phase"], record["round"] = "open", 2
            ttl = await self.store.ttl(code)
            await self._save(code, record, ttl)
            await self.backend.set(self.store.key(code, "open"), f"{record['id']}:2", ttl)
            return await self._announce(code, record)

    async def close_test(self, code: str) -> QuestionState:
        """A test's only round closes, and nothing of it is shown: its votes count towards the class's gain."""
        async with self.store.lock(code):
            record = await self._current(code)
            if not record["test"]:
                raise WrongPhase("only a pre-test or a post-test closes without its votes: show them, or reveal")
            if record["phase"] != "open":
                raise WrongPhase(f"this {record['test']}-test is {record['phase']} already")
            await self._close_test(code, record, await self.store.ttl(code))
            return await self._announce(code, record)

    async def _close_test(self, code: str, record: dict, ttl: float) -> None:
        await self._close_round(code, record)
        record["phase"], record["correct"] = "closed", [share_right(record["tallies"][0], record["right"]), None]
        record["learners"] = await self.backend.hlen(self.store.key(code, "learners"))
        await self._save(code, record, ttl)
        gain, _ = await class_gains(self.store, code)
        if gain is not None:
            await self.backend.set(self.store.key(code, "gain"), gain.model_dump_json(), ttl)
            await self.store.publish(code, "gain", GainEvent(gain=gain))

    async def reveal(self, code: str, settle: Callable[[dict], Awaitable[Question]] | None = None) -> QuestionState:
        """The answer, its value, each round's tally and share right; every learner's score counts it. A
        post-test is closed first; a pre-test is never revealed (the post-test asks it again). A question
        answered later is answered first by `settle` (its record -> the question with its values), which may
        refuse (WrongPhase: not yet)."""
        async with self.store.lock(code):
            record = await self._current(code)
            ttl = await self.store.ttl(code)
            if record["test"] == "pre":
                raise WrongPhase("a pre-test's answer is not revealed: the post-test asks the class again")
            if record["answer"] is None and record["phase"] != "revealed":
                if settle is None:
                    raise WrongPhase("this question's answer is not known yet")
                answered = await settle(record)
                record["values"] = [choice.value for choice in answered.choices]
                record["answer"], record["right"] = answered.answer, list(answered.right)
            if record["test"] == "post" and record["phase"] == "open":
                await self._close_test(code, record, ttl)
            # Once, even from two workers at the same moment: a score counts each question once.
            if record["phase"] == "revealed" or not await self.backend.set_nx(
                self.store.key(code, f"revealed:{record['id']}"), "1", ttl
            ):
                raise WrongPhase("this question is revealed already")
            if record["phase"] == "open":
                await self._close_round(code, record)
            rounds = [
                await self.backend.hgetall(self.store.key(code, f"votes-{number}:{record['id']}"))
                for number in range(1, record["round"] + 1)
            ]
            right = {str(index) for index in record["right"]}
            record["correct"] = [*(share_right(tally(votes), record["right"]) for votes in rounds), None][:2]
            learners = await self.backend.hgetall(self.store.key(code, "learners"))
            scores = await self.backend.hgetall(self.store.key(code, "scores"))
            updated = {}
            for learner in learners:
                # A learner's answer is its last vote: round 2's where it voted again, else round 1's.
                final = next((votes[learner] for votes in reversed(rounds) if learner in votes), None)
                got, asked = (int(n) for n in scores.get(learner, "0/0").split("/"))
                updated[learner] = f"{got + (final in right)}/{asked + 1}"
            if updated:
                await self.backend.hset(self.store.key(code, "scores"), updated, ttl)
            record["phase"], record["learners"] = "revealed", len(learners)
            await self._save(code, record, ttl)
            return await self._announce(code, record)

    async def _announce(self, code: str, record: dict) -> QuestionState:
        state = await self._public(code, record)
        await self.store.publish(code, "question", QuestionEvent(question=state))
        return state

    async def _public(self, code: str, record: dict) -> QuestionState:
        """What every screen may know of the question now: never the answer before reveal, nor the tally
        of a round still open (only its count)."""
        votes = [sum(closed.values()) for closed in record["tallies"]]
        if record["phase"] == "open":
            votes.append(await self.backend.hlen(self.store.key(code, f"votes-{record['round']}:{record['id']}")))
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
            words=record.get("words"),
            drawn=record.get("drawn") if revealed else None,
        )

    async def question(self, code: str) -> QuestionState | None:
        try:
            return await self._public(code, await self._current(code))
        except WrongPhase:
            return None

    async def vote(self, code: str, learner: str, question: str, round: int, choice: int) -> None:
        """A learner's vote in an open round (the learner checked by its class, Classes.vote); a later vote in
        the same round replaces it."""
        found = await self.backend.hget(self.store.key(code, "questions"), question)
        if found is None:
            raise WrongPhase("that question is closed")
        record = json.loads(found)
        if not 0 <= choice < len(record["choices"]):
            raise BadChoice(
                f"choice {choice} is not one of this question's: choices are 0 to {len(record['choices']) - 1}"
            )
        voted = await self.backend.hset_if(
            self.store.key(code, "open"),
            f"{question}:{round}",
            self.store.key(code, f"votes-{round}:{question}"),
            learner,
            str(choice),
            await self.store.ttl(code),
        )
        if not voted:
            raise WrongPhase(f"round {round} of that question is not open")
        self.votes_due.add(code)

    async def send_votes(self, code: str) -> None:
        """The open round's vote count to every screen: at most every VOTES_SECONDS per class, whichever worker
        sends it."""
        if not await self.backend.set_nx(self.store.key(code, "votes-sent"), "1", VOTES_SECONDS):
            return  # another worker sent them within the interval: this process tries again next tick
        self.votes_due.discard(code)
        record = await self._current(code)
        if record["phase"] == "open":
            state = await self._public(code, record)
            await self.store.publish(code, "votes", VotesEvent(question=state.id, round=state.round, votes=state.votes))


def share_right(counts: dict[str, int], right: list[int]) -> float | None:
    """The share of a round's votes that were right (None: nobody voted)."""
    total = sum(counts.values())
    return sum(counts.get(str(index), 0) for index in right) / total if total else None


def tally(votes: dict[str, str]) -> dict[str, int]:
    """How many learners chose each choice, by choice index: no names."""
    counts: dict[str, int] = {}
    for chosen in votes.values():
        counts[chosen] = counts.get(chosen, 0) + 1
    return counts
