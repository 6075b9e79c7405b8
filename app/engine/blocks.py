"""Blocks of attention computed when asked, kept least-recently-used within a bound in bytes.

A run keeps what grows linearly with its tokens (q, k, v and the rest, app.engine.runs.Run); a block's
weights, [head, query, key], grow with their square: 8 heads at 8,192 tokens are 2 GiB of float32. They
are recomputed from the run's q and k as the model computes them, so a block here is only a cache entry,
named by what it follows from: the run's id (content-addressed) and the block's index."""

import threading
from collections import OrderedDict
from collections.abc import Callable

from torch import Tensor


class BlockCache:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[tuple[str, int], Tensor] = OrderedDict()
        self._bytes = 0
        self.computed = 0  # blocks computed since the start: a block kept is not computed again
        self._lock = threading.Lock()

    def get(self, run_id: str, layer: int, compute: Callable[[], Tensor]) -> Tensor:
        """Block `layer` of the run: kept, or computed now and kept. Two threads asking at once for a block
        not kept may both compute it: the same numbers, kept once."""
        block = self.kept(run_id, layer)
        if block is not None:
            return block
        block = compute()
        with self._lock:
            self.computed += 1
        self.put(run_id, layer, block)
        return block

    def put(self, run_id: str, layer: int, block: Tensor) -> None:
        """Keeps a block made elsewhere (a pass's own eager weights, bit for bit what compute would make); one
        larger than the whole bound is not kept."""
        key = (run_id, layer)
        with self._lock:
            if key not in self._blocks and block.nbytes <= self.max_bytes:
                self._blocks[key] = block
                self._bytes += block.nbytes
            while self._bytes > self.max_bytes:
                _, oldest = self._blocks.popitem(last=False)
                self._bytes -= oldest.nbytes

    def let_go_oldest(self) -> bool:
        """Lets the least recently used block go (also for the memory budget); False when none is kept."""
        with self._lock:
            if not self._blocks:
                return False
            _, oldest = self._blocks.popitem(last=False)
            self._bytes -= oldest.nbytes
            return True

    def kept(self, run_id: str, layer: int) -> Tensor | None:
        """The block if it is kept (then the most recently used), else None."""
        with self._lock:
            block = self._blocks.get((run_id, layer))
            if block is not None:
                self._blocks.move_to_end((run_id, layer))
            return block

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    held_bytes = nbytes  # what it holds for the memory budget

    def __len__(self) -> int:
        return len(self._blocks)
