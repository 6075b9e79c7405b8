"""Live classes: a teacher's view pushed to every learner who follows, and questions the class answers
together in rounds (peer instruction). Everything a class holds is in its backend (this process, or Redis
for several), under keys that expire with the class (app.classroom.store); events go out on the class's
channel to every stream (app.classroom.streams). The class's parts have modules of their own: the question's
state machine (app.classroom.rounds), the answers' CSV and the tests' gain (app.classroom.answers), and who is
there (app.classroom.presence). This module starts and ends classes, checks who may do what, and follows them.

Only the teacher, who holds the class's secret, can move the class: the secret is given once, at the
start, and kept here only as its sha256.

Bounds are kept per client (an address, and a browser within it by its lab_client cookie): one device
cannot hold more than a few live classes, add learners faster than a class joins, vote for others, or
hold the streams of a whole class. Presence and vote counts go out coalesced, at most once a second and
twice a second per class: a class of N streams costs N messages a second, not one per join to each."""

import asyncio
import hashlib
import hmac
import json
import logging
import multiprocessing
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from app.classroom.answers import class_gains
from app.classroom.backends import StoreDown
from app.classroom.errors import (
    ClassLimit,
    ClassNotFound,
    NotTheTeacher,
    NotYourLearner,
    UnknownLearner,
    ViewTooLarge,
    WrongPhase,
)
from app.classroom.presence import ClassPresence
from app.classroom.rounds import Rounds
from app.classroom.schemas import ClassSnapshot, EndEvent, Joined, ViewEvent
from app.classroom.store import CODE_LENGTH, ClassLimits, ClassStore, is_anonymous
from app.classroom.streams import End, Streams
from app.serving.gate import Client

# Join codes avoid letters and digits that read alike on a projector (0/O, 1/I/L).
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
MAX_NICKNAME = 40
MAX_VIEW_BYTES = 128 * 1024
HEARTBEAT_SECONDS = 15  # a comment line now and then keeps proxies and phones from closing an idle stream
TICK_SECONDS = 0.25
REAP_SECONDS = 2.0  # how often this process checks that the classes it streams are still on
log = logging.getLogger("uvicorn.error")


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


