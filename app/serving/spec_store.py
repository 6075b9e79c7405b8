"""The shared spec store: run id -> spec, the one thing about a run that every worker, replica and restart
must agree on (the numbers are recomputed from the spec). SQLite in the data folder by default, nothing to
install, shared safely by the workers of one machine; Redis for replicas on several machines. Both keep
specs for a bounded time and count, evicting the ones analyzed longest ago.

Corpora (the specs of search indexes and atlases, up to a request body's size each, named without being
computed) are kept apart from the runs' specs, within max_corpus_bytes of their own: past it the corpora named
longest ago go first, so that no number of corpora ever pushes a run's spec out, and a run's spec is never
refused for room. CorpusAllowance bounds the bytes of new corpora one address names in an hour.

The store also keeps the lab's secret, which signs the browsers' cookies: made by whichever process asks
first, then the same for every worker, replica and restart that shares the store; and how far each corpus
run under way is, so that any worker can say it, for PROGRESS_SECONDS after its last word (a worker that
died mid-run leaves no run that seems to go on)."""

import re
import secrets
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from app.engine.errors import InvalidInput
from app.engine.spec import AtlasSpec, IndexSpec, RunSpec, WritingSpec, from_canonical
from app.serving.gate import TooManyWaiting
from app.settings import Settings

SQLITE_FILE = "runs.sqlite3"
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
PROGRESS_SECONDS = 60
HOUR = 3600.0
Spec = RunSpec | AtlasSpec | IndexSpec | WritingSpec
CORPORA = (AtlasSpec, IndexSpec)  # specs kept within max_corpus_bytes, apart from the runs'


class StoreError(RuntimeError):
    """The store cannot be opened, read or written: the API answers 503 naming it; at start, one line."""


class SpecStore(Protocol):
    name: str  # what the operator configured, without any password: said in every error

    def put(self, *specs: Spec) -> None:
        """Keep each spec under its run id, as analyzed now (its age starts again), in one write; a corpus's
        within max_corpus_bytes, the corpora named longest ago let go to make room."""

    def get(self, run_id: str) -> Spec | None:
        """The spec of a run (or atlas, or index) id, or None if it was never stored or was evicted."""

    def put_progress(self, run_id: str, done: int, total: int) -> None:
        """How far the run under way of `run_id` is, said now; (-1, -1): it is not under way any more."""

    def progress(self, run_id: str) -> tuple[int, int] | None:
        """(done, total) of the run under way of `run_id`, if one was said within PROGRESS_SECONDS."""

    def ping(self) -> None:
        """Raise StoreError unless the store answers."""

    def secret(self) -> bytes:
        """The lab's secret: made once, then the same for everyone who shares the store."""

    def close(self) -> None: ...


class TooManyCorpora(TooManyWaiting):
    """This address has named as many bytes of new corpora as it may in an hour (429); others are unaffected."""


def corpus_bytes(spec: Spec) -> int:
    """What the store keeps of a spec: its canonical JSON's bytes."""
    return len(spec.canonical().encode())


class CorpusAllowance:
    """At most `per_hour` bytes of new corpora an hour per client address, in this process: naming a corpus
    computes nothing, so without it one device stores the request body's worth of spec as often as it can send
    one. A corpus the address named within the hour costs nothing again (a page sends its corpus again)."""

    def __init__(self, per_hour: int, clock: Callable[[], float] = time.monotonic):
        self.per_hour = per_hour
        self.clock = clock
        self._named: dict[str, deque[tuple[float, str, int]]] = {}  # address -> (when, corpus id, bytes)

    def take(self, address: str, corpus_id: str, nbytes: int) -> None:
        """The corpus counted against the address's hour, or TooManyCorpora (422 for one larger than an hour's
        allowance, which no wait would let through)."""
        now = self.clock()
        for key in list(self._named):
            named = self._named[key]
            while named and named[0][0] <= now - HOUR:
                named.popleft()
            if not named:
                del self._named[key]
        named = self._named.setdefault(address, deque())
        if any(corpus == corpus_id for _, corpus, _ in named):
            return
        if nbytes > self.per_hour:
            raise InvalidInput(
                f"this corpus takes {nbytes:,} bytes as a spec; the lab keeps at most {self.per_hour:,} bytes of "
                "new corpora an address an hour (ATTENTION_LAB_CORPUS_BYTES_PER_HOUR): send a smaller one"
            )
        spent = sum(size for _, _, size in named)
        if spent + nbytes > self.per_hour:
            freed, wait = spent + nbytes - self.per_hour, HOUR
            for when, _, size in named:
                freed -= size
                if freed <= 0:
                    wait = when + HOUR - now
                    break
            raise TooManyCorpora(
                f"this address has named {spent:,} bytes of new corpora in the last hour, and this one takes "
                f"{nbytes:,} more (ATTENTION_LAB_CORPUS_BYTES_PER_HOUR is {self.per_hour:,}): try again in "
                f"{int(wait) // 60 + 1} min, or use a corpus already named",
                int(wait) + 1,
            )
        named.append((now, corpus_id, nbytes))


