"""Each worker's least-recently-used cache of runs, bounded both in count and in bytes. Only a cache: a run
it no longer holds is recomputed from its spec."""

import threading
from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    nbytes: int


T = TypeVar("T", bound=Sized)


class RunCache(Generic[T]):
    def __init__(self, max_runs: int, max_bytes: int):
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self._runs: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, run_id: str, run: T) -> None:
        with self._lock:
            self._runs[run_id] = run
            self._runs.move_to_end(run_id)
            # The newest run always stays, even alone over the byte bound: it was just asked for.
            while len(self._runs) > 1 and (len(self._runs) > self.max_runs or self._total() > self.max_bytes):
                self._runs.popitem(last=False)

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
            return self._total()

    def _total(self) -> int:
        return sum(run.nbytes for run in self._runs.values())
