"""How many cores a forward pass on the calling thread uses.

torch runs each operation with an OpenMP team per calling thread; OpenMP keeps the thread count per thread,
and torch has no call for that (torch.set_num_threads also changes the count of threads that have not run
torch yet). The OpenMP runtime torch loaded is in the process's global namespace, so it is asked directly.
"""

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def _openmp():
    try:
        runtime = ctypes.CDLL(None)  # what the process has loaded: torch's OpenMP among it
    except (OSError, TypeError):  # TypeError: Windows has no such handle
        return None
    found = all(hasattr(runtime, name) for name in ("omp_get_max_threads", "omp_set_num_threads"))
    return runtime if found else None


OPENMP = _openmp()


@contextmanager
def one_core(enabled: bool = True) -> Iterator[None]:
    """torch on this thread uses one core inside the block (where the OpenMP runtime is found)."""
    if not enabled or OPENMP is None:
        yield
        return
    torch.get_num_threads()  # torch sets a thread's count when it first uses it: before ours, not after
    before = OPENMP.omp_get_max_threads()
    OPENMP.omp_set_num_threads(1)
    try:
        yield
    finally:
        OPENMP.omp_set_num_threads(before)
