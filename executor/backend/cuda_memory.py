"""A GPU rank's peak memory during a step: cupy's memory pool, watched allocation by allocation.

cupy allocates every array from its memory pool; a :class:`PeakHook` (cupy's ``MemoryHook``, called
when the pool hands out or takes back a block) keeps the running sum of what the step allocated
minus what it let go, and its largest value is the step's peak on top of what it started with
(as tracemalloc's on the host, executor.backend.host_memory). Memory that cuBLAS and NCCL allocate
themselves (cuBLAS's workspace, NCCL's buffers) is not seen; the cuDNN workspace is a pool array
(kernels.cuda.cudnn_graphs) allocated before the measured step, so the backend adds what it holds.
The hook runs Python at every allocation, so the peak is measured in the extra step after the timed
ones, as on the host.
"""

from __future__ import annotations

from typing import Callable, Iterable


class PeakHook:
    """Running bytes allocated from the pool minus bytes given back, and their maximum. Used as
    the hook object of ``cupy.cuda.MemoryHook`` (:func:`hook_class` makes the subclass)."""

    name = "dnnplan_peak"

    def __init__(self):
        self.current = 0
        self.peak = 0

    def malloc_postprocess(self, **kw) -> None:
        if kw.get("mem_ptr"):
            self.current += int(kw.get("mem_size", 0))
            self.peak = max(self.peak, self.current)

    def free_postprocess(self, **kw) -> None:
        self.current -= int(kw.get("mem_size", 0))


def hook_class(cp):
    """:class:`PeakHook` as a ``cupy.cuda.MemoryHook`` (registered with ``with``)."""
    return type("CupyPeakHook", (PeakHook, cp.cuda.MemoryHook), {})


def pool_peak_bytes(cp, run: Callable[[], object], synchronize: Callable[[], None]) -> int:
    """The most bytes the pool had handed out on top of the start, while ``run`` ran."""
    hook = hook_class(cp)()
    synchronize()
    with hook:
        run()
        synchronize()
    return max(hook.peak, 0)


def device_held_bytes(arrays: Iterable) -> int:
    """Bytes of the distinct arrays given (by identity: one array listed twice counts once)."""
    seen: dict[int, int] = {}
    for a in arrays:
        if hasattr(a, "nbytes"):
            seen[id(a)] = int(a.nbytes)
    return sum(seen.values())
