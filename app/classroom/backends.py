"""Where a class's state lives and how its events fan out: in this process (the default: nothing to
install, one server process) or in Redis (keys that expire with the class, pub/sub for the events), so that
every worker and replica of the lab serves the same class. The class logic (app.classroom.classes) is
written once over these few operations."""

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis.asyncio as redis

# A subscriber that falls this far behind (a stalled phone) loses the oldest events, not the server's memory.
QUEUE_BOUND = 256


class MemoryBackend:
    name = "memory"

    def __init__(self):
        self._values: dict[str, tuple[float, object]] = {}  # key -> (expires at, str or dict or int)
        self._channels: dict[str, set[asyncio.Queue]] = {}

    def _live(self, key: str):
        expires, value = self._values.get(key, (0.0, None))
        if expires < time.monotonic():
            self._values.pop(key, None)
            return None
        return value

    async def set(self, key: str, value: str, ttl: float) -> None:
        self._values[key] = (time.monotonic() + ttl, value)

    async def get(self, key: str) -> str | None:
        return self._live(key)

    async def delete(self, key: str) -> None:
        self._values.pop(key, None)

    async def hset(self, key: str, field: str, value: str, ttl: float) -> None:
        found = self._live(key)
        table = found if isinstance(found, dict) else {}
        table[field] = value
        self._values[key] = (time.monotonic() + ttl, table)

    async def hgetall(self, key: str) -> dict[str, str]:
        found = self._live(key)
        return dict(found) if isinstance(found, dict) else {}

    async def incr(self, key: str, amount: int, ttl: float) -> int:
        value = (self._live(key) or 0) + amount
        self._values[key] = (time.monotonic() + ttl, value)
        return value

    async def count_keys(self, prefix: str) -> int:
        return sum(1 for key in list(self._values) if key.startswith(prefix) and self._live(key) is not None)

    async def publish(self, channel: str, message: str) -> None:
        for queue in self._channels.get(channel, ()):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(message)

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[asyncio.Queue]:
        queue: asyncio.Queue = asyncio.Queue(QUEUE_BOUND)
        self._channels.setdefault(channel, set()).add(queue)
        try:
            yield queue
        finally:
            self._channels[channel].discard(queue)
            if not self._channels[channel]:
                del self._channels[channel]

    async def close(self) -> None:
        pass


class RedisBackend:
    def __init__(self, url: str):
        self.name = f"redis {url}"
        self._redis = redis.Redis.from_url(url, decode_responses=True)

    async def set(self, key: str, value: str, ttl: float) -> None:
        await self._redis.set(key, value, px=int(ttl * 1000))

    async def get(self, key: str) -> str | None:
        return await self._redis.get(key)

    async def delete(self, key: str) -> None:
        await self._redis.delete(key)

    async def hset(self, key: str, field: str, value: str, ttl: float) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            await pipe.hset(key, field, value).pexpire(key, int(ttl * 1000)).execute()

    async def hgetall(self, key: str) -> dict[str, str]:
        return await self._redis.hgetall(key)

    async def incr(self, key: str, amount: int, ttl: float) -> int:
        async with self._redis.pipeline(transaction=True) as pipe:
            value, _ = await pipe.incrby(key, amount).pexpire(key, int(ttl * 1000)).execute()
        return value

    async def count_keys(self, prefix: str) -> int:
        return sum([1 async for _ in self._redis.scan_iter(match=f"{prefix}*", count=500)])

    async def publish(self, channel: str, message: str) -> None:
        await self._redis.publish(channel, message)

    @asynccontextmanager
    async def subscribe(self, channel: str) -> AsyncIterator[asyncio.Queue]:
        """The channel's messages in a queue, like the memory backend's: one pub/sub connection each."""
        queue: asyncio.Queue = asyncio.Queue(QUEUE_BOUND)
        pubsub = self._redis.pubsub()
        await pubsub.subscribe(channel)

        async def relay():
            async for message in pubsub.listen():
                if message["type"] == "message":
                    if queue.full():
                        queue.get_nowait()
                    queue.put_nowait(message["data"])

        relaying = asyncio.create_task(relay())
        try:
            yield queue
        finally:
            relaying.cancel()
            await pubsub.aclose()

    async def close(self) -> None:
        await self._redis.aclose()