class Classes:
    def __init__(self, backend, limits: ClassLimits, unavailable: str | None = None):
        self.backend = backend
        self.limits = limits
        self.unavailable = unavailable  # why this lab holds no classes, or None
        ends_with_process = backend.name == "memory"
        self.streams = Streams(backend, limits.streams_per_browser, limits.streams_per_address, ends_with_process)
        self.store = ClassStore(backend, limits, self.streams)
        self.rounds = Rounds(self.store)  # the questions' state machine
        self.presence = ClassPresence(self.store)
        self._teacher_actions = Rate(limits.actions_per_second)
        self._learner_actions = Rate(limits.learner_actions_per_second)
        self._kept_alive: dict[str, float] = {}  # code -> when this process last renewed the teacher's time
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

    # Starting and ending

    async def start_class(self, client: Client, anonymous: bool = False) -> tuple[str, str]:
        """A new class: its join code and the teacher's secret. An address holds at most
        classes_per_client live classes and starts at most starts_per_hour an hour. An anonymous class keeps
        no nickname (a class of minors leaves no names on the teacher's computer): its learners are numbers."""
        address = digest(client.address)
        owned = f"lab:class-owner:{address}"
        live = 0
        for code in await self.backend.hgetall(owned):
            if await self.backend.get(self.store.alive_key(code)) is None:
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
        await self.backend.set(self.store.key(code), json.dumps(record), ttl)
        await self.backend.set(self.store.alive_key(code), "1", min(ttl, self.limits.teacher_away_seconds))
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
        found = await self.backend.get(self.store.key(code))
        questions = await self.backend.hgetall(self.store.key(code, "questions"))
        per_question = [
            self.store.key(code, f"{part}:{qid}") for qid in questions for part in ("votes-1", "votes-2", "revealed")
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
            self.store.key(code),
            self.store.alive_key(code),
            *(self.store.key(code, part) for part in parts),
            *per_question,
        )
        if found is not None:
            await self.backend.hdel(f"lab:class-owner:{json.loads(found)['owner']}", code)
        self._kept_alive.pop(code, None)
        for part in (self.store, self.rounds, self.presence):
            part.forget(code)
        await self.store.publish(code, "ended", EndEvent(reason=reason))

    async def keep_alive(self, code: str, record: dict | None = None) -> None:
        """The teacher is here: the class goes on for teacher_away_seconds more (within its hours)."""
        ttl = await self.store.ttl(code, record)
        await self.backend.expire(self.store.alive_key(code), min(ttl, self.limits.teacher_away_seconds))
        self._kept_alive[code] = time.monotonic()

    async def running(self) -> int:
        """Classes running on this lab now (their teachers' pages open lately)."""
        return await self.backend.count_keys("lab:class-alive:")

    def is_teacher(self, record: dict, secret: str | None) -> bool:
        return bool(secret) and hmac.compare_digest(digest_secret(secret), record["secret"])

    async def check_teacher(self, code: str, secret: str | None) -> dict:
        record = await self.store.record(code)
        if not self.is_teacher(record, secret):
            raise NotTheTeacher()
        self._teacher_actions.take(code, f"at most {self.limits.actions_per_second:g} class actions a second")
        if time.monotonic() - self._kept_alive.get(code, 0) > 1:
            await self.keep_alive(code, record)
        return record

    # The teacher's moves (each checked with check_teacher first)

    async def show(self, code: str, view: dict) -> None:
        """The teacher's view becomes the class's: kept for learners who join later, sent to the rest."""
        encoded = json.dumps(view)
        if len(encoded) > MAX_VIEW_BYTES:
            raise ViewTooLarge(f"a class view is at most {MAX_VIEW_BYTES:,} bytes; this one is {len(encoded):,}")
        await self.backend.set(self.store.key(code, "view"), encoded, await self.store.ttl(code))
        await self.store.publish(code, "view", ViewEvent(view=view))

    # What learners do

    async def join(self, code: str, client: Client, nickname: str) -> Joined:
        """A learner for this browser: the one it joined with before, or a new one. New learners from one
        address come at most joins_per_minute a minute (a class behind one NAT joins from one address). An
        anonymous class drops the nickname unread."""
        record = await self.store.record(code)
        ttl = await self.store.ttl(code, record)
        browser = browser_of(client)
        anonymous = is_anonymous(record)
        nickname = "" if anonymous else nickname.strip()[:MAX_NICKNAME]
        # This browser's learner: by its cookie, or one its address joined before it had a cookie.
        for key in dict.fromkeys([browser, browser_of(Client(client.address))]):
            known = await self.backend.hget(self.store.key(code, "browsers"), key)
            if known is None or await self.backend.hget(self.store.key(code, "learners"), known) is None:
                continue
            try:
                entry = await self._learner(code, known, client, acting=False)
            except NotYourLearner:
                continue
            if nickname:
                entry["nickname"] = nickname
                await self.backend.hset(self.store.key(code, "learners"), {known: json.dumps(entry)}, ttl)
            return Joined(learner=known, rejoined=True, anonymous=anonymous)
        if await self.backend.hlen(self.store.key(code, "learners")) >= self.limits.max_learners:
            raise ClassLimit(f"this class is full ({self.limits.max_learners} learners)")
        if not await self._take_window(f"lab:class-joins:{digest(client.address)}", self.limits.joins_per_minute, 60):
            raise ClassLimit(f"{self.limits.joins_per_minute} learners joined from this address this minute: wait")
        learner = secrets.token_hex(8)
        number = await self.backend.incr(self.store.key(code, "joined"), 1, ttl)
        # A browser's first request carries no cookie yet (the lab gives one with its answer): a learner
        # joined so is bound to its address until its first action with a cookie binds it to that.
        entry = {
            "nickname": nickname,
            "following": True,
            "number": number,
            "browser": browser if client.cookie else None,
            "address": digest(client.address),
        }
        await self.backend.hset(self.store.key(code, "learners"), {learner: json.dumps(entry)}, ttl)
        await self.backend.hset(self.store.key(code, "browsers"), {browser: learner}, ttl)
        self.presence.due.add(code)
        return Joined(learner=learner, rejoined=False, anonymous=anonymous)

    async def _learner(self, code: str, learner: str, client: Client, acting: bool = True) -> dict:
        """The learner, if this browser joined it; its actions count against its own rate."""
        await self.store.record(code)
        found = await self.backend.hget(self.store.key(code, "learners"), learner)
        if found is None:
            raise UnknownLearner(learner)
        entry = json.loads(found)
        browser = browser_of(client)
        if entry["browser"] is None and client.cookie and hmac.compare_digest(entry["address"], digest(client.address)):
            entry["browser"] = browser
            ttl = await self.store.ttl(code)
            await self.backend.hset(self.store.key(code, "learners"), {learner: json.dumps(entry)}, ttl)
            await self.backend.hset(self.store.key(code, "browsers"), {browser: learner}, ttl)
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
        anonymous = is_anonymous(await self.store.record(code))
        entry["nickname"] = "" if anonymous else nickname.strip()[:MAX_NICKNAME]
        await self.backend.hset(
            self.store.key(code, "learners"), {learner: json.dumps(entry)}, await self.store.ttl(code)
        )
        self.presence.due.add(code)

    async def vote(self, code: str, learner: str, client: Client, question: str, round: int, choice: int) -> None:
        """The learner's vote in an open round (Rounds.vote), if this browser joined the learner."""
        await self._learner(code, learner, client)
        await self.rounds.vote(code, learner, question, round, choice)

    async def score(self, code: str, learner: str, client: Client) -> dict:
        await self._learner(code, learner, client)
        right, asked = (await self.backend.hget(self.store.key(code, "scores"), learner) or "0/0").split("/")
        _, gains = await class_gains(self.store, code)
        return {"right": int(right), "asked": int(asked), "gain": gains.get(learner)}

    # Reading a class

    async def snapshot(self, code: str) -> ClassSnapshot:
        """What a screen that connects now needs: the view, the question's state and the class's numbers."""
        record = await self.store.record(code)
        view, gain = await self.backend.mget(self.store.key(code, "view"), self.store.key(code, "gain"))
        return ClassSnapshot(
            code=code,
            anonymous=is_anonymous(record),
            view=json.loads(view) if view else None,
            question=await self.rounds.question(code),
            gain=json.loads(gain) if gain else None,
            **(await self.presence.read(code)).model_dump(),
        )

    @asynccontextmanager
    async def follow(self, code: str, client: Client, secret: str | None) -> AsyncIterator[AsyncIterator]:
        """The class's events for one screen: (kind, data) pairs, the snapshot first, then each change as it
        happens; None now and then for a heartbeat. A teacher's screen (it holds the secret) keeps the
        class on while it is open; a wrong secret is refused, so no learner passes for the teacher."""
        record = await self.store.record(code)
        teacher = secret is not None
        if teacher and not self.is_teacher(record, secret):
            raise NotTheTeacher()
        async with self.streams.open(code, client.address, browser_of(client)) as stream:
            if teacher:
                await self.keep_alive(code, record)
            snapshot = await self.snapshot(code)  # after the stream is open: nothing falls between the two
            if not teacher:
                await self.presence.connected(code, +1)
            try:
                yield self._events(code, stream, teacher, snapshot)
            finally:
                if not teacher:
                    # Counted out even when the stream is cancelled (its client left, the server stops); a
                    # store that is down meanwhile costs the count, not a traceback.
                    leaving = asyncio.ensure_future(self.presence.connected(code, -1))
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

    # Coalesced events and the end of classes nobody teaches

    async def _tick(self) -> None:
        reaped = time.monotonic()
        while True:
            await asyncio.sleep(TICK_SECONDS)
            for code in list(self.rounds.votes_due):
                await self._quietly(self.rounds.send_votes(code))
            for code in list(self.presence.due):
                await self._quietly(self.presence.send(code))
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

    async def _reap(self, code: str) -> None:
        """A class this process streams that is over (its hours, or its teacher away too long) ends here."""
        found, alive = await self.backend.mget(self.store.key(code), self.store.alive_key(code))
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


def digest_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
