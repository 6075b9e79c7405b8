"""The threads on which the lab runs torch: model loading, forward passes, and what routes compute from runs.

torch's CPU kernels share their work with an OpenMP team (libgomp), one team per thread that runs them.
libgomp keeps a team's idle workers spinning, ready for the next parallel region, only while it manages
no more threads than the machine has cores; past that they sleep, and each of the few hundred parallel
regions of a pass waits for a wake-up. On this 2-core machine an 8-token pass took 8.1-8.7 ms on the one
thread that ran torch and 11-12 ms on a second one (measured alternately in one process), and the server
ran torch on its event loop, on whichever thread took a pass and on the request threads. So the lab runs
torch on as many threads as passes may run at once (settings.max_concurrent_passes, 1 by default),
sharing the cores between them, and nowhere else. An answer from runs made already waits for the pass
under way, never for one that has not started.
"""

import asyncio
import itertools
import queue
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import TypeVar

import torch

T = TypeVar("T")
TORCH_THREADS = torch.get_num_threads()  # torch's own choice for one pass: the cores it found
ANSWER, PASS = 0, 1  # an answer from a run made already goes before a pass that has not started


class TorchThreads:
    """Threads that take jobs by urgency, then in the order asked."""

    def __init__(self, count: int):
        self.count = count
        self._jobs: queue.PriorityQueue = queue.PriorityQueue()
        self._order = itertools.count()
        for number in range(count):
            threading.Thread(target=self._work, name=f"torch_{number}", daemon=True).start()

    def submit(self, urgency: int, job: Callable[[], T]) -> Future:
        future = Future()
        self._jobs.put((urgency, next(self._order), job, future))
        return future

    def stop(self) -> None:
        for _ in range(self.count):
            self._jobs.put((PASS + 1, next(self._order), None, None))

    def _work(self) -> None:
        while True:
            _, _, job, future = self._jobs.get()
            if job is None:
                return
            if not future.set_running_or_notify_cancel():  # its request went away before it started
                continue
            try:
                future.set_result(job())
            except BaseException as error:
                future.set_exception(error)


_threads = TorchThreads(1)


def use_threads(count: int) -> None:
    """Runs torch on `count` threads from now on, each with its share of the cores (set at start)."""
    global _threads
    if count != _threads.count:
        _threads.stop()
        _threads = TorchThreads(count)
        torch.set_num_threads(max(1, TORCH_THREADS // count))


async def computed(function: Callable[..., T], /, *args, **kwargs) -> T:
    """function(*args, **kwargs) on a torch thread, awaited on the event loop: an answer from runs made
    already, done before any pass that has not started (a request's answer waits for no one else's pass)."""
    return await asyncio.wrap_future(_threads.submit(ANSWER, partial(function, *args, **kwargs)))


async def computed_pass(function: Callable[..., T], /, *args, **kwargs) -> T:
    """A forward pass or a model load on a torch thread, after the answers asked for before it starts."""
    return await asyncio.wrap_future(_threads.submit(PASS, partial(function, *args, **kwargs)))


def computed_now(function: Callable[..., T], /, *args, **kwargs) -> T:
    """A job from outside an event loop (the command line, before it serves)."""
    return _threads.submit(PASS, partial(function, *args, **kwargs)).result()


async def computed_pieces(pieces: Iterator[bytes]) -> AsyncIterator[bytes]:
    """A body whose pieces are computed as they are sent, each on a torch thread."""
    while (piece := await computed(next, pieces, None)) is not None:
        yield piece
