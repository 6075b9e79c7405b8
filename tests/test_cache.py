from dataclasses import dataclass

from app.serving.cache import RunCache


@dataclass
class Blob:
    nbytes: int


def test_evicts_least_recently_used_beyond_max_runs():
    cache = RunCache(max_runs=2, max_bytes=10**9)
    cache.put("a", Blob(1))
    cache.put("b", Blob(1))
    assert cache.get("a") is not None  # "a" is now the most recent
    cache.put("c", Blob(1))
    assert cache.get("b") is None and cache.get("a") is not None and cache.get("c") is not None
    assert len(cache) == 2


def test_bounded_in_bytes():
    cache = RunCache(max_runs=100, max_bytes=250)
    for key in "abcd":
        cache.put(key, Blob(100))
    assert [key for key in "abcd" if cache.get(key)] == ["c", "d"]
    assert cache.nbytes == 200


def test_a_single_run_over_the_byte_bound_is_still_kept():
    cache = RunCache(max_runs=10, max_bytes=50)
    cache.put("a", Blob(10))
    cache.put("big", Blob(500))
    assert cache.get("big") is not None and cache.get("a") is None
