"""Keeping the process's memory near what the run store holds, and the memory settings within the
machine's: the budget every computation asks before it starts (Budget), and glibc's handling of the pages."""

import asyncio
import ctypes
import ctypes.util
import os
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.engine.runs import InvalidInput
from app.serving.gate import ANYONE, Busy, Client
from app.settings import ENV_PREFIX, GIB, Settings, SettingsError

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
# mallopt's parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
MMAP_THRESHOLD_MAX = 32 * 1024**2  # glibc's largest on 64-bit: bigger blocks are always mapped on their own
RESERVE_BLOCK_BYTES = 16 * 1024**2  # under the mmap threshold: reserved blocks come from the heap, which keeps them


def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    libc = ctypes.CDLL(name)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


LIBC = _libc()


# Where a container's memory bound is kept: cgroup v2, then v1 ("max" or a huge number: none).
CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def machine_memory() -> int:
    """The memory this process's machine has: its RAM, or less where its container is given less."""
    total = os.sysconf("SC_PHYS_PAGES") * PAGE_BYTES
    for limit in CGROUP_LIMITS:
        try:
            value = limit.read_text().strip()
        except OSError:
            continue
        if value.isdigit():
            total = min(total, int(value))
    return total


def available_memory() -> int:
    """What the system could give this process now without taking it from others (MemAvailable)."""
    try:
        with open("/proc/meminfo") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        return min(int(fields["MemAvailable"].split()[0]) * 1024, machine_memory())
    except (OSError, KeyError, ValueError):
        return machine_memory()


def check_memory(settings: Settings, memory: int | None = None) -> None:
    """A memory setting past the machine's memory stops the lab at start, in one line naming both."""
    memory = machine_memory() if memory is None else memory
    for name in ("max_store_bytes", "reserve_bytes"):
        value = getattr(settings, name)
        if value > memory:
            raise SettingsError(
                f"{ENV_PREFIX}{name.upper()}={value} ({value / GIB:.1f} GiB) is more than this machine's memory "
                f"({memory / GIB:.1f} GiB)"
            )


