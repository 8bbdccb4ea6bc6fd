"""``--refresh-profile``: weigh the alternatives on kernels all timed again now, side by side.

:func:`refreshed` runs the weighing twice: once to list every kernel call it looks up (nothing is
timed; calls not in the cache are interpolated for that pass), then, after those calls are timed
again together, in interleaved rounds (profiler.side_by_side), once more on the new timings. The
timing dominates: for lenet5 at 2 ranks (the planner's plan and the uniform baselines), 32.1 s of
timing in 36.9 s.
"""

from __future__ import annotations

from typing import Callable, TypeVar

T = TypeVar("T")


def refreshed(compute, weigh: Callable[[], T]) -> T:
    """``weigh()`` on freshly re-timed kernels when ``compute`` refreshes (``OnDemandCompute``
    with ``refresh``), else just ``weigh()``."""
    if not getattr(compute, "refresh", False) or not hasattr(compute, "retime"):
        return weigh()
    compute.retime(compute.calls_of(weigh, time_missing=False))
    return weigh()
