"""Timing the prediction's kernels inside a run, between its timed steps (``--fresh-profile``).

A shared machine's speed can move by tens of percent between hours and by more than 10% within
minutes, so kernels timed before a run, or even right after it, can see another machine than the
run did. With ``--fresh-profile`` every rank, once the timed steps have run (back to back, as
training runs them), runs as many untimed steps and after each, outside every clock, times each
kernel call the prediction will look up ONCE, as the profiler times a call (synthetic operands
of the call's shape from :func:`profiler.timing.harness.build`, one call), right after replaying the
calls that precede it in the step (:meth:`InRunTimer.round`). All ranks go call by
call together (a barrier before each), so each rank's kernel runs beside the other ranks running
the same one, as a profile for P ranks is timed beside P - 1 companions.

The prediction then uses, per call, the median over steps of the slowest rank's sample: still an
isolated kernel at its local shape looked up in a table, never the run's own layer timings; only
the moments the kernels are timed at are the run's.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Mapping, Sequence

import numpy

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.profile_table import Entry
from kernels.allocator import keep_freed_memory
from profiler.timing.harness import build, cold_sampler, one_call, summarize

#: Operands kept between rounds up to this many bytes (estimated by call.bytes), or a quarter of the
#: memory free when the timer starts if less (:func:`keep_room`). A call whose operands do not fit
#: is built again each time it runs, and a predecessor built again just before a sample misprices
#: it: with 1 GiB, alexnet's fc6 forward (151 MB of weights, 302 MB with its own) did not fit on
#: one rank (batch 2), and drop7 after its replay was timed at 749 us, 341 us with 2.5 GiB, against
#: 305-317 us measured in the step (2026-11-26, the 2-core development VM).
CACHE_BYTES = 4 << 30


class InRunTimer:
    """Times ``calls`` once per :meth:`round`; operands are built on first use and kept (up to
    ``cache_bytes``, by default :func:`keep_room`; else rebuilt each round outside the clock).
    ``before``: per call key, the calls just before it in the step (costmodel.compute.call_context.preceding_calls),
    replayed before its sample (:meth:`round`)."""

    def __init__(self, calls: Iterable[KernelCall], before: Mapping[str, Sequence[KernelCall]] | None = None,
                 cache_bytes: int | None = None, updates: Sequence[KernelCall] = ()):
        self.calls = tuple(dict.fromkeys(calls))  # unique, in order
        self.before = {c.key: tuple((before or {}).get(c.key, ())) for c in self.calls}
        self.samples: dict[str, list[float]] = {c.key: [] for c in self.calls}
        self._kept: dict[str, tuple[Callable[[], object], Callable[[], float], object]] = {}
        self._room = keep_room() if cache_bytes is None else cache_bytes
        keep_freed_memory()
        # the step's updates in its order, one operand set each (:meth:`_update_round`), when
        # every one of them is among the calls timed and their operands fit the room
        keys = {c.key for c in self.calls}
        size = sum(c.bytes for c in updates)
        self.updates = tuple(updates) if updates and all(c.key in keys for c in updates) and size <= self._room else ()
        self._room -= size if self.updates else 0
        self._update_runs: list[tuple[str, Callable[[], float]]] = []  # (key, its sampler)

    def _sampler(self, call: KernelCall) -> tuple[Callable[[], object], Callable[[], float], object]:
        """(untimed run, sample, incoming operand) of the call: the sample times a run on operands of
        its own when the call reads saved operands (:func:`reads_saved`) or weights
        (:func:`reads_weights`); the incoming operand (the input of a forward kernel, the gradient of
        a backward one; None if it has none) is the one both runs read, as the kernel before it wrote it."""
        got = self._kept.get(call.key)
        if got is not None:
            return got
        shared: dict = {}
        run = build(call, numpy, shared)
        run()  # warm-up: first touch of the operands and of the kernel's own scratch
        timed, size = run, call.bytes
        if reads_saved(call) or reads_weights(call):
            # its own saved operands or weights, untouched since its last sample; the incoming
            # gradient or input is the warm-up's, which has just touched it as the step's
            # previous kernel wrote it
            timed = build(call, numpy, shared)
            timed()
            size *= 2
        made = (run, one_call(timed) if self.before.get(call.key) else cold_sampler(timed),
                shared.get("dy" if reads_saved(call) else "x"))
        if size <= self._room:
            self._room -= size
            self._kept[call.key] = made
        return made

    def run(self, call: KernelCall) -> object:
        """One untimed run of ``call`` on its kept operands (built on first use); its output."""
        return self._sampler(call)[0]()

    def round(self, barrier: Callable[[], None] = lambda: None, keep: bool = True,
              each: Callable[[KernelCall], None] | None = None) -> None:
        """One sample of every call; ``barrier`` (the job's) runs before each, outside the clock.
        ``keep=False``: a warm-up round (after a warm-up step), its samples dropped. It builds the
        operands, so the memory they take is taken before the timed steps: built after the first
        timed step instead, they would take the heap's free memory and the next step would run
        several times slower, faulting in fresh pages for its own arrays.

        Each sample re-creates the state the call meets in the step. The call runs once, untimed
        (its code and operands were used a step earlier); then the calls just before it in the
        step run on their own operands, untimed, and their outputs stay alive, as the step's do
        (they are the call's inputs, and saved for the backward pass); then the call's incoming
        operand (its input, or in backward its incoming gradient) is read into the caches, where
        the kernel that wrote it in the step leaves it (a large predecessor's replay has evicted
        it: lenet5's relu1, after conv1, was priced 26% above its time in the step, and 17% with
        its input read; 2026-11-26), before the replay of a weight-gradient kernel that follows
        that writer (:func:`writes_weight_grads`); then the call is timed.
        The replay moves what the step moves and leaves
        the heap as the step leaves it: the arrays the timed call allocates (its output, im2col's
        columns) land where the step's would, not in the blocks its warm-up run has just freed
        and left in cache: a convolution timed alone after a pass as large as what its
        predecessors move, or with its columns in a freed cached block, runs up to twice as fast
        as in the step (docs/executor.md). A call whose predecessors move more than the caches
        (relu6 after alexnet's fc6) meets cold code and operands, as in the step; a call after
        small ones (lenet5's) finds them warm, as in the step, where the timed steps run back to
        back (executor.runtime.run.in_run_steps): with the profiler's 4 MiB pass between the replay and
        the sample as well, lenet5's step on two ranks was priced 10-13% above its measured 6.3 ms,
        without it 2-3% below, and ResNet-18's (64x64, batch 16) 4-10% and 8% below its 182 ms
        (2026-11-26). A call with no known predecessors (a reshard copy) is timed as the
        profiler does, after that pass. ``each(call)``: called before
        each call's replay (profiler.in_step.before_run loads the companions with it)."""
        phase = {c.key for c in self.updates}
        for call in self.calls:
            if call.key in phase:
                continue
            run, sample, incoming = self._sampler(call)
            if each is not None:
                each(call)
            run()
            barrier()
            before = self.before[call.key]
            writer = len(before) - (1 if before and writes_weight_grads(before[-1]) else 0)
            outputs = [self.run(prev) for prev in before[:writer]]
            if before:
                touch(incoming)
            outputs += [self.run(prev) for prev in before[writer:]]
            t = sample()
            del outputs
            if keep:
                self.samples[call.key].append(t)
        if self.updates:
            self._update_round(barrier, keep, each)

    def _update_round(self, barrier: Callable[[], None], keep: bool,
                      each: Callable[[KernelCall], None] | None) -> None:
        """The step's updates, timed one by one as the step runs them: back to back, in its order,
        each on its own weight, momentum and gradient (a call key's sample: the mean over its
        occurrences). The update streams every weight at the step's end, and the calls before it
        are other updates; timed one at a time, each after an untimed run on the same operands, a
        large update ran from the cache: ResNet-18's (64x64, batch 8, one rank) updates were priced
        16 ms against 22.6 ms measured, timed in sequence 21.5 ms (2026-11-26, the development VM)."""
        if not self._update_runs:
            self._update_runs = [(c.key, one_call(build(c, numpy))) for c in self.updates]
        if each is not None:
            each(max(self.updates, key=lambda c: c.bytes))
        barrier()
        times: dict[str, list[float]] = {}
        for key, sample in self._update_runs:
            times.setdefault(key, []).append(sample())
        if keep:
            for key, ts in times.items():
                self.samples[key].append(sum(ts) / len(ts))


def keep_room(limit: int = CACHE_BYTES) -> int:
    """Bytes of operands a timer keeps: ``limit``, or a quarter of the memory free now if less."""
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):  # not known here
        return min(limit, 1 << 30)
    return min(limit, free // 4)


def touch(operand) -> None:
    """Read one byte of every cache line of ``operand`` (an array; None: nothing), bringing it
    into the caches as the kernel that wrote it just before the timed one leaves it."""
    if operand is not None and operand.nbytes:
        numpy.ascontiguousarray(operand).reshape(-1).view(numpy.uint8)[::64].max()


def writes_weight_grads(call: KernelCall) -> bool:
    """Whether the call is a weight-gradient kernel, which the step runs right after its layer's
    input-gradient kernel: the incoming gradient of the call after it was written before it, so it
    is read into the caches before the weight-gradient kernel's replay, not after. Read after it,
    ResNet-18's (64x64, batch 8, one rank) ReLU backward after a convolution's backward was priced
    90 us against 173 us measured in the step (2026-11-26, the 2-core development VM)."""
    return call.kernel.endswith(".bwd_weights")


def reads_saved(call: KernelCall) -> bool:
    """Whether the call is a backward kernel, which reads what its layer's forward pass saved
    (the input, a mask, normalised values): in a step those were last touched a whole forward
    pass earlier, so they come from memory however little the calls just before it moved. Its
    incoming gradient is another matter: the kernel just before it wrote it, so it shares the
    cache context of the calls before it (the warm-up run's, :meth:`InRunTimer._sampler`); timed
    with a cold gradient too, the step's backward kernels would be priced too slow."""
    return ".bwd" in call.kernel


def reads_weights(call: KernelCall) -> bool:
    """Whether the call is a convolution's or a linear layer's forward kernel, whose weights the
    step last touched in the previous step's update: timed on weights of its own, untouched since
    its last sample (its input shared with the untimed run, as the kernel before it in the step
    wrote it). Timed on the weights its untimed run had just touched, ResNet-18's (64x64, batch 8,
    one rank) layer-4 convolutions, 9.4 MB of weights each, were priced 6.2 ms against 7.3-7.7 ms
    measured in the step, and 7.7 ms on weights of their own; all its forward convolutions summed
    to about 52 ms on the just-touched weights and 60 ms on their own, against 59 ms measured
    (2026-11-26, the 2-core development VM)."""
    return call.kernel in ("conv2d.fwd", "linear.fwd")


def merge_samples(per_rank: Iterable[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Per call and round, the slowest rank's sample: the ranks ran the call together (a barrier
    before it), and a run's layer phase is measured as the maximum over ranks (executor.report.collect),
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
