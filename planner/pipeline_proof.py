"""Proving the pipeline search's choice: pairs compared by their relaxed stages searched again with
their gaps closed, the chosen pair's first, then every pair that could still win, until none is left
or the time is spent (pure; planner.pipeline_search, module docstring)."""

from __future__ import annotations

import time
from dataclasses import replace

from planner.pipeline_choice import Best, Candidate, OutOfTime


def closed(search, best: Best, out: list[Candidate], i: int) -> Best:
    """``out[i]``'s ``(S, m)`` searched again with its memory-bound stages' gaps closed (module
    docstring), ``out[i]`` updated, and the better of it and ``best``."""
    c = out[i]
    try:
        got = search.best(c.stages, c.micro_batches, close=True, chunks=c.chunks)
    except OutOfTime:  # its gaps stay open (its lower bound counts them)
        return best
    if got is None:  # no cut fits with exact stages where a relaxed one did: cannot be, but stay safe
        return best
    out[i] = replace(c, step_s=min(got.step_s, c.step_s or got.step_s), cut=got.cut,
                     lower_s=max(c.lower_s, got.lower_s), closed=True)
    return got if got.step_s < best.step_s * (1 - 1e-12) else best


def proved(search, best: Best, out: list[Candidate], seconds: float | None,
           tolerance: float) -> tuple[Best, list[Candidate]]:
    """The chosen pair's gaps closed; then every other pair whose lower bound is more than
    ``tolerance`` below the best step, most promising (least relaxed step) first, until none is left
    or ``seconds`` pass: its stage solves' gap closing stops at that deadline (module docstring)."""
    index = {c.key: i for i, c in enumerate(out)}
    budget = search.settings.budget
    ends = None if budget is None else budget.deadline
    target = min(best.step_s, search.ceiling)  # a step the caller holds: only pairs that could beat it count
    if best.solver.relaxed and best.lower_s < target * (1 - tolerance) and not (budget is not None and budget.expired()):
        search.deadline = ends
        best = closed(search, best, out, index[(best.stages, best.micro_batches, best.chunks)])
    start = time.perf_counter()
    search.deadline = min((x for x in (ends, None if seconds is None else start + seconds) if x is not None),
                          default=None)
    order = sorted((c.step_s, i) for i, c in enumerate(out) if c.step_s is not None and not c.closed
                   and c.key != (best.stages, best.micro_batches, best.chunks))
    for _, i in order:
        if search.deadline is not None and time.perf_counter() >= search.deadline:
            break
        if out[i].lower_s < min(best.step_s, search.ceiling) * (1 - tolerance):
            best = closed(search, best, out, i)
    return best, out
