"""glibc's allocator and large tensors (issue #21: a round at 1M nodes cost 16-18x one at 100k).

glibc serves an allocation above its mmap threshold (at most 32 MB on 64-bit Linux) with a fresh
`mmap` and returns it with `munmap` when freed. A [1M, 64] float tensor is 256 MB, so at a million
nodes every intermediate of every epoch is new memory: the kernel zeroes it and takes one page fault
per 4 KB page on first touch. Measured (FedAvg's stacked GCN, 1M nodes in 100 clients, 3 epochs, one
thread): 4.5 million minor faults and 14 s of system time in 24 s of CPU, against 0.08 s of 1.1 s at
100k nodes, whose 25 MB tensors glibc already reuses from its heap. Told to keep freed memory (no
mmap, no trimming), the same epochs take 10 s of CPU, 1.2 s of it system time: CPU per node and
epoch 3.4 us at 1M against 3.6 us at 100k, i.e. linear, for more resident memory (7.2 GB peak
against 3.9 GB: freed blocks stay in the process).

`keep_freed_memory()` makes that setting with glibc's own `mallopt` (M_MMAP_MAX = 0,
M_TRIM_THRESHOLD = 2^31 - 1), the run-time form of `MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=...`.
It holds for the rest of the process. `run()` applies it under `allocator="auto"` only when the
run's largest activation passes glibc's mmap ceiling (nodes x hidden x 4 B > 32 MB), where it
changes what a round costs; `allocator="system"` leaves glibc as it is. The record says which.
"""
from __future__ import annotations

import ctypes
import ctypes.util

ALLOCATORS = ("auto", "keep", "system")
GLIBC_MMAP_CEILING = 32 * 2**20  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: larger blocks are always mmapped
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # malloc.h
_kept = False


def keep_freed_memory() -> bool:
    """Serve every allocation from glibc's heap and keep freed memory in the process. False where the
    C library has no `mallopt` (not glibc: e.g. musl, macOS), which then stays as it is."""
    global _kept
    if _kept:
        return True
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _kept = mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    return _kept


def apply(choice: str, largest_tensor_bytes: int) -> str:
    """The allocator a run uses, as recorded: "keep" (freed memory kept) or "system" (glibc as set).
    choice: auto (keep when largest_tensor_bytes passes glibc's mmap ceiling), keep, or system."""
    if choice not in ALLOCATORS:
        raise ValueError(f"invalid allocator {choice!r}; valid: {', '.join(ALLOCATORS)}")
    wanted = choice == "keep" or (choice == "auto" and largest_tensor_bytes > GLIBC_MMAP_CEILING)
    if _kept or (wanted and keep_freed_memory()):
        return "keep"
    return "system"
