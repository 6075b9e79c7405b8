"""Where a class's state lives and how its events fan out: in this process (the default: nothing to
install, one server process) or in Redis (keys that expire with the class, pub/sub for the events), so that
every worker and replica of the lab serves the same class. The class logic (app.classroom.classes and its parts) is
written once over these few operations.

Events: each process holds one subscription to every class's channel (a pattern), and fans the messages
out to its own streams (app.classroom.streams): one Redis connection per process, not one per learner. A
subscription that breaks says so (SubscriptionLost) instead of going quiet: its connection is never
silently reconnected, and a subscription with nothing to read pings itself, so a connection that died
without a word is found within two pings."""

import asyncio
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import wraps

import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

PING_SECONDS = 1.0  # a quiet subscription pings itself this often; no pong by the next ping: it is lost


class StoreDown(RuntimeError):
    """The class store does not answer (503, naming it)."""


class SubscriptionLost(RuntimeError):
    """The events subscription broke: messages published since may not have arrived."""


class MemoryBackend:
    name = "memory"

    def __init__(self):
        self._values: dict[str, tuple[float, object]] = {}  # key -> (expires at, str or dict or int)
        self._subscribers: set[asyncio.Queue] = set()

    def _live(self, key: str):
        expires, value = self._values.get(key, (0.0, None))
        if expires < time.monotonic():
            self._values.pop(key, None)
            return None
        return value

    def _table(self, key: str) -> dict:
        found = self._live(key)
        return found if isinstance(found, dict) else {}

    async def set(self, key: str, value: str, ttl: float) -> None:
        self._values[key] = (time.monotonic() + ttl, value)

    async def set_nx(self, key: str, value: str, ttl: float) -> bool:
        if self._live(key) is not None:
            return False
        await self.set(key, value, ttl)
        return True

    async def get(self, key: str) -> str | None:
        return self._live(key)

    async def mget(self, *keys: str) -> list[str | None]:
        return [self._live(key) for key in keys]

    async def expire(self, key: str, ttl: float) -> None:
        value = self._live(key)
        if value is not None:
            self._values[key] = (time.monotonic() + ttl, value)

    async def delete(self, *keys: str) -> None:
        for key in keys:
            self._values.pop(key, None)

    async def hset(self, key: str, mapping: dict[str, str], ttl: float) -> None:
        self._values[key] = (time.monotonic() + ttl, {**self._table(key), **mapping})

    async def hset_if(self, guard: str, expected: str, key: str, field: str, value: str, ttl: float) -> bool:
        """hset only while `guard` holds `expected`, in one step: nothing runs between the check and the write."""
        if self._live(guard) != expected:
            return False
        await self.hset(key, {field: value}, ttl)
        return True

    async def hget(self, key: str, field: str) -> str | None:
        return self._table(key).get(field)

    async def hgetall(self, key: str) -> dict[str, str]:
        return dict(self._table(key))

    async def hdel(self, key: str, field: str) -> None:
        self._table(key).pop(field, None)

    async def hlen(self, key: str) -> int:
        return len(self._table(key))

    async def incr(self, key: str, amount: int, ttl: float) -> int:
        value = (self._live(key) or 0) + amount
        self._values[key] = (time.monotonic() + ttl, value)
        return value

    async def count_keys(self, prefix: str) -> int:
        return sum(1 for key in list(self._values) if key.startswith(prefix) and self._live(key) is not None)

    def sweep(self) -> None:
        """Drops expired keys nobody read again (Redis expires its own)."""
        for key in list(self._values):
            self._live(key)

    async def publish(self, channel: str, message: str) -> None:
        for queue in self._subscribers:
            queue.put_nowait((channel, message))

    @asynccontextmanager
    async def subscription(self, prefix: str) -> AsyncIterator[AsyncIterator[tuple[str, str]]]:
        """(channel, message) for every channel that starts with `prefix`, in the order published."""
        queue: asyncio.Queue = asyncio.Queue()  # the publishers are this process's requests: no backlog grows

        async def messages():
            while True:
                channel, message = await queue.get()
                if channel.startswith(prefix):
                    yield channel, message

        self._subscribers.add(queue)
        try:
            yield messages()
        finally:
            self._subscribers.discard(queue)

    async def close(self) -> None:
        pass


