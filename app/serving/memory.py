"""Keeping the process's memory near what the run store holds, and the memory settings within the
machine's: the budget every computation asks before it starts (Budget), and glibc's handling of the pages."""

import asyncio
import ctypes
import ctypes.util
import os
from collections import Counter, deque
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.engine.errors import InvalidInput
from app.serving.gate import ANYONE, Busy, Client, TooManyWaiting
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
    zeroed, one fault each: about twice the faults, and slower passes, on a virtual machine that backs memory
    lazily, where a fault is dear (bench/README.md). Since a run keeps its weights only when asked, the pass's
    own passing tensors dominate and the two no longer differ by that measure; what the reserve gives the pass
    threads is tested. The process stays bounded all the same: past the bound, trim_if_over gives the free
    pages back.

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
    memory given back to the system is taken back by the host within seconds: memory written anew costs
    many times what memory written again does. A run keeps its tensors, so while the cache filled every new
    run paid that price for its memory, and a class burst's passes took hundreds of times the faults
    (bench/README.md).
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
# One address's share of the budget for work under way, and of what requests read: at most 1/WORK_SHARE and
# 1/READ_SHARE of it at once. What all requests read is at most 1/READS of it.
WORK_SHARE = 2
READ_SHARE = 8
READS = 4
# Large work leaves the last 1/RESERVE of the budget to small asks (at most 1/SMALL of it: a learner's short
# pass, a head's weights), and an address's share binds large asks only, so that a class's short requests are
# never held behind someone's large computations, even someone's at the same address (a school's one NAT).
RESERVE = 16
SMALL = 64
# A request may hold its reads while its computation waits for memory, and the computations under way wait for
# nothing but turns: so work within its share must fit beside every read at once, or requests holding reads
# could wait for each other's for ever (with reads up to 1/2 and work up to 1/2, eight ALTI requests of 512
# tokens did, at 6% CPU). What no loaded model's weights leave of that is the most one computation may ask.
assert 1 / READS + 1 / WORK_SHARE + 1 / RESERVE < 1
HOLDS: ContextVar[AsyncExitStack | None] = ContextVar("holds", default=None)  # the request's reads (Budget.hold)


class MemoryTooLarge(InvalidInput):
    """A computation that could never be granted its memory: past what one client may hold (422)."""


class Pinned(Protocol):
    @property
    def held_bytes(self) -> int: ...


class Held(Protocol):
    """Memory kept between computations (a cache), which the budget may ask to let go of."""

    @property
    def held_bytes(self) -> int: ...

    def let_go_oldest(self) -> bool:
        """Lets its least recently used entry go; False when it keeps none."""


@dataclass(eq=False)
class Ask:
    """A computation (or a read) waiting for its memory: resolved when granted."""

    client: Client
    nbytes: int
    reads: bool  # a request's read of a run, held until the request ends (Budget.hold)
    ready: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    @property
    def size(self) -> tuple[int, bool]:
        return self.nbytes, self.reads


