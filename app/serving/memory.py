"""Keeping the process's memory near what the run store holds, and the memory settings within the
machine's."""

import ctypes
import ctypes.util
import os
from pathlib import Path

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
