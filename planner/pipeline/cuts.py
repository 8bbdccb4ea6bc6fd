"""The best cut of ``n`` blocks into ``S`` contiguous pipeline stages (pure, exact).

Stage ``s`` holding ``k`` blocks costs ``(T, O)`` = ``cost(s, k)`` (None when it does not fit): its
per-micro-batch time and its once-a-step time. A cut ``k_0 + ... + k_{S-1} = n`` (each ``k_s >= 1``)
gives the synchronous pipeline's step (``costmodel.step.pipeline``)::

    step = sum_s T_s + (m - 1) max_s T_s + max_s O_s

The two maxima make it no plain shortest path, so (as Alpa's stage search enumerates the slowest
stage's latency) every value ``t`` some ``T`` takes is tried as the bound ``max_s T_s <= t``; under
it a dynamic programme over (stage, blocks used) keeps the Pareto front of ``(sum T, max O)``, and
the step is ``sum T + (m - 1) t + max O`` at the best point. The bound the optimum meets with
equality is among those tried, so the minimum over them is exact. Bounds whose ``(m - 1) t`` alone
already loses to the best cut found are skipped.
"""

from __future__ import annotations

from typing import Callable

Cost = Callable[[int, int], "tuple[float, float] | None"]


def best_cut(n: int, stages: int, micro_batches: int, cost: Cost,
             ks: range) -> tuple[float, tuple[int, ...]] | None:
    """The least step over cuts whose stage sizes lie in ``ks``, and the sizes; None if none fits."""
    table = {(s, k): cost(s, k) for s in range(stages) for k in ks}
    values = sorted({c[0] for c in table.values() if c is not None})
    best: tuple[float, tuple[int, ...]] | None = None
    for t in values:
        if best is not None and (micro_batches - 1) * t >= best[0]:
            break
        got = _under(n, stages, table, ks, t)
        if got is None:
            continue
        total_t, max_o, cut = got
        step = total_t + (micro_batches - 1) * t + max_o
        if best is None or step < best[0]:
            best = (step, cut)
    return best


def _under(n: int, stages: int, table: dict, ks: range, t: float) -> tuple[float, float, tuple[int, ...]] | None:
    """The cut with every ``T <= t`` minimising ``sum T + max O`` (one point of the Pareto front of
    (sum T, max O) is best for that sum, and the front is kept whole until the end)."""
    fronts: dict[int, list[tuple[float, float, tuple[int, ...]]]] = {0: [(0.0, 0.0, ())]}
    for s in range(stages):
        nxt: dict[int, list[tuple[float, float, tuple[int, ...]]]] = {}
        left = stages - s - 1
        for used, front in fronts.items():
            for k in ks:
                c = table[(s, k)]
                total = used + k
                if c is None or c[0] > t or total + left * ks.start > n or total + left * ks[-1] < n:
                    continue
                bucket = nxt.setdefault(total, [])
                bucket.extend((st + c[0], max(mo, c[1]), cut + (k,)) for st, mo, cut in front)
        fronts = {u: _pareto(f) for u, f in nxt.items()}
    final = fronts.get(n)
    if not final:
        return None
    return min(final, key=lambda x: (x[0] + x[1], x[2]))


def _pareto(points: list[tuple[float, float, tuple[int, ...]]]) -> list[tuple[float, float, tuple[int, ...]]]:
    """The points no other point beats on both sum T and max O (ties: the smaller cut tuple)."""
    out: list[tuple[float, float, tuple[int, ...]]] = []
    for p in sorted(points):
        if not out or p[1] < out[-1][1]:
            out.append(p)
    return out


def cut_lower(n: int, stages: int, micro_batches: int, lower: Callable[[int, int], "float | None"],
              hi: int) -> float:
    """No cut of ``n`` blocks into ``stages`` stages has a shorter step, from ``lower(s, k)``: at
    most the optimum of stage ``s``'s own objective ``(m + S - 1) T + O`` holding ``k`` blocks (its
    sends included; None: it does not fit), known for ``k <= hi + 1`` (``hi + 1`` only when
    ``hi < n - S + 1``).

    A cut whose stages' brackets are at least ``L_s`` has a step of at least ``((m - 1) max_s L_s +
    sum_s L_s) / (m + S - 1)`` (:func:`planner.pipeline.interleave.lower_s` with one chunk: the
    stage of the largest ``L`` weighted as the slowest). The least of it over cuts whose stages all
    hold at most ``hi`` blocks is, as in :func:`best_cut`, the least over every value ``t`` an
    ``L`` takes of ``(m - 1) t + sum L`` for the cuts with every ``L <= t``, each a dynamic
    programme (a size ``lower`` does not know counts 0, as no stage costs less). A cut with a stage
    of ``k > hi`` blocks has a step of at least that stage's ``m T + O >= m / (m + S - 1) [(m + S
    - 1) T + O]``, and a stage's optimum grows with its blocks (a block fewer is a feasible choice
    for the same layers and less memory), so at least ``m / (m + S - 1) lower(s, hi + 1)``."""
    inf = float("inf")
    weight = micro_batches + stages - 1
    table = {}
    for s in range(stages):
        for k in range(1, min(hi, n - stages + 1) + 1):
            got = lower(s, k)
            if got is not None:
                table[(s, k)] = got
    out, values = inf, sorted(set(table.values()))
    lo, top = 0, len(values)  # the least ``t`` some cut meets: a bisection (more ``t`` admits more cuts)
    while lo < top:
        mid = (lo + top) // 2
        lo, top = (lo, mid) if _least_sum(n, stages, hi, table, values[mid]) is not None else (mid + 1, top)
    for t in values[lo:]:
        if (micro_batches - 1) * t / weight >= out:
            break
        total = _least_sum(n, stages, hi, table, t)
        out = min(out, ((micro_batches - 1) * t + total) / weight)
    if hi < n - stages + 1:
        tails = [got for got in (lower(s, hi + 1) for s in range(stages)) if got is not None]
        out = min(out, min(tails, default=inf) * micro_batches / weight)
    return out


def _least_sum(n: int, stages: int, hi: int, table: dict, t: float) -> float | None:
    """The least ``sum_s L_s`` over cuts whose stages hold at most ``hi`` blocks, each ``L <= t``."""
    inf = float("inf")
    best = {0: 0.0}
    for s in range(stages):
        nxt: dict[int, float] = {}
        for used, total in best.items():
            for k in range(1, min(hi, n - used - (stages - s - 1)) + 1):
                got = table.get((s, k))
                if got is None or got > t:
                    continue
                nxt[used + k] = min(nxt.get(used + k, inf), total + got)
        best = nxt
    return best.get(n)
