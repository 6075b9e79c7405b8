"""Each worker's least-recently-used cache of runs, bounded both in count and in bytes. Only a cache: a run
it no longer holds is recomputed from its spec.

Runs computed in one batched pass share that pass's tensors, so the bytes are counted by storage: each one
once, however many kept runs hold a part of it, and until the last of them goes.

What is computed from a run (a block of a measure, app.serving.lab) is kept in the same cache under its own
key, uncounted: it counts against the bound in bytes, not against the bound in runs.

Its bytes are part of the lab's memory budget (app.serving.memory.Budget), which lets its oldest entries go
where work needs room; what a request reads is counted by the request (Budget.hold) until it ends."""

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
        self._uncounted: set[str] = set()  # keys that are not runs: outside the bound in runs
        self._holders: Counter[int] = Counter()  # storage -> kept runs holding it
        self._bytes = 0
        self._lock = threading.Lock()

    def put(self, run_id: str, run: T, counted: bool = True) -> None:
        """Keeps `run` under `run_id`; counted=False for what is not a run (bounded in bytes only)."""
        with self._lock:
            if run_id in self._runs:
                self._let_go(run_id)
            self._runs[run_id] = run
            if not counted:
                self._uncounted.add(run_id)
            for storage, nbytes in run.storages.items():
                self._holders[storage] += 1
                if self._holders[storage] == 1:
                    self._bytes += nbytes
            # The newest entry always stays, even alone over the byte bound: it was just asked for.
            while len(self._runs) > 1 and self._bytes > self.max_bytes:
                self._let_go(next(iter(self._runs)))
            while len(self) > self.max_runs:
                self._let_go(next(key for key in self._runs if key not in self._uncounted))

    def get(self, run_id: str) -> T | None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is not None:
                self._runs.move_to_end(run_id)
            return run

    def __len__(self) -> int:
        """The runs kept (what else is kept is not counted)."""
        return len(self._runs) - len(self._uncounted)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    held_bytes = nbytes  # what it holds for the memory budget

    def let_go_oldest(self) -> bool:
        """Lets the least recently used entry go (for the memory budget); False when it keeps none."""
        with self._lock:
            if not self._runs:
                return False
            self._let_go(next(iter(self._runs)))
            return True

    def _let_go(self, run_id: str) -> None:
        run = self._runs.pop(run_id)
        self._uncounted.discard(run_id)
        for storage, nbytes in run.storages.items():
            self._holders[storage] -= 1
            if not self._holders[storage]:
                del self._holders[storage]
                self._bytes -= nbytes
