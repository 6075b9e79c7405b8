"""Who is in a class: its learners, how many follow the teacher, how many screens are connected. Read at most
once a second per class in this process however many streams connect at once, and sent to every screen
coalesced (Phoenix Presence): a class of N streams costs N messages a second, not one per join to each."""

import asyncio
import json
import time

from app.classroom.backends import StoreDown
from app.classroom.schemas import Presence
from app.classroom.store import ClassStore

PRESENCE_SECONDS = 1.0  # presence goes out at most this often per class


class ClassPresence:
    def __init__(self, store: ClassStore):
        self.store = store
        self.backend = store.backend
        self.due: set[str] = set()  # classes whose presence changed since it last went out
        self._readings: dict[str, tuple[float, asyncio.Task]] = {}  # code -> (read at, reading)

    def forget(self, code: str) -> None:
        """What this process held for a class that has ended."""
        self._readings.pop(code, None)
        self.due.discard(code)

    async def read(self, code: str) -> Presence:
        """Learners, following, connected: read at most once a second per class in this process, however
        many streams connect at once."""
        read_at, reading = self._readings.get(code, (0.0, None))
        if reading is None or time.monotonic() - read_at > PRESENCE_SECONDS or reading.cancelled():
            reading = asyncio.ensure_future(self._count(code))
            self._readings[code] = (time.monotonic(), reading)
            reading.add_done_callback(lambda done: done.cancelled() or done.exception())
        try:
            return await asyncio.shield(reading)
        except StoreDown:
            self._readings.pop(code, None)
            raise

    async def _count(self, code: str) -> Presence:
        learners = [
            json.loads(entry) for entry in (await self.backend.hgetall(self.store.key(code, "learners"))).values()
        ]
        connected = int(await self.backend.get(self.store.key(code, "connected")) or 0)
        following = sum(entry["following"] for entry in learners)
        return Presence(learners=len(learners), following=following, connected=connected)

    async def connected(self, code: str, change: int) -> None:
        """A learner's screen connected (+1) or left (-1)."""
        await self.backend.incr(self.store.key(code, "connected"), change, await self.store.ttl(code))
        self.due.add(code)

    async def send(self, code: str) -> None:
        """The class's presence to every screen: at most every PRESENCE_SECONDS per class, whichever worker
        sends it."""
        if not await self.backend.set_nx(self.store.key(code, "presence-sent"), "1", PRESENCE_SECONDS):
            return
        self.due.discard(code)
        self._readings.pop(code, None)
        await self.store.publish(code, "presence", await self.read(code))