def open_spec_store(settings: Settings, clock: Callable[[], float] = time.time) -> SpecStore:
    retention = {
        "max_specs": settings.max_specs,
        "max_age_seconds": settings.max_spec_age_days * 86_400,
        "max_corpus_bytes": settings.max_corpus_bytes,
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
    each waiting up to the timeout for another's write. Each process reads through a connection of its own
    beside the one it writes through, so that a read (a run's spec, health's ping) never waits for a write
    under way in another of its threads (a pasted corpus is a long write)."""

    def __init__(
        self,
        path: Path,
        *,
        max_specs: int,
        max_age_seconds: float,
        timeout_seconds: float,
        max_corpus_bytes: int = Settings.model_fields["max_corpus_bytes"].default,
        clock=time.time,
    ):
        self.name = f"sqlite {path}"
        self.max_specs = max_specs
        self.max_age_seconds = max_age_seconds
        self.max_corpus_bytes = max_corpus_bytes
        self.clock = clock
        self._lock = threading.Lock()  # the writing connection, shared by the server's threads
        self._reading = threading.Lock()  # the reading one
        with self._failing("opened"):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                path, timeout=timeout_seconds, isolation_level="IMMEDIATE", check_same_thread=False
            )
            self._switch_to_wal(timeout_seconds)
            self._reader = sqlite3.connect(path, timeout=timeout_seconds, check_same_thread=False)
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
                # A corpus's age and size apart from its text: naming it again rewrites a small row, not 500 KB.
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS corpora (run_id TEXT PRIMARY KEY, analyzed REAL, bytes INTEGER)"
                )
                self._db.execute(
                    "CREATE TABLE IF NOT EXISTS corpus_specs (run_id TEXT PRIMARY KEY, spec TEXT NOT NULL)"
                )
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

    def put(self, *specs: Spec) -> None:
        now = self.clock()
        runs, corpora = [], []
        for spec in specs:
            text = spec.canonical()
            if isinstance(spec, CORPORA):
                corpora.append((spec.run_id, text, now, len(text.encode())))
            else:
                runs.append((spec.run_id, text, now))
        with self._lock, self._failing("written"), self._db:
            if runs:
                self._db.executemany(
                    "INSERT INTO specs VALUES (?, ?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET analyzed = excluded.analyzed",
                    runs,
                )
                self._db.execute("DELETE FROM specs WHERE analyzed < ?", (now - self.max_age_seconds,))
                (count,) = self._db.execute("SELECT count(*) FROM specs").fetchone()  # fast at 100,000 specs
                if count > self.max_specs:
                    self._db.execute(
                        "DELETE FROM specs WHERE run_id IN (SELECT run_id FROM specs ORDER BY analyzed LIMIT ?)",
                        (count - self.max_specs,),
                    )
            if corpora:
                self._db.executemany(
                    "INSERT OR IGNORE INTO corpus_specs VALUES (?, ?)", [(run_id, text) for run_id, text, *_ in corpora]
                )
                self._db.executemany(
                    "INSERT INTO corpora VALUES (?, ?, ?) "
                    "ON CONFLICT (run_id) DO UPDATE SET analyzed = excluded.analyzed",
                    [(run_id, when, nbytes) for run_id, _, when, nbytes in corpora],
                )
                self._db.execute("DELETE FROM corpora WHERE analyzed < ?", (now - self.max_age_seconds,))
                # The newest first, as many as fit in the bound; the rest go (a few thousand rows at most).
                self._db.execute(
                    "DELETE FROM corpora WHERE run_id IN (SELECT run_id FROM (SELECT run_id, sum(bytes) OVER "
                    "(ORDER BY analyzed DESC, run_id ROWS UNBOUNDED PRECEDING) AS kept FROM corpora) WHERE kept > ?)",
                    (self.max_corpus_bytes,),
                )
                self._db.execute("DELETE FROM corpus_specs WHERE run_id NOT IN (SELECT run_id FROM corpora)")

    def get(self, run_id: str) -> Spec | None:
        oldest = self.clock() - self.max_age_seconds
        with self._reading, self._failing("read"):
            row = self._reader.execute(
                "SELECT spec FROM specs WHERE run_id = ? AND analyzed >= ? UNION ALL SELECT spec FROM corpus_specs "
                "JOIN corpora USING (run_id) WHERE run_id = ? AND analyzed >= ?",
                (run_id, oldest, run_id, oldest),
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
        with self._reading, self._failing("read"):
            row = self._reader.execute(
                "SELECT done, total FROM progress WHERE run_id = ? AND said >= ?",
                (run_id, self.clock() - PROGRESS_SECONDS),
            ).fetchone()
        return None if row is None else tuple(row)

    def ping(self) -> None:
        with self._reading, self._failing("read"):
            self._reader.execute("SELECT count(*) FROM sqlite_master").fetchone()

    def secret(self) -> bytes:
        with self._lock, self._failing("read"), self._db:
            self._db.execute("INSERT OR IGNORE INTO lab VALUES ('secret', ?)", (secrets.token_hex(32),))
            (value,) = self._db.execute("SELECT value FROM lab WHERE name = 'secret'").fetchone()
        return bytes.fromhex(value)

    def close(self) -> None:
        self._reader.close()
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


# A corpus put, and the corpora past the age bound or the bytes bound evicted, oldest first, in one step on the
# server: KEYS = the corpora hash, the sorted set of when each was named, and their bytes in all; ARGV = id,
# spec, now, max age (s), max bytes.
PUT_CORPUS = """
local function drop(id)
  redis.call('DECRBY', KEYS[3], redis.call('HSTRLEN', KEYS[1], id))
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('INCRBY', KEYS[3], string.len(ARGV[2]))
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[3]) - tonumber(ARGV[4])))) do
  drop(id)
