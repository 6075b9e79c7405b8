"""Admission to forward passes: a bounded number run at once, a bounded number wait, the rest are told
to come back. Waiting happens on the event loop, so a full queue never ties up the server's threads."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Busy(RuntimeError):
    """No room: the client should retry after `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class PassGate:
    def __init__(self, max_passes: int, max_waiting: int, max_wait_seconds: float):
        self.max_passes = max_passes
        self.max_waiting = max_waiting
        self.max_wait_seconds = max_wait_seconds
        self._slots = asyncio.Semaphore(max_passes)
        self.waiting = 0

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        if self._slots.locked() and self.waiting >= self.max_waiting:
            raise Busy(f"{self.waiting} requests are already waiting for the model: try again in a moment", 2)
        self.waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.max_wait_seconds)
        except TimeoutError:
            raise Busy(f"waited {self.max_wait_seconds:g} s for the model: try again in a moment", 5) from None
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._slots.release()