def answering(method: Callable[..., Awaitable]):
    """A Redis error becomes StoreDown naming the store: a 503 that says what is down, not a traceback."""

    @wraps(method)
    async def checked(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        except (redis.RedisError, OSError) as error:
            raise StoreDown(f"the class store ({self.name}) is not answering: {error}") from None

    return checked


# hset only while the guard key holds the expected value: a vote lands only in a round that is open.
HSET_IF = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
"""


class RedisBackend:
    def __init__(self, url: str, timeout_seconds: float):
        self.name = re.sub(r"//[^/@]*@", "//", url)  # redis://:password@host -> redis://host
        # Short socket timeouts and one immediate retry, as the spec store's: a store that is down costs a
        # class request a moment, not a hang.
        options = {"socket_timeout": timeout_seconds, "socket_connect_timeout": timeout_seconds}
        self._redis = redis.Redis.from_url(url, decode_responses=True, retry=Retry(NoBackoff(), 1), **options)
        # The subscription's own client never retries: a reconnected pub/sub connection would resubscribe
        # in silence and lose what was published meanwhile (SubscriptionLost says so instead).
        self._subscriber = redis.Redis.from_url(url, decode_responses=True, retry=Retry(NoBackoff(), 0), **options)
        self._hset_if = self._redis.register_script(HSET_IF)

    def _ms(self, ttl: float) -> int:
        return max(1, int(ttl * 1000))

    @answering
    async def set(self, key: str, value: str, ttl: float) -> None:
        await self._redis.set(key, value, px=self._ms(ttl))

    @answering
    async def set_nx(self, key: str, value: str, ttl: float) -> bool:
        return bool(await self._redis.set(key, value, px=self._ms(ttl), nx=True))

    @answering
    async def get(self, key: str) -> str | None:
        return await self._redis.get(key)

    @answering
    async def mget(self, *keys: str) -> list[str | None]:
        return await self._redis.mget(keys)

    @answering
    async def expire(self, key: str, ttl: float) -> None:
        await self._redis.pexpire(key, self._ms(ttl))

    @answering
    async def delete(self, *keys: str) -> None:
        if keys:
            await self._redis.delete(*keys)

    @answering
    async def hset(self, key: str, mapping: dict[str, str], ttl: float) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            await pipe.hset(key, mapping=mapping).pexpire(key, self._ms(ttl)).execute()

    @answering
    async def hset_if(self, guard: str, expected: str, key: str, field: str, value: str, ttl: float) -> bool:
        return bool(await self._hset_if(keys=[guard, key], args=[expected, field, value, self._ms(ttl)]))

    @answering
    async def hget(self, key: str, field: str) -> str | None:
        return await self._redis.hget(key, field)

    @answering
    async def hgetall(self, key: str) -> dict[str, str]:
        return await self._redis.hgetall(key)

    @answering
    async def hdel(self, key: str, field: str) -> None:
        await self._redis.hdel(key, field)

    @answering
    async def hlen(self, key: str) -> int:
        return await self._redis.hlen(key)

    @answering
    async def incr(self, key: str, amount: int, ttl: float) -> int:
        async with self._redis.pipeline(transaction=True) as pipe:
            value, _ = await pipe.incrby(key, amount).pexpire(key, self._ms(ttl)).execute()
        return value

    @answering
    async def count_keys(self, prefix: str) -> int:
        return sum([1 async for _ in self._redis.scan_iter(match=f"{prefix}*", count=500)])

    def sweep(self) -> None:
        pass

    @answering
    async def publish(self, channel: str, message: str) -> None:
        await self._redis.publish(channel, message)

    @asynccontextmanager
    async def subscription(self, prefix: str) -> AsyncIterator[AsyncIterator[tuple[str, str]]]:
        """(channel, message) for every channel that starts with `prefix`; SubscriptionLost when the
        subscription breaks (its connection closed, killed, or silent past two pings), StoreDown when it
        cannot be made."""
        pubsub = self._subscriber.pubsub()
        try:
            await pubsub.psubscribe(f"{prefix}*")
            confirmed = await pubsub.get_message(timeout=PING_SECONDS * 2)
            if confirmed is None or confirmed["type"] != "psubscribe":
                raise SubscriptionLost("the subscription was not confirmed")
        except (redis.RedisError, OSError) as error:
            await pubsub.aclose()
            raise StoreDown(f"the class store ({self.name}) is not answering: {error}") from None
        try:
            yield self._messages(pubsub)
        finally:
            await pubsub.aclose()

    async def _messages(self, pubsub) -> AsyncIterator[tuple[str, str]]:
        pinged = False
        while True:
            try:
                message = await pubsub.get_message(timeout=PING_SECONDS)
                if message is None:
                    if pinged:
                        raise SubscriptionLost(f"the class store ({self.name}) stopped answering its pings")
                    await pubsub.ping()
                    pinged = True
                    continue
            except (redis.RedisError, OSError) as error:
                raise SubscriptionLost(f"the subscription to the class store ({self.name}) broke: {error}") from None
            if message["type"] == "pmessage":
                pinged = False  # the connection is alive: it just carried a message
                yield message["channel"], message["data"]
            elif message["type"] == "pong":
                pinged = False

    async def close(self) -> None:
        await self._redis.aclose()
        await self._subscriber.aclose()
