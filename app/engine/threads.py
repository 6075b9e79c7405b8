"""Which threads of a server use how many cores for torch.

torch runs each operation with an OpenMP team of the calling thread, and a team's workers live as long as
that thread. Once a process holds more OpenMP threads than it has cores, libgomp throttles them: workers
sleep between operations instead of spinning, and every operation of a pass waits for them to wake. In a
server the model was loaded on one thread, passes ran on others and views on others again, so the
process was always over, and a pass on a thread beside one other that had run torch took about half as long
again as alone (bench/README.md). So a server gives its cores to the threads that run the model's
passes (ModelThreads), and one core to every other thread (one_core_elsewhere). How long the passes'
workers spin before they sleep is set where the package starts (app/__init__.py: GOMP_SPINCOUNT), since
libgomp reads it only when torch loads it.

OpenMP keeps its thread count per thread and torch has no call for that (torch.set_num_threads sets the
calling thread's count and the count of every thread that has not run torch yet, and MKL's for all
threads), so the runtimes torch loaded are asked directly: libgomp for torch's own operations, MKL (inside
libtorch_cpu) for its matrix products. Where either is not found (another platform's build), its calls
are skipped and torch keeps its defaults.
"""

import asyncio
import ctypes
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import torch

Result = TypeVar("Result")


def _library(path: str | None, *functions: str):
    try:
        library = ctypes.CDLL(path)  # loaded already by torch: this finds it, it loads nothing new
    except (OSError, TypeError):  # TypeError: Windows has no handle for the process itself
        return None
    return library if all(hasattr(library, name) for name in functions) else None


OPENMP = _library(None, "omp_set_num_threads")
MKL = _library(str(Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"), "MKL_Set_Num_Threads_Local")
CORES = torch.get_num_threads()  # torch's own choice for this machine (or OMP_NUM_THREADS), read at import


def one_core_elsewhere() -> Callable[[], None]:
    """From now on every thread that has not run torch yet, and this one, uses one core: only the threads
    that call use_cores use more. Returns what undoes it (for a server that stops inside a longer process)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    return functools.partial(torch.set_num_threads, before)


def use_cores(cores: int) -> None:
    """torch on the calling thread uses `cores` cores, whatever the process's default."""
    torch.get_num_threads()  # torch sets a thread's count when it first uses it: before ours, not after
    if OPENMP is not None:
        OPENMP.omp_set_num_threads(cores)
    if MKL is not None:
        MKL.MKL_Set_Num_Threads_Local(cores)


@contextmanager
def on_cores(cores: int) -> Iterator[None]:
    """torch on the calling thread uses `cores` cores while the block runs, then as many as before."""
    before = torch.get_num_threads()
    use_cores(cores)
    try:
        yield
    finally:
        use_cores(before)


class ModelThreads:
    """The threads that run forward passes: as many as passes may run at once, sharing the cores."""

    def __init__(self, passes: int):
        self._executor = ThreadPoolExecutor(
            passes, thread_name_prefix="model", initializer=use_cores, initargs=(max(1, CORES // passes),)
        )

    async def run(self, work: Callable[..., Result], *args) -> Result:
        return await asyncio.get_running_loop().run_in_executor(self._executor, work, *args)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
