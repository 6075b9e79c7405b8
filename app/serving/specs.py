"""The shared spec store: run id -> spec, the one thing about a run that every worker, replica and restart
must agree on (the numbers are recomputed from the spec). SQLite in the data folder by default, nothing to
install, shared safely by the workers of one machine; Redis for replicas on several machines. Both keep
specs for a bounded time and count, evicting the ones analyzed longest ago.

The store also keeps the lab's secret, which signs the browsers' cookies: made by whichever process asks
first, then the same for every worker, replica and restart that shares the store; and how far each corpus
run under way is, so that any worker can say it, for PROGRESS_SECONDS after its last word (a worker that
died mid-run leaves no run that seems to go on)."""

import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from app.engine.spec import AtlasSpec, RunSpec, from_canonical
from app.settings import Settings

SQLITE_FILE = "runs.sqlite3"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
PROGRESS_SECONDS = 60


class StoreError(RuntimeError):
    """The store cannot be opened, read or written: the API answers 503 naming it; at start, one line."""


class SpecStore(Protocol):
    name: str  # what the operator configured, without any password: said in every error

    def put(self, *specs: RunSpec | AtlasSpec) -> None:
        """Keep each spec under its run id, as analyzed now (its age starts again), in one write."""

    def get(self, run_id: str) -> RunSpec | AtlasSpec | None:
        """The spec of a run (or atlas) id, or None if it was never stored or was evicted."""

    def put_progress(self, run_id: str, done: int, total: int) -> None:
        """How far the run under way of `run_id` is, said now; (-1, -1): it is not under way any more."""

    def progress(self, run_id: str) -> tuple[int, int] | None:
        """(done, total) of the run under way of `run_id`, if one was said within PROGRESS_SECONDS."""

    def ping(self) -> None:
        """Raise StoreError unless the store answers."""

    def secret(self) -> bytes:
        """The lab's secret: made once, then the same for everyone who shares the store."""

    def close(self) -> None: ...


def open_spec_store(settings: Settings, clock: Callable[[], float] = time.time) -> SpecStore:
    retention = {
        "max_specs": settings.max_specs,
        "max_age_seconds": settings.max_spec_age_days * 86_400,
        "timeout_seconds": settings.store_timeout_seconds,
        "clock": clock,
    }
    if settings.store == "sqlite":
        return SqliteSpecStore(settings.data_dir / SQLITE_FILE, **retention)
    if settings.store.startswith(REDIS_SCHEMES):
        return RedisSpecStore(settings.store, **retention)
    raise StoreError(f"ATTENTION_LAB_STORE is {settings.store!r}: give sqlite or a redis:// URL")


class SqliteSpecStore:
    """One file in WAL mode: readers never wait for the writer, and the workers of one machine share it,
    each waiting up to the timeout for another's write."""

    def __init__(self, path: Path, *, max_specs: int, max_age_seconds: float, timeout_seconds: float, clock=time.time):
        self.name = f"sqlite {path}"
        self.max_specs = max_specs
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self._lock = threading.Lock()  # one connection, shared by the server's threads
        with self._failing("opened"):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                path, timeout=timeout_seconds, isolation_level="IMMEDIATE", check_same_thread=False
            )
            self._switch_to_wal(timeout_seconds)
            self._db.execute("PRAGMA synchronous=NORMAL")  # a power cut may lose the last specs, never the file
            report = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if report != "ok":
                damage = next(line for line in report.splitlines() if not line.startswith("***"))
                raise StoreError(f"the run store ({self.name}) is damaged ({damage}): move the file away")
            with self._db:
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS specs (run_id TEXT PRIMARY KEY, spec TEXT NOT NULL, analyzed REAL)"
                )
                self._db.execute("CREATE INDEX IF NOT EXISTS specs_by_age ON specs (analyzed)")
                self._db.execute("CREATE TABLE IF NOT EXISTS lab (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS progress "
                    "(run_id TEXT PRIMARY KEY, done INTEGER, total INTEGER, said REAL)"
                )

    def _switch_to_wal(self, timeout_seconds: float) -> None:
        """WAL mode, which the file keeps once set. While another process switches a new file too (the
        workers of a first start), SQLite may answer "locked" at once, without waiting its busy timeout: the
        switch is tried again until that timeout (at the same start, 11 of 150 workers failed here)."""
        deadline = time.monotonic() + timeout_seconds
        while True:
            try:
                self._db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def put(self, *specs: RunSpec | AtlasSpec) -> None:
        now = self.clock()
        with self._lock, self._failing("written"), self._db:
            self._db.executemany(
                "INSERT INTO specs VALUES (?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET analyzed = excluded.analyzed",
                [(spec.run_id, spec.canonical(), now) for spec in specs],
            )
            self._db.execute("DELETE FROM specs WHERE analyzed < ?", (now - self.max_age_seconds,))
            (count,) = self._db.execute("SELECT count(*) FROM specs").fetchone()  # fast: 20 µs at 100,000
            if count > self.max_specs:
                self._db.execute(
                    "DELETE FROM specs WHERE run_id IN (SELECT run_id FROM specs ORDER BY analyzed LIMIT ?)",
                    (count - self.max_specs,),
                )

    def get(self, run_id: str) -> RunSpec | AtlasSpec | None:
        with self._lock, self._failing("read"):
            row = self._db.execute(
                "SELECT spec FROM specs WHERE run_id = ? AND analyzed >= ?",
                (run_id, self.clock() - self.max_age_seconds),
            ).fetchone()
        return None if row is None else from_canonical(row[0])

    def put_progress(self, run_id: str, done: int, total: int) -> None:
        now = self.clock()
        with self._lock, self._failing("written"), self._db:
            if done < 0:
                self._db.execute("DELETE FROM progress WHERE run_id = ?", (run_id,))
            else:
                self._db.execute("INSERT OR REPLACE INTO progress VALUES (?, ?, ?, ?)", (run_id, done, total, now))
            self._db.execute("DELETE FROM progress WHERE said < ?", (now - PROGRESS_SECONDS,))

    def progress(self, run_id: str) -> tuple[int, int] | None:
        with self._lock, self._failing("read"):
            row = self._db.execute(
                "SELECT done, total FROM progress WHERE run_id = ? AND said >= ?",
                (run_id, self.clock() - PROGRESS_SECONDS),
            ).fetchone()
        return None if row is None else tuple(row)

    def ping(self) -> None:
        with self._lock, self._failing("read"):
            self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def secret(self) -> bytes:
        with self._lock, self._failing("read"), self._db:
            self._db.execute("INSERT OR IGNORE INTO lab VALUES ('secret', ?)", (secrets.token_hex(32),))
            (value,) = self._db.execute("SELECT value FROM lab WHERE name = 'secret'").fetchone()
        return bytes.fromhex(value)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as error:
            raise StoreError(f"the run store ({self.name}) could not be {doing}: {error}") from None


