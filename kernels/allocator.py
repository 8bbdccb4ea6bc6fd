"""Keep freed memory in the process, as a training framework's caching allocator does.

glibc's malloc serves large blocks with ``mmap`` and gives freed memory back to the kernel
(``munmap``, heap trimming); the next step's arrays of the same sizes then fault their pages in
again. A training step frees and reallocates tens of MiB of activations per layer, so how often
that happens depends on what ran before, and a step could run well slower than the kernels timed
alone predict (docs/kernels.md, "Allocator"). Kernels are timed and run under the same setting
(:func:`profiler.timing.harness.time_call` and every executor rank call :func:`keep_freed_memory`), so a
profile and a run see the same allocator.

No effect (returns False) where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4

#: Free memory at the top of the heap kept before trimming (the most mallopt's int takes).
TRIM_THRESHOLD_BYTES = 2**31 - 1
#: Extra memory requested from the kernel each time the heap grows.
TOP_PAD_BYTES = 64 * 2**20

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Serve every block from the heap (no mmap) and never trim it; once per process."""
    global _applied
    if _applied is None:
        _applied = _mallopt()
    return _applied


def _mallopt() -> bool:
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    ok = (mallopt(_M_MMAP_MAX, 0) == 1) & (mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1)
    return bool(ok & (mallopt(_M_TOP_PAD, TOP_PAD_BYTES) == 1))
