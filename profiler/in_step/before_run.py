"""A plan's kernels timed in the context of its training step, before the run.

The profile times each kernel call alone: synthetic operands, one call after a pass over a buffer
larger than the L2 cache (profiler.timing.harness). Inside a step a call meets more: the calls just
before it have moved their own operands through the caches and left their outputs alive, and
the arrays it allocates land where the step's heap puts them rather than in the block its own
previous sample freed (profiler.in_step.kernels, :meth:`InRunTimer.round`, says what is replayed and why).
Summed over a step, the step's calls are slower than the same calls alone, and the more so the
fewer bytes they move: on the 2-core development VM, ResNet-18 at 64x64, 8 samples, one rank,
the kernels of a step summed to 163 ms alone and 187 ms in context (x1.15; convolutions x1.04 to
x1.18, batch norm x1.3 to x1.6, ReLU and additions x1.4 to x1.9; 2026-11-26).

So a plan's prediction on this computer is made from its calls timed here, in the step's order
and context, after the plan is made and before it runs: :func:`time_in_step` runs
:class:`profiler.in_step.kernels.InRunTimer`, the procedure `--fresh-profile` runs between a run's steps,
in the planning process instead, ``rounds`` samples a call after one warm-up round, beside the
companions of a profile for several ranks (each loaded with the call being timed). The planner
still weighs its alternatives on the profile's isolated calls: the context of a call depends on
the neighbours' choices, which the plan fixes only once it is made.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.profile_table import Entry
from profiler.in_step.kernels import InRunTimer, entries_from_samples

ROUNDS = 9  # samples per call: the median of 9 (5 left plans of lenet5 5-10% apart from one weighing to the next)


def time_in_step(calls: Iterable[KernelCall], before: Mapping[str, Sequence[KernelCall]], rounds: int = ROUNDS,
                 companions=None, progress: Callable[[int, int], None] | None = None,
                 updates: Sequence[KernelCall] = ()) -> dict[str, Entry]:
    """Per call key, the entry (median and spread) of ``rounds`` samples of the call in its step
    context (``before``: the calls just before it, costmodel.compute.call_context.preceding_calls).
    ``companions`` (profiler.timing.companions.Companions): loaded with each call while it is timed.
    ``progress(done, total)``: after each round, the warm-up round included. ``updates``: the
    step's optimiser updates in its order, timed back to back (:meth:`InRunTimer._update_round`)."""
    timer = InRunTimer(calls, before, updates=updates)
    each = None if companions is None else companions.load
    try:
        for i in range(rounds + 1):
            timer.round(keep=i > 0, each=each)
            if progress is not None:
                progress(i + 1, rounds + 1)
    finally:
        if companions is not None:
            companions.pause()
    return entries_from_samples(timer.calls, timer.samples)
