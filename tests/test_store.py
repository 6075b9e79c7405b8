from dataclasses import dataclass

from app.store import RunStore


@dataclass
class Blob:
    nbytes: int


def test_evicts_least_recently_used_beyond_max_runs():
    store = RunStore(max_runs=2, max_bytes=10**9)
    store.put("a", Blob(1))
    store.put("b", Blob(1))
    assert store.get("a") is not None  # "a" is now the most recent
    store.put("c", Blob(1))
    assert store.get("b") is None and store.get("a") is not None and store.get("c") is not None
    assert len(store) == 2


def test_bounded_in_bytes():
    store = RunStore(max_runs=100, max_bytes=250)
    for key in "abcd":
        store.put(key, Blob(100))
    assert [key for key in "abcd" if store.get(key)] == ["c", "d"]
    assert store.nbytes == 200


def test_a_single_run_over_the_byte_bound_is_still_kept():
    store = RunStore(max_runs=10, max_bytes=50)
    store.put("a", Blob(10))
    store.put("big", Blob(500))
    assert store.get("big") is not None and store.get("a") is None
