"""The shared spec store, one contract for both backends: SQLite in a file and a real redis-server."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from app.engine.errors import InvalidInput
from app.engine.spec import AtlasSpec, IndexSpec, RunSpec
from app.serving.spec_store import (
    PROGRESS_SECONDS,
    CorpusAllowance,
    RedisSpecStore,
    SqliteSpecStore,
    StoreError,
    TooManyCorpora,
    corpus_bytes,
    open_spec_store,
)
from app.settings import Settings
from tests.conftest import RedisServer, free_port


def spec(text: str, **fields) -> RunSpec:
    return RunSpec("sentence-transformers/all-MiniLM-L6-v2", "d" * 64, text, **fields)


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "redis"])
def open_store(request, tmp_path):
    """Opens stores on one backend, as several workers would; each test starts with it empty."""
    opened = []
    url = request.getfixturevalue("redis_server").url if request.param == "redis" else None

    def open_one(max_specs=100, max_age_seconds=3600.0, clock=None, max_corpus_bytes=2**30):
        bounds = {
            "max_specs": max_specs,
            "max_age_seconds": max_age_seconds,
            "max_corpus_bytes": max_corpus_bytes,
            "timeout_seconds": 2,
        }
        if clock is not None:
            bounds["clock"] = clock
        if url is None:
            store = SqliteSpecStore(tmp_path / "runs.sqlite3", **bounds)
        else:
            store = RedisSpecStore(url, **bounds)
        opened.append(store)
        return store

    yield open_one
    if url is not None:
        server = redis.Redis.from_url(url)
        progress = server.keys(f"{RedisSpecStore.PROGRESS}:*")
        server.delete(RedisSpecStore.SPECS, RedisSpecStore.ANALYZED, *RedisSpecStore.CORPORA, *progress)
    for store in opened:
        store.close()


def test_a_spec_comes_back_by_its_id(open_store):
    store = open_store()
    pair = spec("東京 🙂 the river bank", text_pair="it was steep", mask="causal", pooling="max", ablated=((0, 1),))
    store.put(pair)
    assert store.get(pair.run_id) == pair
    assert store.get(spec("never stored").run_id) is None
    store.ping()


def test_every_worker_sees_every_workers_specs(open_store):
    first, second = open_store(), open_store()
    one, other = spec("written by the first"), spec("written by the second")
    first.put(one)
    second.put(other)
    assert second.get(one.run_id) == one and first.get(other.run_id) == other


def test_the_least_recently_analyzed_go_first_past_the_count(open_store):
    clock = Clock()
    store = open_store(max_specs=3, clock=clock)
    specs = {name: spec(name) for name in "abcd"}
    for name in "abc":
        clock.now += 1
        store.put(specs[name])
    clock.now += 1
    store.put(specs["a"])  # analyzed again: now the newest
    clock.now += 1
    store.put(specs["d"])
    assert [name for name in "abcd" if store.get(specs[name].run_id)] == ["a", "c", "d"]


def test_specs_older_than_the_age_bound_are_gone(open_store):
    clock = Clock()
    store = open_store(max_age_seconds=60, clock=clock)
    old, renewed, new = spec("old"), spec("renewed"), spec("new")
    store.put(old)
    store.put(renewed)
    clock.now += 50
    store.put(renewed)
    clock.now += 20  # old was analyzed 70 s ago, renewed 20 s ago
    assert store.get(old.run_id) is None and store.get(renewed.run_id) == renewed
    store.put(new)  # a write evicts what has expired
    clock.now -= 20  # even seen from before it expired, old is no longer there
    assert store.get(old.run_id) is None and store.get(new.run_id) == new


def test_many_at_once_past_the_bound_leave_in_one_write(open_store):
    clock = Clock()
    store = open_store(max_specs=5000, max_age_seconds=10, clock=clock)
    for i in range(2500):
        store.put(spec(f"text {i}"))
    clock.now += 60
    latest = spec("after a quiet minute")
    store.put(latest)
    assert store.get(latest.run_id) == latest
    assert all(store.get(spec(f"text {i}").run_id) is None for i in range(0, 2500, 250))


def test_sqlite_workers_on_one_machine_open_a_new_file_and_write_at_once(tmp_path):
    """Workers of a first start: five processes open the same new file at the same moment (each waits,
    imported, for the go file) and write. Switching the new file to WAL together had failed one or more
    of them ("database is locked" at once) in a third of such starts; WAL and the busy timeout then let
    every write through."""
    script = (
        "import os, sys, time; from pathlib import Path; from app.engine.spec import RunSpec\n"
        "from app.serving.spec_store import SqliteSpecStore\n"
        "Path(sys.argv[3] + '.ready').touch()\n"
        # A millisecond's nap, not a spin: five spinning workers took the two cores from those still importing.
        "while not os.path.exists(sys.argv[4]): time.sleep(0.001)\n"
        "store = SqliteSpecStore(Path(sys.argv[1]), max_specs=10_000, max_age_seconds=3600, timeout_seconds=10)\n"
        "for i in range(100): store.put(RunSpec('m', 'd', f'{sys.argv[2]} {i}'))\n"
    )
    workers, go = 5, tmp_path / "go"
    for start in range(3):
        path = tmp_path / f"runs-{start}.sqlite3"
        names = [tmp_path / f"start-{start}-worker-{n}" for n in range(workers)]
        writers = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(path), f"worker {n}", str(name), str(go)], stderr=subprocess.PIPE
            )
            for n, name in enumerate(names)
        ]
        deadline = time.monotonic() + 60
        while not all(Path(f"{name}.ready").exists() for name in names):
            assert time.monotonic() < deadline, "the workers did not start"
            time.sleep(0.01)
        go.touch()
        errors = [writer.stderr.read() for writer in writers]
        assert [writer.wait(timeout=120) for writer in writers] == [0] * workers, errors
        go.unlink()
        store = SqliteSpecStore(path, max_specs=10_000, max_age_seconds=3600, timeout_seconds=2)
        assert all(store.get(RunSpec("m", "d", f"worker {n} {i}").run_id) for n in range(workers) for i in range(100))
        assert store._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def damaged_pages(path):
    """A real store file whose pages past the first two are overwritten: the header still reads."""
    store = SqliteSpecStore(path, max_specs=10_000, max_age_seconds=60, timeout_seconds=1)
    for i in range(2000):
        store.put(spec(f"text {i}"))
    store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    content = bytearray(path.read_bytes())
    content[8192:11192] = b"\x07" * 3000
    return bytes(content)


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda path: b"this is not a database, just text " * 200, "could not be opened: file is not a database"),
        (lambda path: b"SQLite format 3\x00" + b"\xff" * 4000, "could not be opened: file is not a database"),
        (damaged_pages, "is damaged (Page "),
    ],
    ids=["text", "bad-header", "damaged-pages"],
)
def test_a_damaged_sqlite_file_is_refused_in_one_line(tmp_path, damage, reason):
    path = tmp_path / "runs.sqlite3"
    path.write_bytes(damage(path))
    with pytest.raises(StoreError) as refused:
        SqliteSpecStore(path, max_specs=10, max_age_seconds=60, timeout_seconds=1)
    message = str(refused.value)
    assert message.startswith(f"the run store (sqlite {path}) {reason}") and "\n" not in message


def test_a_redis_that_stops_answers_with_its_name_and_is_used_again_when_back():
    server = RedisServer(free_port())
    server.start()
    store = RedisSpecStore(server.url, max_specs=10, max_age_seconds=60, timeout_seconds=1)
    before = spec("before the outage")
    store.put(before)
    server.stop()
    try:
        with pytest.raises(StoreError, match=rf"the run store \({server.url}\) is not answering: .*refused"):
            store.put(spec("during the outage"))
        with pytest.raises(StoreError, match="is not answering"):
            store.get(before.run_id)
    finally:
        server.start()  # an empty server: nothing was saved
    after = spec("after the outage")
    store.put(after)
    assert store.get(after.run_id) == after and store.get(before.run_id) is None
    store.close()
    server.stop()


def test_the_setting_chooses_the_store_and_its_name_hides_a_password(tmp_path):
    sqlite = open_spec_store(Settings(data_dir=tmp_path / "new" / "folder"))
    assert sqlite.name == f"sqlite {tmp_path / 'new' / 'folder' / 'runs.sqlite3'}"
    sqlite.close()
    remote = open_spec_store(Settings(store="redis://:s3cret@10.0.0.7:6380/2"))
    assert remote.name == "redis://10.0.0.7:6380/2"
    with pytest.raises(StoreError, match="give sqlite or a redis:// URL"):
        open_spec_store(Settings(store="postgres://db"))


def test_several_specs_are_kept_in_one_write_within_the_bound(open_store):
    store = open_store(max_specs=3)
    several = [spec(f"one of several {i}") for i in range(3)]
    store.put(*several)
    assert [store.get(one.run_id) for one in several] == several
    store.put(spec("a fourth"), spec("a fifth"))
    kept = [one for one in several if store.get(one.run_id) is not None]
    assert len(kept) == 1 and store.get(spec("a fifth").run_id) is not None


def test_a_corpus_runs_progress_is_said_to_every_worker_until_it_ends_or_falls_silent(open_store):
    """One worker says how far its run is; another reads it; once ended it is gone, and a worker that died
    mid-run leaves no run that seems to go on past PROGRESS_SECONDS (SQLite: its clock; Redis: the key's TTL)."""
    clock = Clock()
    running, asking = open_store(clock=clock), open_store(clock=clock)
    assert asking.progress("atlas-a") is None
    running.put_progress("atlas-a", 3, 11)
    running.put_progress("atlas-b", 1, 5)
    assert asking.progress("atlas-a") == (3, 11)
    running.put_progress("atlas-a", -1, -1)
    assert asking.progress("atlas-a") is None and asking.progress("atlas-b") == (1, 5)
    if isinstance(running, RedisSpecStore):
        assert 0 < redis.Redis.from_url(running.name).ttl(f"{RedisSpecStore.PROGRESS}:atlas-b") <= PROGRESS_SECONDS
    else:
        clock.now += PROGRESS_SECONDS + 1
        assert asking.progress("atlas-b") is None


def index(name: str, documents: int = 10, chars: int = 1000) -> IndexSpec:
    """A corpus of its own: about `documents` × `chars` bytes as a spec."""
    return IndexSpec("m", "d" * 64, tuple(f"{name} {n} " + "w" * chars for n in range(documents)))


def test_corpora_are_kept_within_their_bytes_newest_first_and_never_push_a_run_out(open_store):
    clock = Clock()
    size = corpus_bytes(index("a"))
    store = open_store(max_specs=3, clock=clock, max_corpus_bytes=3 * size + size // 2)
    runs = [spec(f"run {n}") for n in range(3)]
    for run in runs:
        clock.now += 1
        store.put(run)
    corpora = [index(f"c{n}") for n in range(5)]
    for corpus in corpora:
        clock.now += 1
        store.put(corpus)
    assert [store.get(corpus.run_id) for corpus in corpora] == [None, None, *corpora[2:]]
    assert [store.get(run.run_id) for run in runs] == runs  # three runs, at their own bound, all kept
    clock.now += 1
    store.put(corpora[2])  # named again: the newest now
    store.put(index("c5"))
    assert [store.get(corpus.run_id) is not None for corpus in corpora[2:]] == [True, False, True]
    atlas = AtlasSpec("m", "d" * 64, tuple(f"sentence {n} " + "w" * 1000 for n in range(10)))
    store.put(atlas, spec("run 3"))  # an atlas is a corpus too; a run and a corpus in one write
    assert store.get(atlas.run_id) == atlas and store.get(spec("run 3").run_id) == spec("run 3")
    assert store.get(runs[0].run_id) is None  # the runs' own bound, by count, as before


def test_a_corpus_larger_than_the_whole_bound_is_not_kept(open_store):
    store = open_store(max_corpus_bytes=1000)
    big = index("big")
    store.put(big)
    assert store.get(big.run_id) is None


def test_an_address_names_its_hours_bytes_of_new_corpora_and_no_more():
    clock = Clock()
    corpora = [index(f"c{n}") for n in range(4)]
    size = corpus_bytes(corpora[0])
    allowance = CorpusAllowance(3 * size, clock=clock)
    for corpus in corpora[:3]:
        clock.now += 60
        allowance.take("10.0.0.1", corpus.run_id, size)
    allowance.take("10.0.0.1", corpora[0].run_id, size)  # named already: nothing more
    with pytest.raises(TooManyCorpora) as refused:
        allowance.take("10.0.0.1", corpora[3].run_id, size)
    assert "ATTENTION_LAB_CORPUS_BYTES_PER_HOUR" in str(refused.value)
    assert refused.value.retry_after == 3600 - 2 * 60 + 1  # when the first leaves the hour
    allowance.take("10.0.0.2", corpora[3].run_id, size)  # another address is untouched
    clock.now += 3600 - 2 * 60
    allowance.take("10.0.0.1", corpora[3].run_id, size)
    with pytest.raises(InvalidInput, match="ATTENTION_LAB_CORPUS_BYTES_PER_HOUR"):
        allowance.take("10.0.0.3", "x", 3 * size + 1)  # never fits, whatever the wait
