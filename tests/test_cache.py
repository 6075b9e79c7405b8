import itertools
from dataclasses import dataclass

from app.serving.cache import RunCache

_addresses = itertools.count(1)


@dataclass
class Blob:
    storages: dict[int, int]


def blob(nbytes: int) -> Blob:
    """A run holding one storage of its own."""
    return Blob({next(_addresses): nbytes})


def test_evicts_least_recently_used_beyond_max_runs():
    cache = RunCache(max_runs=2, max_bytes=10**9)
    cache.put("a", blob(1))
    cache.put("b", blob(1))
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", blob(1))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert len(cache) == 2


def test_bounded_in_bytes():
    cache = RunCache(max_runs=100, max_bytes=250)
    for key in "abcd":
        cache.put(key, blob(100))
    assert [key for key in "abcd" if cache.get(key)] == ["c", "d"]
    assert cache.nbytes == 200


def test_a_single_run_over_the_byte_bound_is_still_kept():
    cache = RunCache(max_runs=10, max_bytes=50)
    cache.put("a", blob(10))
    cache.put("big", blob(500))
    assert cache.get("big") is not None and cache.get("a") is None


def test_storage_shared_by_runs_is_counted_once_until_the_last_goes():
    cache = RunCache(max_runs=2, max_bytes=10**9)
    batch = next(_addresses)
    cache.put("a", Blob({batch: 1000, next(_addresses): 10}))
    cache.put("b", Blob({batch: 1000, next(_addresses): 20}))
    assert cache.nbytes == 1030
    cache.put("a", Blob({batch: 1000, next(_addresses): 10}))  # the same run again replaces it
    assert cache.nbytes == 1030
    cache.put("c", blob(5))  # "b" goes; "a" still holds the batch
    assert cache.nbytes == 1015
    cache.put("d", blob(5))  # "a" goes, and the batch with it
    assert cache.nbytes == 10


def test_the_oldest_entry_goes_when_the_memory_budget_needs_room():
    cache = RunCache(max_runs=10, max_bytes=10**9)
    cache.put("a", blob(100))
    cache.put("b", blob(10))
    assert cache.let_go_oldest() and cache.held_bytes == 10 and cache.get("a") is None
    assert cache.let_go_oldest() and not cache.let_go_oldest() and cache.held_bytes == 0
