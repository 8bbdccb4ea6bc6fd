"""The choice proved: other pipeline pairs' stage gaps closed, one after another or side by side (pure).

Once the pipeline search holds its choice, the chosen pair's memory-bound stages' gaps are closed
(:func:`closed`), then every other pair whose lower bound is below the best step is searched again
with its gaps closed, most promising first, until none is left or the proof's time is spent
(:func:`proved`; :mod:`planner.pipeline.search`, module docstring). Each closing is a function of
its pair alone, so with a :class:`planner.problem.parallel.Parallel` of several processes the
pairs are handed out as :class:`planner.pipeline.workers.pair_searches.SearchTask` s that close, the
search's own process taking them in order beside the workers. A worker searches its pair on a
pricing of its own (the planning call's kernel times and layers kept across its tasks,
:func:`planner.pipeline.workers.pair_bounds.kept_pricing`) and sends back only the pair's step, cut, lower
bound and stage solves. The results are taken in the order one process takes the pairs, each only
if its pair is still to be closed under the best step then held, so the pairs closed and the
answer are the ones one process gives; a worker's pair that becomes the best is searched again
here, for the plan itself.
"""

from __future__ import annotations

import time
from dataclasses import replace

from planner.pipeline.choice import Best, Candidate, OutOfTime
from planner.pipeline.interleave import Unplanned
from planner.pipeline.workers.pair_searches import LATE, Searched, search_pair, search_task
from planner.problem.parallel import Parallel, side_by_side


def closed(search, best: Best, out: list[Candidate], i: int) -> Best:
    """``out[i]``'s ``(S, m)`` searched again with its memory-bound stages' gaps closed (module
    docstring), ``out[i]`` updated, and the better of it and ``best``."""
    c = out[i]
    try:
        got = search.best(c.stages, c.micro_batches, close=True, chunks=c.chunks)
    except (OutOfTime, Unplanned):  # its gaps stay open (its lower bound counts them)
        return best
    if got is None:  # no cut fits with exact stages where a relaxed one did: cannot be, but stay safe
        return best
    out[i] = replace(c, step_s=min(got.step_s, c.step_s or got.step_s), cut=got.cut,
                     lower_s=max(c.lower_s, got.lower_s), closed=True)
    if c.key == (best.stages, best.micro_batches, best.chunks):  # the choice itself, proved: as
        return got if got.step_s <= best.step_s * (1 + 1e-12) else best  # cheap, its stages closed
    return got if got.step_s < best.step_s * (1 - 1e-12) else best


def proved(search, best: Best, out: list[Candidate], seconds: float | None,
           tolerance: float, close_choice: bool = True) -> tuple[Best, list[Candidate]]:
    """The chosen pair's gaps closed (unless ``close_choice`` is False: its relaxed stages and their
    stated gap stand); then every other pair whose lower bound is more than ``tolerance`` below the
    best step, most promising (least relaxed step) first, until none is left or ``seconds`` pass:
    its stage solves' gap closing stops at that deadline (module docstring)."""
    index = {c.key: i for i, c in enumerate(out)}
    budget = search.settings.budget
    ends = None if budget is None else budget.proof_deadline(search.bounding_s)
    target = min(best.step_s, search.ceiling)  # a step the caller holds: only pairs that could beat it count
    if close_choice and best.solver.relaxed and best.lower_s < target * (1 - tolerance) and \
            not (budget is not None and budget.expired()):
        search.deadline = ends
        best = closed(search, best, out, index[(best.stages, best.micro_batches, best.chunks)])
    start = time.perf_counter()
    search.deadline = min((x for x in (ends, None if seconds is None else start + seconds) if x is not None),
                          default=None)
    order = [i for _, i in sorted((c.step_s, i) for i, c in enumerate(out) if c.step_s is not None and not c.closed
                                  and c.key != (best.stages, best.micro_batches, best.chunks))]
    parallel = side_by_side(search.settings.parallel, search.compute)
    if parallel is not None:
        return closed_side_by_side(search, parallel, best, out, order, tolerance), out
    for i in order:
        if search.deadline is not None and time.perf_counter() >= search.deadline:
            break
        if out[i].lower_s < min(best.step_s, search.ceiling) * (1 - tolerance):
            best = closed(search, best, out, i)
    return best, out


def closed_side_by_side(search, parallel: Parallel, best: Best, out: list[Candidate], order: list[int],
                        tolerance: float) -> Best:
    """:func:`proved`'s loop over ``order`` (indices into ``out``, most
    promising first) with the pairs closed side by side on ``parallel`` (module docstring):
    ``search``'s own process takes pairs in order beside the workers; each pair's result is
    taken in ``order``, only while its pair is still to be closed under the best step held then,
    so the pairs closed, ``out`` and the best returned are the ones the loop gives in one process."""
    held = [best]

    def wanted(i: int) -> bool:
        return out[i].lower_s < min(held[0].step_s, search.ceiling) * (1 - tolerance)

    def over() -> bool:
        return search.deadline is not None and time.perf_counter() >= search.deadline

    def here(k: int):
        i = order[k]
        if over() or not wanted(i):
            return None  # not needed by the time it is taken: nor when its turn comes
        c = out[i]
        try:
            return search.best(c.stages, c.micro_batches, close=True, chunks=c.chunks)
        except (OutOfTime, Unplanned):
            return LATE

    def taken(k: int, got) -> None:
        """``order[k]``'s closing, into ``out`` and the best held (as
        :func:`closed`)."""
        i, c = order[k], out[order[k]]
        if got is None or got == LATE or (isinstance(got, Searched) and got.step_s is None):
            return
        out[i] = replace(c, step_s=min(got.step_s, c.step_s or got.step_s), cut=got.cut,
                         lower_s=max(c.lower_s, got.lower_s), closed=True)
        if got.step_s < held[0].step_s * (1 - 1e-12):
            if isinstance(got, Searched):  # a worker's: searched again here, for the plan itself
                deadline, search.deadline = search.deadline, None
                try:
                    got = search.best(c.stages, c.micro_batches, close=True, chunks=c.chunks)
                finally:
                    search.deadline = deadline
            held[0] = got
        elif isinstance(got, Searched):
            search.solves += got.solves

    order = [i for i in order if wanted(i)]  # the pairs handed out (fewer may be needed, never more)
    tasks = [search_task(search, out[i].stages, out[i].micro_batches, out[i].chunks, close=True) for i in order]
    results = parallel.unordered(search_pair, tasks, here,
                                 [(search.p // out[i].stages, search.batch // out[i].micro_batches) for i in order],
                                 shared=(search.stack,))
    done: dict[int, object] = {}
    k = 0
    try:
        for j, got in results:
            done[j] = got
            while k < len(order) and (k in done or not wanted(order[k])):
                if wanted(order[k]):
                    taken(k, done[k])
                k += 1
            if k == len(order) or over():
                break
    finally:
        results.close()
    return held[0]
