"""Giving an evicted run's memory back to the operating system."""

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 1 << 20


def return_freed_memory() -> None:
    """Once glibc has freed one large block it raises its mmap threshold (up to 32 MB) and serves later
    large blocks from its heap, which it rarely shrinks: evicted runs then stay in the process's memory.
    A fixed 1 MB threshold keeps every large tensor in its own mapping, returned to the system when freed.
    Elsewhere than glibc this does nothing."""
    name = ctypes.util.find_library("c")
    if name is None:
        return
    libc = ctypes.CDLL(name)
    if hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
