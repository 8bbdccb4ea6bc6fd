"""Weighing on a profile that is complete: ``--refresh-profile``, and the first plan on a fresh cache.

:func:`refreshed` (``--refresh-profile``) runs the weighing twice: once to list every kernel call it
looks up (nothing is timed; calls not in the cache are interpolated for that pass), then, after
those calls are timed again together, in interleaved rounds (profiler.timing.side_by_side), once more on
the new timings. Interleaved, every call's samples cover the same stretch of time, so a drift in the
computer's speed moves all the alternatives alike; timed one after another on first lookup, each
would see its own stretch. The timing dominates the cost of a refreshed plan (figures:
docs/profiler.md, "Refreshing the cache").

Without a refresh, a compute model that times kernels on demand fills its profile *during* the
weighing: a call is timed when first looked up, and a call too slow to time is interpolated from
the entries there are so far. So on a fresh cache the alternatives weighed early and those weighed
late saw different tables, and the same plan could be priced twice differently within one run
(issue 55: lenet5 on two ranks chose data parallelism and printed it slower than the data-parallel
baseline beside it; run again, on the filled cache, it chose another plan). :func:`refreshed`
therefore weighs again whenever the weighing added entries to the profile: the second weighing
finds every call it needs in the table, so every alternative is priced on the same numbers, and the
first run answers as every later one does.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from costmodel.compute.model import ComputeModel, OnDemand

T = TypeVar("T")


def _entries(compute: ComputeModel) -> int:
    table = getattr(compute, "table", None)  # (ComputeModel's; a stand-in may lack it)
    return 0 if table is None else len(table.entries)


def refreshed(compute: ComputeModel, weigh: Callable[[], T], again: Callable[[], None] | None = None) -> T:
    """``weigh()`` on a complete profile (module docstring): on freshly re-timed kernels when
    ``compute`` times kernels on demand and is asked to refresh them, else once, and once more
    (after ``again()``, e.g. to forget a best-so-far priced on the incomplete profile) when that
    weighing timed kernels the profile did not have."""
    if not isinstance(compute, OnDemand):
        return weigh()
    if compute.refresh:
        compute.retime(compute.calls_of(weigh, time_missing=False))
        return weigh()
    before = _entries(compute)
    got = weigh()
    if _entries(compute) == before:
        return got
    if again is not None:
        again()
    return weigh()
