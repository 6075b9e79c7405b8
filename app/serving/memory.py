"""Keeping the process's memory near what the run store holds."""

import ctypes
import ctypes.util
import os

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name else None


LIBC = _libc()


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * PAGE_BYTES


def trim_if_over(limit_bytes: int) -> None:
    """glibc keeps freed tensors' pages for reuse, which is fast, but its heap fragments as runs of
    different sizes come and go, and the process grows past the store's bound. Past `limit_bytes` the
    free pages go back to the system (malloc_trim); below it they stay, so a typical run costs nothing
    extra. Elsewhere than Linux with glibc this does nothing."""
    if LIBC is None or not hasattr(LIBC, "malloc_trim") or not os.path.exists("/proc/self/statm"):
        return
    if resident_bytes() > limit_bytes:
        LIBC.malloc_trim(0)
