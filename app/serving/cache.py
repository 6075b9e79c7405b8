"""Each worker's least-recently-used cache of runs, bounded both in count and in bytes. Only a cache: a run
it no longer holds is recomputed from its spec.

Runs computed in one batched pass share that pass's tensors, so the bytes are counted by storage: each one
once, however many kept runs hold a part of it, and until the last of them goes."""

import threading
from collections import Counter, OrderedDict
from typing import Generic, Protocol, TypeVar


class Holding(Protocol):
    storages: dict[int, int]  # storage address -> bytes


T = TypeVar("T", bound=Holding)


class RunCache(Generic[T]):
    def __init__(self, max_runs: int, max_bytes: int):
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self._runs: OrderedDict[str, T] = OrderedDict()
        self._holders: Counter[int] = Counter()  # storage -> kept runs holding it
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, run_id: str, run: T) -> None:
        with self._lock:
            if run_id in self._runs:
                self._let_go(self._runs.pop(run_id))
            self._runs[run_id] = run
            for storage, nbytes in run.storages.items():
                self._holders[storage] += 1
                if self._holders[storage] == 1:
                    self._bytes += nbytes
            # The newest run always stays, even alone over the byte bound: it was just asked for.
            while len(self._runs) > 1 and (len(self._runs) > self.max_runs or self._bytes > self.max_bytes):
                self._let_go(self._runs.popitem(last=False)[1])

    def get(self, run_id: str) -> T | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                self._runs.move_to_end(run_id)
            return run

    def __len__(self) -> int:
        return len(self._runs)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def _let_go(self, run: T) -> None:
        for storage, nbytes in run.storages.items():
            self._holders[storage] -= 1
            if not self._holders[storage]:
                del self._holders[storage]
                self._bytes -= nbytes
