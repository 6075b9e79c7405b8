"""Live classes: a teacher's view pushed to every learner who follows, and a question the class answers
together. Everything a class holds is in its backend (this process, or Redis for several), under keys that
expire with the class; events go out on the class's channel to every learner's stream.

Only the teacher, who holds the class's secret, can move the class: the secret is given once, at the
start, and kept here only as its sha256."""

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

# Join codes avoid letters and digits that read alike on a projector (0/O, 1/I/L).
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 6
MAX_NICKNAME = 40
MAX_VIEW_BYTES = 128 * 1024


class ClassNotFound(LookupError):
    def __str__(self) -> str:
        return f"there is no class {self.args[0]} (or it has ended): ask the teacher for the code"


class NotTheTeacher(PermissionError):
    def __str__(self) -> str:
        return "only the teacher of this class can do that"


class UnknownLearner(LookupError):
    def __str__(self) -> str:
        return "this learner is not in the class (it may have ended or restarted): join again"


class ClassLimit(RuntimeError):
    """A bound of the class mode was reached (classes, learners, actions per second): 429."""


@dataclass(frozen=True)
class ClassLimits:
    ttl_seconds: float
    max_classes: int
    max_learners: int
    actions_per_second: float


class Classes:
    def __init__(self, backend, limits: ClassLimits):
        self.backend = backend
        self.limits = limits
        self._last_action: dict[str, list[float]] = {}  # code -> recent teacher action times (this process)

    def _key(self, code: str, part: str = "") -> str:
        return f"lab:class:{code}{':' + part if part else ''}"

    async def start(self) -> tuple[str, str]:
        """A new class: its join code and the teacher's secret."""
        if await self.backend.count_keys("lab:class-code:") >= self.limits.max_classes:
            raise ClassLimit(f"{self.limits.max_classes} classes are running on this lab: try again later")
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        secret = secrets.token_urlsafe(24)
        record = {"secret": hashlib.sha256(secret.encode()).hexdigest(), "started": time.time()}
        await self.backend.set(self._key(code), json.dumps(record), self.limits.ttl_seconds)
        await self.backend.set(f"lab:class-code:{code}", "1", self.limits.ttl_seconds)
        return code, secret

    async def _record(self, code: str) -> dict:
        found = await self.backend.get(self._key(code)) if len(code) == CODE_LENGTH else None
        if found is None:
            raise ClassNotFound(code)
        return json.loads(found)

    async def check_teacher(self, code: str, secret: str | None) -> None:
        record = await self._record(code)
        given = hashlib.sha256((secret or "").encode()).hexdigest()
        if not secret or not hmac.compare_digest(given, record["secret"]):
            raise NotTheTeacher()
        now = time.monotonic()
        recent = [moment for moment in self._last_action.get(code, []) if now - moment < 1]
        if len(recent) >= self.limits.actions_per_second:
            raise ClassLimit(f"at most {self.limits.actions_per_second:g} class actions a second")
        self._last_action[code] = [*recent, now]

    async def _ttl(self, code: str) -> float:
        record = await self._record(code)
        return max(1.0, record["started"] + self.limits.ttl_seconds - time.time())

    async def _publish(self, code: str, kind: str, data: dict) -> None:
        await self.backend.publish(self._key(code), json.dumps({"kind": kind, **data}))

    # The teacher's actions (each checked with check_teacher first)

    async def show(self, code: str, view: dict) -> None:
        """The teacher's view becomes the class's: kept for learners who join later, sent to the rest."""
        encoded = json.dumps(view)
        if len(encoded) > MAX_VIEW_BYTES:
            raise ClassLimit(f"a view is at most {MAX_VIEW_BYTES:,} bytes")
        await self.backend.set(self._key(code, "view"), encoded, await self._ttl(code))
        await self._publish(code, "view", {"view": view})

    async def ask(self, code: str, question: dict) -> None:
        """Predict first, for the class: which token does the question's token attend to most?"""
        question = {**question, "id": secrets.token_hex(4)}
        ttl = await self._ttl(code)
        await self.backend.set(self._key(code, "question"), json.dumps(question), ttl)
        await self.backend.delete(self._key(code, "answers"))
        await self._publish(code, "question", {"question": question})

    async def reveal(self, code: str, answer: int, weight: float) -> dict:
        """The true answer to the open question: each learner's running score counts it."""
        question = await self.question(code)
        if question is None:
            raise ClassLimit("there is no open question to reveal")
        answers = await self.backend.hgetall(self._key(code, "answers"))
        ttl = await self._ttl(code)
        scores = await self.backend.hgetall(self._key(code, "scores"))
        for learner, chosen in answers.items():
            right, asked = (int(n) for n in scores.get(learner, "0/0").split("/"))
            right += int(chosen) == answer
            await self.backend.hset(self._key(code, "scores"), learner, f"{right}/{asked + 1}", ttl)
        await self.backend.delete(self._key(code, "question"))
        reveal = {"question": question["id"], "answer": answer, "weight": weight, "tally": tally(answers)}
        await self._publish(code, "reveal", reveal)
        return reveal

    # What learners do

    async def join(self, code: str, nickname: str) -> str:
        ttl = await self._ttl(code)
        learners = await self.backend.hgetall(self._key(code, "learners"))
        if len(learners) >= self.limits.max_learners:
            raise ClassLimit(f"this class is full ({self.limits.max_learners} learners)")
        learner = secrets.token_hex(8)
        entry = {"nickname": nickname.strip()[:MAX_NICKNAME], "following": True}
        await self.backend.hset(self._key(code, "learners"), learner, json.dumps(entry), ttl)
        await self._publish_presence(code)
        return learner

    async def _learner(self, code: str, learner: str) -> dict:
        found = (await self.backend.hgetall(self._key(code, "learners"))).get(learner)
        if found is None:
            raise UnknownLearner(learner)
        return json.loads(found)

    async def update(self, code: str, learner: str, following: bool, nickname: str) -> None:
        """Whether the learner follows the teacher or explores alone, and the name it goes by."""
        entry = {
            **await self._learner(code, learner),
            "following": following,
            "nickname": nickname.strip()[:MAX_NICKNAME],
        }
        await self.backend.hset(self._key(code, "learners"), learner, json.dumps(entry), await self._ttl(code))
        await self._publish_presence(code)

    async def answer(self, code: str, learner: str, question_id: str, token: int) -> dict:
        """A learner's guess for the open question (a later guess replaces an earlier one)."""
        await self._learner(code, learner)
        question = await self.question(code)
        if question is None or question["id"] != question_id:
            raise ClassLimit("that question is closed")
        ttl = await self._ttl(code)
        await self.backend.hset(self._key(code, "answers"), learner, str(token), ttl)
        counts = tally(await self.backend.hgetall(self._key(code, "answers")))
        await self._publish(code, "tally", {"question": question_id, "tally": counts})
        return counts

    async def score(self, code: str, learner: str) -> str:
        return (await self.backend.hgetall(self._key(code, "scores"))).get(learner, "0/0")

    # Reading a class

    async def question(self, code: str) -> dict | None:
        found = await self.backend.get(self._key(code, "question"))
        return json.loads(found) if found else None

    async def snapshot(self, code: str) -> dict:
        """What a learner who connects now needs: the view, the open question and the class's numbers."""
        await self._record(code)
        view = await self.backend.get(self._key(code, "view"))
        question = await self.question(code)
        answers = await self.backend.hgetall(self._key(code, "answers")) if question else {}
        return {
            "code": code,
            "view": json.loads(view) if view else None,
            "question": question,
            "tally": tally(answers),
            **await self.presence(code),
        }

    async def presence(self, code: str) -> dict:
        learners = [json.loads(entry) for entry in (await self.backend.hgetall(self._key(code, "learners"))).values()]
        connected = int(await self.backend.get(self._key(code, "connected")) or 0)
        return {
            "learners": len(learners),
            "following": sum(entry["following"] for entry in learners),
            "connected": connected,
        }

    async def _publish_presence(self, code: str) -> None:
        await self._publish(code, "presence", await self.presence(code))

    async def connected(self, code: str, change: int) -> None:
        await self.backend.incr(self._key(code, "connected"), change, await self._ttl(code))
        await self._publish_presence(code)

    def events(self, code: str):
        """The class's events, as a context manager over a queue of JSON strings."""
        return self.backend.subscribe(self._key(code))


def tally(answers: dict[str, str]) -> dict[str, int]:
    """How many learners chose each token, by token index: no names."""
    counts: dict[str, int] = {}
    for chosen in answers.values():
        counts[chosen] = counts.get(chosen, 0) + 1
    return counts
