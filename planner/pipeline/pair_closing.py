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

from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from planner.pipeline.choice import OutOfTime
from planner.pipeline.pair_bounds import kept_pricing
from planner.pipeline.stack import Stack
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
    from planner.pipeline.search import _Search  # (a module that hands these tasks out)

    settings, compute = kept_pricing(task.settings, task.compute, kept)
    search = _Search(task.stack, task.batch, task.devices, task.machine, compute, task.limit, settings, task.exact,
                     task.schedule)
    search.deadline = task.deadline
    try:
        got = search.best(task.stages, task.micro_batches, close=True, chunks=task.chunks)
    except OutOfTime:
        return LATE
    return None if got is None else Closed(got.step_s, got.cut, got.lower_s, search.solves)

