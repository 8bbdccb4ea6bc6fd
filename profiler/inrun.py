"""Timing the prediction's kernels inside a run, between its timed steps (``--fresh-profile``).

This VM's speed moves by tens of percent between hours and by more than 10% within minutes (the
same 45 lenet5 kernel calls, timed in six back-to-back processes, summed to 125-179 ms), so
kernels timed before a run, or even right after it, can see another machine than the run did.
With ``--fresh-profile`` every rank, after each timed step and outside its clock, times each
kernel call the prediction will look up ONCE, exactly as the profiler times a call (synthetic
operands of the call's shape from :func:`profiler.harness.build`, one call after a pass over a
buffer larger than the L2 cache, :func:`profiler.harness.cold_sampler`). All ranks go call by
call together (a barrier before each), so each rank's kernel runs beside the other ranks running
the same one, as a profile for P ranks is timed beside P - 1 companions.

The prediction then uses, per call, the median over steps of the slowest rank's sample: still an
isolated kernel at its local shape looked up in a table, never the run's own layer timings; only
the moments the kernels are timed at are the run's.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

from costmodel.kernel_calls import KernelCall
from costmodel.profile_table import Entry
from profiler.allocator import keep_freed_memory
from profiler.harness import DISTURB_ELEMS, build, cold_sampler, last_level_cache_bytes, summarize

CACHE_BYTES = 1 << 30  # operands kept between rounds up to this many bytes (estimated by call.bytes)


class InRunTimer:
    """Times ``calls`` once per :meth:`round`; operands are built on first use and kept (up to
    :data:`CACHE_BYTES`, else rebuilt each round outside the clock). ``reuse``: per call key, the
    bytes the step moves just before the call (costmodel.reuse), which size the cache pass
    before its sample (:meth:`round`)."""

    def __init__(self, calls: Iterable[KernelCall], reuse: Mapping[str, int] | None = None,
                 cache_bytes: int = CACHE_BYTES):
        self.calls = tuple(dict.fromkeys(calls))  # unique, in order
        self.llc = last_level_cache_bytes()
        self._buf = None  # the pass buffer, last-level-cache sized, made on first use
        self._pass = {c.key: min(max((reuse or {}).get(c.key, 0), 4 * DISTURB_ELEMS), self.llc) for c in self.calls}
        self.samples: dict[str, list[float]] = {c.key: [] for c in self.calls}
        self._kept: dict[str, tuple[Callable[[], object], Callable[[], float]]] = {}
        self._room = cache_bytes
        keep_freed_memory()

    def _sampler(self, call: KernelCall) -> tuple[Callable[[], object], Callable[[], float]]:
        got = self._kept.get(call.key)
        if got is not None:
            return got
        import numpy  # noqa: PLC0415 - numpy backend (the executor's)
        if self._buf is None:
            self._buf = numpy.ones(self.llc // 4, dtype=numpy.float32)
        shared = {} if reads_saved(call) else None
        run = build(call, numpy, shared)
        run()  # warm-up: first touch of the operands and of the kernel's own scratch
        timed, size = run, call.bytes
        if shared is not None:
            # its own saved operands, untouched since its last sample; the incoming gradient is
            # the warm-up's, which has just touched it as the step's previous kernel wrote it
            timed = build(call, numpy, shared)
            timed()
            size *= 2
        pair = (run, cold_sampler(timed, self._buf[: self._pass[call.key] // 4]))
        if size <= self._room:
            self._room -= size
            self._kept[call.key] = pair
        return pair

    def round(self, barrier: Callable[[], None] = lambda: None, keep: bool = True) -> None:
        """One sample of every call; ``barrier`` (the job's) runs before each, outside the clock.
        ``keep=False``: a warm-up round (after a warm-up step), its samples dropped. It builds the
        operands, so the memory they take is taken before the timed steps: built after the first
        timed step instead, they took the heap's free memory and the next step ran 2.2-2.6x slower
        (lenet5, batch 256), faulting in fresh pages for its own arrays.

        Each sample re-creates the cache state the call meets in the step (costmodel.reuse): when
        the two calls before it in the step move less than the last-level cache, the call runs
        once, untimed, then a pass over that many bytes (at least 4 MiB, the profiler's pass)
        precedes the timed call; otherwise the pass covers the whole last-level cache, so code
        and operands come from memory. A round follows a step, which has evicted everything:
        sampled so, without re-warming, relu3 of lenet5 at 2 ranks took 58 us against 31 us in
        the step (alone: 70 us after a 64 MiB pass, 25 us after a run and the 4 MiB pass), while
        relu6 of alexnet, after a layer streaming 150 MB, took 47 us in the step (alone: 45 us
        after the 64 MiB pass, 8 us after a run and the 4 MiB pass)."""
        for call in self.calls:
            run, sample = self._sampler(call)
            if self._pass[call.key] < self.llc:
                run()
            barrier()
            t = sample()
            if keep:
                self.samples[call.key].append(t)


def reads_saved(call: KernelCall) -> bool:
    """Whether the call is a backward kernel, which reads what its layer's forward pass saved
    (the input, a mask, normalised values): in a step those were last touched a whole forward
    pass earlier, so they come from memory however little the calls just before it moved. Its
    incoming gradient is another matter: the kernel just before it wrote it, so it shares the
    cache context of the calls before it (the warm-up run's, :meth:`InRunTimer._sampler`). Timed
    with a cold gradient too, lenet5's 1-rank step (batch 256) was priced 7.6% above its measured
    time on average over five runs; with the gradient shared, 3.7% above (same session,
    alternating)."""
    return ".bwd" in call.kernel


def merge_samples(per_rank: Iterable[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per call and round, the slowest rank's sample: the ranks ran the call together (a barrier
    before it), and a run's layer phase is measured as the maximum over ranks (executor.collect),
    so the prediction of a phase is built from the same statistic of its kernels."""
    out: dict[str, list[float]] = {}
    for samples in per_rank:
        for key, values in samples.items():
            have = out.setdefault(key, [])
            have[:] = [max(a, b) for a, b in zip(have, values)] + have[len(values):] + values[len(have):]
    return out


def entries_from_samples(calls: Iterable[KernelCall], samples: dict[str, list[float]]) -> dict[str, Entry]:
    """Profile-table entries (median and spread) of the calls that got samples."""
    return {c.key: summarize(samples[c.key], c.flops, c.bytes) for c in calls if samples.get(c.key)}
