"""``--refresh-profile``: weigh the alternatives on kernels all timed again now, side by side.

:func:`refreshed` runs the weighing twice: once to list every kernel call it looks up (nothing is
timed; calls not in the cache are interpolated for that pass), then, after those calls are timed
again together, in interleaved rounds (profiler.side_by_side), once more on the new timings.
Interleaved, every call's samples cover the same stretch of time, so a drift in the computer's
speed moves all the alternatives alike; timed one after another on first lookup, each would see
its own stretch. The timing dominates the cost of a refreshed plan (figures: docs/profiler.md,
"Refreshing the cache").
"""

from __future__ import annotations

from typing import Callable, TypeVar

from costmodel.compute import ComputeModel, OnDemand

T = TypeVar("T")


def refreshed(compute: ComputeModel, weigh: Callable[[], T]) -> T:
    """``weigh()`` on freshly re-timed kernels when ``compute`` times kernels on demand and is
    asked to refresh them (:class:`costmodel.compute.OnDemand` with ``refresh``), else just
    ``weigh()``."""
    if not (isinstance(compute, OnDemand) and compute.refresh):
        return weigh()
    compute.retime(compute.calls_of(weigh, time_missing=False))
    return weigh()
