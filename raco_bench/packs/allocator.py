"""Keep freed memory in the process, so a pack's step does not fault the same pages in again (docs/packs.md, "Speed").

glibc's ``malloc`` serves large blocks with ``mmap`` and hands them back to the system when they are freed, and it
trims the top of its heap once enough of it is free. A pack allocates the same few arrays of about a megabyte at every
step and frees them at its end, so by default every step maps fresh pages and takes a page fault on each first touch.
Raising both thresholds (``mallopt``) keeps those blocks in the heap for the next step: a RaCO-DP step in a pack of
256 (B = 1024, one thread) measured 8 % faster, and the peak memory is what the pack holds at once, as before (the
memory model, ``raco-bench bench memory``). Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 * 2**20  # blocks below this come from the heap (glibc's largest dynamic threshold is 32 MiB on 64-bit)
TRIM_THRESHOLD = 256 * 2**20  # free memory at the heap's top kept before trimming


def _libc():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Hand the heap's free memory back to the system now (glibc's ``malloc_trim``); True where glibc did release some.

    For measurements: after :func:`keep_freed_memory`, blocks a process freed (a calibration's, a warm-up pack's) stay
    resident and a later pack reuses them, so its growth in resident memory would understate what it holds
    (``raco-bench bench memory`` trims before it reads the memory "before" a pack)."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; True where it did (idempotent)."""
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