end
while tonumber(redis.call('GET', KEYS[3]) or '0') > tonumber(ARGV[5]) do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #oldest == 0 then
    redis.call('SET', KEYS[3], 0)
    break
  end
  drop(oldest[1])
end
"""


class RedisSpecStore:
    """Specs in one Redis, shared by replicas on any number of machines. Short socket timeouts and one
    immediate retry: a store that is down costs a request a moment, not a hang, and a restarted server is
    reconnected to on the next request."""

    SPECS, ANALYZED, SECRET = "attention-lab:specs", "attention-lab:analyzed", "attention-lab:secret"
    CORPORA = ("attention-lab:corpora", "attention-lab:corpora-named", "attention-lab:corpora-bytes")
    PROGRESS = "attention-lab:progress"

    def __init__(
        self,
        url: str,
        *,
        max_specs: int,
        max_age_seconds: float,
        timeout_seconds: float,
        max_corpus_bytes: int = Settings.model_fields["max_corpus_bytes"].default,
        clock=time.time,
    ):
        self.name = re.sub(r"//[^/@]*@", "//", url)  # redis://:password@host -> redis://host
        self.max_specs = max_specs
        self.max_age_seconds = max_age_seconds
        self.max_corpus_bytes = max_corpus_bytes
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
        self._put_corpus = self._redis.register_script(PUT_CORPUS)

    def put(self, *specs: Spec) -> None:
        now = self.clock()
        with self._failing():
            writes = self._redis.pipeline(transaction=False)  # one round trip for them all
            for spec in specs:
                if isinstance(spec, CORPORA):
                    args = [spec.run_id, spec.canonical(), now, self.max_age_seconds, self.max_corpus_bytes]
                    self._put_corpus(keys=list(self.CORPORA), args=args, client=writes)
                else:
                    args = [spec.run_id, spec.canonical(), now, self.max_age_seconds, self.max_specs]
                    self._put(keys=[self.SPECS, self.ANALYZED], args=args, client=writes)
            writes.execute()

    def get(self, run_id: str) -> Spec | None:
        corpora, named, _ = self.CORPORA
        with self._failing():
            reads = self._redis.pipeline(transaction=False)
            reads.hget(self.SPECS, run_id).zscore(self.ANALYZED, run_id).hget(corpora, run_id).zscore(named, run_id)
            run, analyzed, corpus, corpus_named = reads.execute()
        canonical, when = (run, analyzed) if run is not None else (corpus, corpus_named)
        if canonical is None or when < self.clock() - self.max_age_seconds:
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
