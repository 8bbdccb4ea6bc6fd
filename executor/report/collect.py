"""Gathering every rank's timers to rank 0 and reducing them to one measurement.

Per layer and phase: for each timed step the maximum over ranks (the straggler sets the pace, as
the prediction assumes), then the median over timed steps; on a GPU, whose timed steps record no
span (executor.runtime.timers), the same over its attribution step instead. Step time: for each timed step the
slowest rank's wall time, then the median over timed steps, with the minimum and maximum as its
spread. Peak memory: the largest of the ranks' (each measured in a step of its own, executor.backend.host_memory). :func:`aggregate` is pure; :func:`gather` is the MPI edge.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from executor.report.compare import LayerTimes, Measured
from executor.runtime.timers import PHASES, Timers


@dataclass(frozen=True)
class RankTimes:
    """One rank's raw timings, as sent to rank 0 (plain data, picklable)."""

    rank: int
    step_wall: dict  # step -> seconds
    totals: dict  # (step, layer, phase) -> seconds
    layer_order: tuple  # layers in the order this rank first ran them
    spans: tuple = ()  # (layer, phase, start_s, end_s, step), seconds since the common start
    peak_bytes: int | None = None  # the arrays this rank held at most during its memory step (executor.backend.host_memory)
    attributed: tuple = ()  # the steps whose spans stand for the timed steps' (a GPU's attribution step)


def rank_times(rank: int, timers: Timers, t0: float, peak_bytes: int | None = None) -> RankTimes:
    """Package a rank's timers (and its measured peak memory, if any); span times become seconds
    since ``t0`` (the common start)."""
    order: dict[str, None] = {}
    for s in sorted(timers.spans, key=lambda s: s.start_s):
        order.setdefault(s.layer, None)
    for key in timers.totals:
        order.setdefault(key[1], None)
    spans = tuple((s.layer, s.phase, s.start_s - t0, s.end_s - t0, s.step) for s in timers.spans)
    return RankTimes(rank, dict(timers.step_wall), dict(timers.totals), tuple(order), spans, peak_bytes,
                     tuple(timers.attributed))


def timed_steps(ranks: list[RankTimes], steps: int) -> list[int]:
    """The last ``steps`` steps every rank finished (warm-up steps come first and are dropped)."""
    common = set(ranks[0].step_wall)
    for r in ranks[1:]:
        common &= set(r.step_wall)
    done = sorted(common)
    return done[-steps:] if steps > 0 else []


def aggregate(ranks: list[RankTimes], steps: int) -> Measured:
    """Reduce every rank's timings to the measurement the report compares (pure)."""
    if not ranks:
        raise ValueError("no rank reported timings")
    timed = timed_steps(ranks, steps)
    if not timed:
        raise ValueError("no timed step finished on every rank")
    walls = [max(r.step_wall[s] for r in ranks) for s in timed]
    order: dict[str, None] = {}
    for r in sorted(ranks, key=lambda r: r.rank):
        for name in r.layer_order:
            order.setdefault(name, None)
    layers = []
    spanned = list(ranks[0].attributed) or timed  # the attribution step's spans, where the timed steps had none
    for name in order:
        phases = {}
        for ph in PHASES:
            per_step = [max(r.totals.get((s, name, ph), 0.0) for r in ranks) for s in spanned]
            phases[ph] = statistics.median(per_step)
        layers.append(LayerTimes(name, phases))
    peaks = [r.peak_bytes for r in ranks]
    return Measured(ranks=len(ranks), steps=len(timed), step_s=statistics.median(walls),
                    step_min_s=min(walls), step_max_s=max(walls), layers=tuple(layers),
                    peak_bytes=None if None in peaks else max(peaks))


def gather(comm, timers: Timers, t0: float, peak_bytes: int | None = None) -> list[RankTimes] | None:
    """Every rank's :class:`RankTimes` on rank 0 (None on the other ranks)."""
    mine = rank_times(comm.Get_rank(), timers, t0, peak_bytes)
    got = comm.gather(mine, root=0)
    return sorted(got, key=lambda r: r.rank) if got is not None else None
