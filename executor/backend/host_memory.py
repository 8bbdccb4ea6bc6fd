"""A rank's peak memory during a training step, measured in a step of its own.

The peak is what the rank holds before the step (weights, momentum, its blocks of the inputs and
labels: arrays that live across steps) plus the largest amount ``tracemalloc`` saw allocated on
top of that while the step ran (activations kept for backward, gradients, kernel workspace,
receive buffers of reshards; numpy reports its array buffers to ``tracemalloc``). Memory that MPI
allocates itself, outside Python, is not seen.

Tracing every allocation slows a step down, so the measurement is one extra step after the timed
ones (:func:`executor.runtime.run.run_plan`), whose timers are dropped (:meth:`Timers.forget`): the
timed steps run untraced. It is a training step like the others (dropout draws its masks, SGD
updates the weights), so the arrays it allocates are those of a timed step.
"""

from __future__ import annotations

import tracemalloc
from typing import Callable, Iterable

import numpy as np


def held_bytes(arrays: Iterable[np.ndarray]) -> int:
    """Bytes of the distinct arrays given (an array listed twice counts once)."""
    seen: dict[int, int] = {}
    for a in arrays:
        if isinstance(a, np.ndarray):
            seen[id(a)] = a.nbytes
    return sum(seen.values())


def traced_peak_bytes(run: Callable[[], object]) -> int:
    """The most bytes allocated at once on top of what was allocated when ``run`` started,
    while it ran (``tracemalloc``; left tracing as it found it)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return max(peak - before, 0)