class Budget:
    """One process's memory for everything that grows with its input, granted before the work starts (as Spark's
    unified memory manager grants execution memory, and PostgreSQL's work_mem bounds a sort): the caches' bytes
    (Held: runs, blocks, measures, and the loaded models' weights), the runs requests read (hold), and the
    computations under way (take), together at most `max_bytes` (ATTENTION_LAB_MAX_STORE_BYTES). A computation
    states its peak from its shapes and takes it before it starts; a request holds a run's bytes before it reads it,
    until it ends (a run the cache lets go meanwhile stays in memory for it). Where the caches leave too little
    room, their least recently used entries go first; where work or reads do, an ask waits its turn, round the
    client addresses and the browsers within each, as passes do (app.serving.gate).

    Reads together hold at most 1/READS of the budget, and a computation never waits for a read: work always has the
    rest (large work all but 1/RESERVE of it, kept for small asks: a learner's short pass), so a request that holds
    its run and waits for its computation's memory waits only for other computations, which end. One address holds
    at most 1/WORK_SHARE of the budget in work and 1/READ_SHARE in reads, so that no client can shut the others out;
    an ask past that answers 422 naming the setting, a wait past `max_wait_seconds` (or past `max_waiting` others)
    503 with Retry-After.

    All bookkeeping is on the event loop, with no lock: an ask that fits costs a few additions."""

    def __init__(
        self,
        max_bytes: int,
        max_waiting: int = 64,
        max_wait_seconds: float = 30.0,
        max_waiting_per_client: int | None = None,
        max_waiting_per_address: int | None = None,
        setting: str = f"{ENV_PREFIX}MAX_STORE_BYTES",
    ):
        self.max_bytes = max_bytes
        self.max_waiting = max_waiting
        self.max_waiting_per_client = max_waiting_per_client or max_waiting
        self.max_waiting_per_address = max_waiting_per_address or max_waiting
        self.max_wait_seconds = max_wait_seconds
        self.setting = setting  # what bounds it, named where an ask is refused
        self.granted = 0  # bytes granted to computations under way
        self.reading = 0  # bytes of the runs requests hold
        self.caches: list[Held] = []  # let go of in this order where room is needed
        self.pinned: list[Pinned] = []  # kept whatever work needs: the loaded models' weights
        self._by_address: dict[bool, Counter[str]] = {False: Counter(), True: Counter()}  # work, reads
        self._asks: dict[str, dict[str, deque[Ask]]] = {}  # waiting, by address then browser, in turn order
        self.waiting = 0
        self._readers: dict[str, list] = {}  # run -> [requests reading it, its bytes, whose read counts them]

    @property
    def held(self) -> int:
        """Every byte the budget counts: the caches', the reads' and the computations'."""
        return self.granted + self.reading + sum(cache.held_bytes for cache in [*self.caches, *self.pinned])

    def largest(self, reads: bool = False) -> int:
        """The most one ask may take: an address's share, and for work what the reads and the pinned weights
        always leave it (the assertion beside WORK_SHARE)."""
        if reads:
            return self.max_bytes // READ_SHARE
        beside = self.max_bytes // RESERVE + self.max_bytes // READS + sum(held.held_bytes for held in self.pinned)
        return min(self.max_bytes // WORK_SHARE, self.max_bytes - beside)

    def check(self, nbytes: int, what: str, reads: bool = False) -> None:
        """MemoryTooLarge where `what` could never be granted `nbytes`."""
        largest = self.largest(reads)
        if nbytes > largest:
            raise MemoryTooLarge(
                f"{what} needs {nbytes / MIB:,.0f} MiB at once, past the {largest / MIB:,.0f} MiB one client may "
                f"{'read' if reads else 'use'} at once (of {self.setting}={self.max_bytes:,}): ask for less (a "
                f"shorter input, a window, a view pooled by size), or raise {self.setting}"
            )

    @asynccontextmanager
    async def take(self, nbytes: int, client: Client = ANYONE, what: str = "this computation") -> AsyncIterator[None]:
        """`nbytes` for a computation until the caller leaves the block: at once where they fit, else when its
        turn comes and they do."""
        await self._ask(nbytes, client, what, reads=False)
        try:
            yield
        finally:
            self.give_back(nbytes, client)

    async def hold(self, nbytes: int, client: Client, what: str, key: str) -> None:
        """`nbytes` of a run (named `key`) the request reads, held until the request ends (HOLDS, app.web.deps), as
        `holding` holds them; nothing where no request counts its reads (the engine used directly)."""
        holds = HOLDS.get()
        if holds is not None:
            await holds.enter_async_context(self.holding(nbytes, client, what, key))

    @asynccontextmanager
    async def holding(self, nbytes: int, client: Client, what: str, key: str) -> AsyncIterator[None]:
        """`nbytes` of something kept (named `key`) held as a read until the caller leaves the block: counted once
        however many read the same key at once, by the first of them, until the last has left."""
        if key not in self._readers:
            await self._ask(nbytes, client, what, reads=True)
            if key in self._readers:  # another read of it was granted meanwhile: one is enough
                self.give_back(nbytes, client, True)
            else:
                self._readers[key] = [0, nbytes, client]
        self._readers[key][0] += 1
        try:
            yield
        finally:
            self._read_done(key)

    def _read_done(self, key: str) -> None:
        readers = self._readers[key]
        readers[0] -= 1
        if not readers[0]:
            del self._readers[key]
            self.give_back(readers[1], readers[2], True)

    def try_take(self, nbytes: int, client: Client = ANYONE, reads: bool = False) -> bool:
        """`nbytes` granted now if they fit with nobody waiting before them (then give_back them), else False."""
        if self.waiting or not self._fits(client.address, nbytes, reads):
            return False
        self._grant(client.address, nbytes, reads)
        return True

    def give_back(self, nbytes: int, client: Client = ANYONE, reads: bool = False) -> None:
        if reads:
            self.reading -= nbytes
        else:
            self.granted -= nbytes
        counts = self._by_address[reads]
        counts[client.address] -= nbytes
        if not counts[client.address]:
            del counts[client.address]
        if self.waiting:
            self._serve()

    async def _ask(self, nbytes: int, client: Client, what: str, reads: bool) -> None:
        self.check(nbytes, what, reads)
        if not self.try_take(nbytes, client, reads):
            await self._wait(Ask(client, nbytes, reads), what)

    def _within_share(self, address: str, nbytes: int, reads: bool) -> bool:
        small = nbytes <= self.max_bytes // SMALL
        if reads:
            return self.reading + nbytes <= self.max_bytes // READS and (
                small or self._by_address[True][address] + nbytes <= self.max_bytes // READ_SHARE
            )
        return small or self._by_address[False][address] + nbytes <= self.largest()

    def _fits(self, address: str, nbytes: int, reads: bool) -> bool:
        if not self._within_share(address, nbytes, reads):
            return False
        room = self.max_bytes if nbytes <= self.max_bytes // SMALL else self.max_bytes - self.max_bytes // RESERVE
        held = self.held
        for cache in self.caches:
            while held + nbytes > room and cache.let_go_oldest():
                held = self.held
        return held + nbytes <= room

    def _grant(self, address: str, nbytes: int, reads: bool) -> None:
        if reads:
            self.reading += nbytes
        else:
            self.granted += nbytes
        self._by_address[reads][address] += nbytes

    def check_room(self, client: Client) -> None:
        """TooManyWaiting or Busy now where an ask of the client's would be refused a place in line (as
        PassGate.check_room): an ask waits whenever anyone does (try_take)."""
        if self.waiting:
            self._check_line(client)

    def _check_line(self, client: Client) -> None:
        if self.waiting >= self.max_waiting:
            raise Busy(f"{self.waiting} requests already wait for memory: try again in a moment", 2)
        browsers = self._asks.get(client.address, {})
        # As at the gate: one client's queue is bounded, so a prankster is refused (429) and waits for nobody.
        if len(browsers.get(client.cookie, ())) >= self.max_waiting_per_client:
            raise TooManyWaiting(
                f"you already have {self.max_waiting_per_client} requests waiting for memory: wait for them, "
                "then try again",
                2,
            )
        if sum(map(len, browsers.values())) >= self.max_waiting_per_address:
            raise TooManyWaiting(
                f"this address already has {self.max_waiting_per_address} requests waiting for memory: wait for "
                "them, then try again",
                2,
            )

    async def _wait(self, ask: Ask, what: str) -> None:
        self._check_line(ask.client)
        browsers = self._asks.setdefault(ask.client.address, {})
        browsers.setdefault(ask.client.cookie, deque()).append(ask)
        self.waiting += 1
        self._serve()  # it may fit now: the asks before it may be waiting for their own address's work
        try:
            async with asyncio.timeout(self.max_wait_seconds):
                await asyncio.shield(ask.ready)
        except BaseException as error:
            if ask.ready.done():  # granted as the wait ended: given back at once
                self.give_back(ask.nbytes, ask.client, ask.reads)
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
        """Grants the waiting asks whose turn it is, round the addresses and each one's browsers, where they fit.
        An ask that does not fit yet is passed over, at its own address too: a learner's short pass is not held
        behind someone's large computation, even one from the same address, which is granted as soon as the
        memory under way leaves it room (or answers 503 after max_wait_seconds)."""
        for address in list(self._asks):
            browsers = self._asks[address]
            cookie = next((cookie for cookie, asks in browsers.items() if self._fits(address, *asks[0].size)), None)
            if cookie is None:
                continue
            ask = browsers[cookie][0]
            self._leave(ask)
            self._grant(address, ask.nbytes, ask.reads)
            ask.ready.set_result(None)
            # This address and browser go to the back of the round.
            if address in self._asks:
                self._asks[address] = self._asks.pop(address)
                if cookie in self._asks[address]:
                    self._asks[address][cookie] = self._asks[address].pop(cookie)
