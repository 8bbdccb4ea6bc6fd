"""Other pipeline pairs' stage gaps closed side by side, to prove the choice (pure).

Once the pipeline search holds its choice, every other pair whose lower bound is below the best
step is searched again with its memory-bound stages' gaps closed, most promising first
(:func:`planner.pipeline.search.proved`): each closing is a function of its pair alone, so with
a :class:`planner.problem.parallel.Parallel` of several processes the pairs are handed out as
:class:`ClosingTask` s, the search's own process taking them in order beside the workers. A
worker searches its pair on a pricing of its own (the planning call's kernel times and layers
kept across its tasks, :func:`planner.pipeline.pair_bounds.kept_pricing`) and sends back only
the pair's step, cut, lower bound and stage solves. The results are taken in the order one process
takes the pairs, each only if its pair is still to be closed under the best step then held, so
the pairs closed and the answer are the ones one process gives; a worker's pair that becomes the
best is searched again here, for the plan itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from planner.pipeline.choice import Best, Candidate, OutOfTime
from planner.pipeline.pair_bounds import kept_pricing
from planner.pipeline.stack import Stack
from planner.problem.parallel import Parallel
from planner.problem.solve import Settings

#: a closing its deadline left unfinished (its gaps stay open)
LATE = "late"


@dataclass(frozen=True)
class ClosingTask:
    """One (S, m, V)'s closing, as a worker computes it: the search's inputs, the pair, and the
    deadline (``time.perf_counter``'s, the same clock in every process on one machine) at which
    closing stops."""

    stack: Stack
    batch: int
    devices: int
    machine: Machine
    compute: ComputeModel
    settings: Settings  # without its budget and workers (neither crosses processes)
    limit: float
    exact: bool
    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    deadline: float | None
    searcher: type  # the search's own class (planner.pipeline.search._Search), which closes the pair


@dataclass(frozen=True)
class Closed:
    """A pair's closing, as sent back: its best step and cut, its lower bound, the stage solves."""

    step_s: float
    cut: tuple[int, ...]
    lower_s: float
    solves: int


def close_pair(task: ClosingTask, kept: dict) -> Closed | str | None:
    """``task``'s pair searched with its gaps closed: :class:`Closed`, None (no cut fits) or
    :data:`LATE`; ``kept``: the worker's dict across its tasks (:func:`kept_pricing`)."""
    settings, compute = kept_pricing(task.settings, task.compute, kept)
    search = task.searcher(task.stack, task.batch, task.devices, task.machine, compute, task.limit, settings, task.exact,
                     task.schedule)
    search.deadline = task.deadline
    try:
        got = search.best(task.stages, task.micro_batches, close=True, chunks=task.chunks)
    except OutOfTime:
        return LATE
    return None if got is None else Closed(got.step_s, got.cut, got.lower_s, search.solves)


def closed_side_by_side(search, parallel: Parallel, best: Best, out: list[Candidate], order: list[int],
                        tolerance: float) -> Best:
    """:func:`planner.pipeline.search.proved`'s loop over ``order`` (indices into ``out``, most
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
        except OutOfTime:
            return LATE

    def taken(k: int, got) -> None:
        """``order[k]``'s closing, into ``out`` and the best held (as
        :func:`planner.pipeline.search.closed`)."""
        i, c = order[k], out[order[k]]
        if got is None or got == LATE:
            return
        out[i] = replace(c, step_s=min(got.step_s, c.step_s or got.step_s), cut=got.cut,
                         lower_s=max(c.lower_s, got.lower_s), closed=True)
        if got.step_s < held[0].step_s * (1 - 1e-12):
            if isinstance(got, Closed):  # a worker's: searched again here, for the plan itself
                deadline, search.deadline = search.deadline, None
                try:
                    got = search.best(c.stages, c.micro_batches, close=True, chunks=c.chunks)
                finally:
                    search.deadline = deadline
            held[0] = got
        elif isinstance(got, Closed):
            search.solves += got.solves

    order = [i for i in order if wanted(i)]  # the pairs handed out (fewer may be needed, never more)
    tasks = [ClosingTask(search.stack, search.batch, search.p, search.machine, search.compute,
                         replace(search.settings, budget=None, parallel=None), search.limit, search.exact,
                         search.schedule, out[i].stages, out[i].micro_batches, out[i].chunks, search.deadline,
                         type(search))
             for i in order]
    results = parallel.unordered(close_pair, tasks, here,
                                 [(search.p // out[i].stages, search.batch // out[i].micro_batches) for i in order])
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