def reserve_size(settings: Settings, available: int | None = None) -> int:
    """What a process takes at start for its runs (reserve): the reserve setting, at most the cache's bound
    and at most half of what the machine has available now, shared by the workers that start with it."""
    available = available_memory() if available is None else available
    return min(settings.reserve_bytes, settings.max_store_bytes, available // (2 * settings.workers))


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_BYTES


def keep_freed_memory() -> None:
    """Let glibc keep freed memory for the next pass instead of giving it back to the system at once.

    A pass allocates its tensors anew; by default glibc maps large blocks on their own and unmaps them
    when freed, and trims the heap's free top, so the next pass takes those pages again from the kernel,
    zeroed, one fault each. Measured while the cache filled with 512-token runs that kept their weights
    (130 MB each): 2.0-2.5 page faults per page a run kept by default, 1.0-1.15 with this, and a pass
    180-280 ms instead of 250-770 ms (on a virtual machine that backs memory lazily, where a fault is dear).
    Since a run keeps 61 MB (its weights computed when asked), the pass's own passing tensors dominate and
    the two no longer differ by that measure; what the reserve gives the pass threads is tested. The
    process stays bounded all the same: past the bound, trim_if_over gives the free pages back.

    One arena for every thread: by default glibc gives threads arenas of their own, and memory freed in
    one (a view's, an evicted run's) is not reused by a pass that runs on another thread. Called before
    the model loads, so that no thread has taken an arena of its own yet."""
    if _has_libc("mallopt"):
        LIBC.mallopt(M_ARENA_MAX, 1)
        LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
        LIBC.mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


def reserve(nbytes: int) -> None:
    """Take about nbytes from the system now, write every page once, and keep them free for the runs to come
    (after keep_freed_memory, glibc keeps freed heap memory, and every thread draws on it). On a virtual
    machine that backs memory lazily, a page the process writes for the first time costs a host fault, and
    memory given back to the system is taken back by the host within seconds: measured here, 1.5 GB written
    anew took 2.7-4 s, and written again at once 0.2 s. A run keeps its tensors (about 130 MB at 512
    tokens when runs kept their weights; 61 MB since they are computed when asked), so while the cache
    filled every new run paid that price for its memory: analyze + attention over HTTP took 579 ms at 512
    tokens and 124 ms at 128 before, 444 ms and 64 ms with this (servers alternating), and a class burst's
    passes 600 page faults over eight bursts instead of 206,000.
    Only with glibc's mallopt: another allocator would give the freed blocks straight back."""
    if not _has_libc("mallopt"):
        return
    blocks = []
    try:
        for count in range(1, nbytes // RESERVE_BLOCK_BYTES + 1):
            block = LIBC.malloc(RESERVE_BLOCK_BYTES)
            if not block:
                break
            ctypes.memset(block, 1, RESERVE_BLOCK_BYTES)
            blocks.append(block)
            if count % PIN_EVERY == 0:
                _PINS.append(LIBC.malloc(RESERVE_BLOCK_BYTES))  # never written: it costs no memory
    finally:
        for block in blocks:
            LIBC.free(block)


# glibc gives the heap's free top back to the system once it passes M_TRIM_THRESHOLD, at most 2 GiB: freed
# whole, a reserve that large would go back at once. A block kept allocated after every PIN_EVERY blocks
# (as large as they are, so that it comes from the top, not from a free list) splits it into free chunks of
# about 1 GiB, which glibc keeps (only malloc_trim gives them back).
PIN_EVERY = 2**30 // RESERVE_BLOCK_BYTES
_PINS: list[int] = []


def _has_libc(function: str) -> bool:
    return LIBC is not None and hasattr(LIBC, function)


def trim_if_over(limit_bytes: int) -> None:
    """glibc keeps freed tensors' pages for reuse, which is fast, but its heap fragments as runs of
    different sizes come and go, and the process grows past the store's bound. Past `limit_bytes` the
    free pages go back to the system (malloc_trim); below it they stay, so a typical run costs nothing
    extra. Elsewhere than Linux with glibc this does nothing."""
    if _has_libc("malloc_trim") and os.path.exists("/proc/self/statm") and resident_bytes() > limit_bytes:
        LIBC.malloc_trim(0)


MIB = 1024**2
CLIENT_SHARE = 2  # one client address holds at most 1/CLIENT_SHARE of the budget at once


class MemoryTooLarge(InvalidInput):
    """A computation that could never be granted its memory: past what one client may hold (422)."""


class Held(Protocol):
    """Memory held between computations (a cache), which the budget may ask to let go of."""

    @property
    def held_bytes(self) -> int:
        """The bytes its entries hold now: those it keeps, and those it let go that are still in use."""

    def let_go_oldest(self) -> bool:
        """Lets its least recently used entry go; False when it keeps none."""


@dataclass(eq=False)
class Ask:
    """A computation waiting for its memory: resolved when granted."""

    client: Client
    nbytes: int
    ready: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Budget:
    """One process's memory for everything that grows with its input, granted before the work starts (as
    Spark's unified memory manager grants execution memory, and PostgreSQL's work_mem bounds a sort): the
    caches' bytes (Held: runs, blocks, measures, kept even while still in use) and the computations under
    way, together at most `max_bytes` (ATTENTION_LAB_MAX_STORE_BYTES). A computation states its peak from its
    shapes and takes it (take); where the caches' bytes leave too little room, their least recently used
    entries go first; where the work under way does, it waits its turn, round the client addresses and the
    browsers within each, as passes do (app.serving.gate). One address holds at most 1/CLIENT_SHARE of the
    budget, so that no client can shut the others out; a computation past that answers 422 naming the setting,
    a wait past `max_wait_seconds` (or past `max_waiting` others) 503 with Retry-After.

    All bookkeeping is on the event loop, with no lock: a take that fits costs a few additions."""

    def __init__(self, max_bytes: int, max_waiting: int = 64, max_wait_seconds: float = 30.0, setting: str = ""):
        self.max_bytes = max_bytes
        self.max_per_client = max_bytes // CLIENT_SHARE
        self.max_waiting = max_waiting
        self.max_wait_seconds = max_wait_seconds
        self.setting = setting or f"{ENV_PREFIX}MAX_STORE_BYTES"
        self.granted = 0  # bytes granted to computations under way
        self.peak_granted = 0
        self.caches: list[Held] = []  # let go of in this order where room is needed
        self._by_address: Counter[str] = Counter()  # bytes granted per address
        self._asks: dict[str, dict[str, deque[Ask]]] = {}  # waiting, by address then browser, in turn order
        self.waiting = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def held(self) -> int:
        """Every byte the budget counts: the caches' and the computations'."""
        return self.granted + sum(cache.held_bytes for cache in self.caches)

    def check(self, nbytes: int, what: str) -> None:
        """MemoryTooLarge where `what` could never be granted `nbytes`."""
        if nbytes > self.max_per_client:
            raise MemoryTooLarge(
                f"{what} needs {nbytes / MIB:,.0f} MiB at once, past the {self.max_per_client / MIB:,.0f} MiB one "
                f"client may hold (1/{CLIENT_SHARE} of {self.setting}={self.max_bytes:,}): ask for less (a shorter "
                f"input, a window, a view pooled by size), or raise {self.setting}"
            )

    @asynccontextmanager
    async def take(self, nbytes: int, client: Client = ANYONE, what: str = "this computation") -> AsyncIterator[None]:
        """`nbytes` held by the caller until it leaves the block: at once where they fit, else when its turn
        comes and they do."""
        self.check(nbytes, what)
        if not self.try_take(nbytes, client):
            await self._wait(Ask(client, nbytes), what)
        try:
            yield
        finally:
            self.give_back(nbytes, client)

    def try_take(self, nbytes: int, client: Client = ANYONE) -> bool:
        """`nbytes` granted now if they fit with nobody waiting before them (then give_back them), else False."""
        if self.waiting or not self._fits(client.address, nbytes):
            return False
        self._grant(client.address, nbytes)
        return True

    def give_back(self, nbytes: int, client: Client = ANYONE) -> None:
        self.granted -= nbytes
        self._by_address[client.address] -= nbytes
        if not self._by_address[client.address]:
            del self._by_address[client.address]
        if self.waiting:
            self._serve()

    def freed(self) -> None:
        """Memory went back outside a take (a cache's entry let go, no longer in use): waiting asks are served,
        from any thread."""
        if self.waiting and self._loop is not None:
            self._loop.call_soon_threadsafe(self._serve)

    def _fits(self, address: str, nbytes: int) -> bool:
        if self._by_address[address] + nbytes > self.max_per_client:
            return False
        held = self.held
        for cache in self.caches:
            while held + nbytes > self.max_bytes and cache.let_go_oldest():
                held = self.held
        return held + nbytes <= self.max_bytes

    def _grant(self, address: str, nbytes: int) -> None:
        self.granted += nbytes
        self.peak_granted = max(self.peak_granted, self.granted)
        self._by_address[address] += nbytes

    async def _wait(self, ask: Ask, what: str) -> None:
        if self.waiting >= self.max_waiting:
            raise Busy(f"{self.waiting} computations already wait for memory: try again in a moment", 2)
        self._loop = asyncio.get_running_loop()
        address, cookie = ask.client.address, ask.client.cookie
        self._asks.setdefault(address, {}).setdefault(cookie, deque()).append(ask)
        self.waiting += 1
        self._serve()  # it may fit now: the asks before it may be waiting for their own address's work
        try:
            async with asyncio.timeout(self.max_wait_seconds):
                await asyncio.shield(ask.ready)
        except BaseException as error:
            if ask.ready.done():  # granted as the wait ended: given back at once
                self.give_back(ask.nbytes, ask.client)
            else:
                ask.ready.cancel()
                self._leave(ask)
            if isinstance(error, TimeoutError):
                raise Busy(
                    f"{what} waited {self.max_wait_seconds:g} s for memory: the work under way and the runs kept "
                    f"hold the lab's {self.setting} ({self.max_bytes / MIB:,.0f} MiB); try again in a moment",
                    5,
                ) from None
            raise

    def _leave(self, ask: Ask) -> None:
        address, cookie = ask.client.address, ask.client.cookie
        browsers = self._asks[address]
        browsers[cookie].remove(ask)
        if not browsers[cookie]:
            del browsers[cookie]
        if not browsers:
            del self._asks[address]
        self.waiting -= 1

    def _serve(self) -> None:
        """Grants the waiting asks whose turn it is, round the addresses and each one's browsers, while they fit.
        An address at its share is passed over (its own work must end first); an ask too large for the room
        left stops the round, so that small asks behind it cannot starve it."""
        for address in list(self._asks):
            browsers = self._asks[address]
            cookie = next(iter(browsers))
            ask = browsers[cookie][0]
            if self._by_address[address] + ask.nbytes > self.max_per_client:
                continue
            if not self._fits(address, ask.nbytes):
                return
            self._leave(ask)
            self._grant(address, ask.nbytes)
            ask.ready.set_result(None)
            # This address and browser go to the back of the round.
            if address in self._asks:
                self._asks[address] = self._asks.pop(address)
                if cookie in self._asks[address]:
                    self._asks[address][cookie] = self._asks[address].pop(cookie)