# Put and evict in one step on the server: KEYS = the specs hash and the sorted set of when each spec was
# last analyzed; ARGV = run id, spec, now, max age (s), max specs. The oldest go first, the expired ones
# among them; ids leave the two keys in chunks (Lua's unpack has a limit).
PUT_AND_EVICT = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
local expired = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. (tonumber(ARGV[3]) - tonumber(ARGV[4])))
local over = redis.call('ZCARD', KEYS[2]) - expired - tonumber(ARGV[5])
local leaving = expired + math.max(over, 0)
if leaving == 0 then return end
local gone = redis.call('ZRANGE', KEYS[2], 0, leaving - 1)
for first = 1, #gone, 1000 do
  local chunk = {unpack(gone, first, math.min(first + 999, #gone))}
  redis.call('ZREM', KEYS[2], unpack(chunk))
  redis.call('HDEL', KEYS[1], unpack(chunk))
end
"""


class RedisSpecStore:
    """Specs in one Redis, shared by replicas on any number of machines. Short socket timeouts and one
    immediate retry: a store that is down costs a request a moment, not a hang, and a restarted server is
    reconnected to on the next request."""

    SPECS, ANALYZED, SECRET = "attention-lab:specs", "attention-lab:analyzed", "attention-lab:secret"
    PROGRESS = "attention-lab:progress"

    def __init__(self, url: str, *, max_specs: int, max_age_seconds: float, timeout_seconds: float, clock=time.time):
        self.name = re.sub(r"//[^/@]*@", "//", url)  # redis://:password@host -> redis://host
        self.max_specs = max_specs
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        try:
            self._redis = redis.Redis.from_url(
                url,
                socket_timeout=timeout_seconds,
                socket_connect_timeout=timeout_seconds,
                retry=Retry(NoBackoff(), 1),
                decode_responses=True,
            )
        except ValueError as error:
            raise StoreError(f"the run store ({self.name}) is not a Redis URL: {error}") from None
        self._put = self._redis.register_script(PUT_AND_EVICT)

    def put(self, *specs: RunSpec | AtlasSpec) -> None:
        now = self.clock()
        with self._failing():
            writes = self._redis.pipeline(transaction=False)  # one round trip for them all
            for spec in specs:
                args = [spec.run_id, spec.canonical(), now, self.max_age_seconds, self.max_specs]
                self._put(keys=[self.SPECS, self.ANALYZED], args=args, client=writes)
            writes.execute()

    def get(self, run_id: str) -> RunSpec | AtlasSpec | None:
        with self._failing():
            canonical, analyzed = (
                self._redis.pipeline(transaction=False).hget(self.SPECS, run_id).zscore(self.ANALYZED, run_id).execute()
            )
        if canonical is None or analyzed < self.clock() - self.max_age_seconds:
            return None
        return from_canonical(canonical)

    def put_progress(self, run_id: str, done: int, total: int) -> None:
        with self._failing():
            if done < 0:
                self._redis.delete(f"{self.PROGRESS}:{run_id}")
            else:
                self._redis.set(f"{self.PROGRESS}:{run_id}", f"{done},{total}", ex=PROGRESS_SECONDS)

    def progress(self, run_id: str) -> tuple[int, int] | None:
        with self._failing():
            said = self._redis.get(f"{self.PROGRESS}:{run_id}")
        return None if said is None else tuple(int(part) for part in said.split(","))

    def ping(self) -> None:
        with self._failing():
            self._redis.ping()

    def secret(self) -> bytes:
        with self._failing():
            self._redis.set(self.SECRET, secrets.token_hex(32), nx=True)
            return bytes.fromhex(self._redis.get(self.SECRET))

    def close(self) -> None:
        self._redis.close()

    @contextmanager
    def _failing(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as error:
            raise StoreError(f"the run store ({self.name}) is not answering: {error}") from None
