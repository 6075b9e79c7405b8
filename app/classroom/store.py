"""Where a class lives: its keys in the backend (this process, or Redis for several), its record (when it
started, who owns it, whether it is anonymous), its hours, one lock per class for the teacher's moves, and its
channel to every stream. The class's parts (app.classroom.classes, rounds, answers, presence) read and write
through it."""

import asyncio
import json
import time
from dataclasses import dataclass

from app.classroom.errors import ClassNotFound
from app.classroom.streams import Streams

CODE_LENGTH = 6


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


class ClassStore:
    def __init__(self, backend, limits: ClassLimits, streams: Streams):
        self.backend = backend
        self.limits = limits
        self.streams = streams
        self._locks: dict[str, asyncio.Lock] = {}  # one teacher move at a time per class, in this process

    def key(self, code: str, part: str = "") -> str:
        return f"lab:class:{code}{':' + part if part else ''}"

    def alive_key(self, code: str) -> str:
        # Present while the teacher has a page open (or moved the class) within teacher_away_seconds.
        return f"lab:class-alive:{code}"

    async def record(self, code: str) -> dict:
        """The class's record, if it is on: started, not past its hours, its teacher not away too long."""
        if len(code) != CODE_LENGTH:
            raise ClassNotFound(code)
        found, alive = await self.backend.mget(self.key(code), self.alive_key(code))
        if found is None or alive is None:
            raise ClassNotFound(code)
        return json.loads(found)

    async def ttl(self, code: str, record: dict | None = None) -> float:
        record = record or await self.record(code)
        return max(1.0, record["started"] + self.limits.ttl_seconds - time.time())

    async def publish(self, code: str, kind: str, event) -> None:
        await self.streams.publish(code, json.dumps({"kind": kind, **event.model_dump(mode="json")}))

    def lock(self, code: str) -> asyncio.Lock:
        return self._locks.setdefault(code, asyncio.Lock())

    def forget(self, code: str) -> None:
        """What this process held for a class that has ended."""
        self._locks.pop(code, None)


def is_anonymous(record: dict) -> bool:
    """Whether a class keeps no nicknames. A class that a lab before anonymous classes started (in a Redis
    shared with it) has no such field: it has names."""
    return record.get("anonymous", False)
