"""Pipeline pairs' bounds computed by a worker ahead of their ZeRO stage's search (pure).

While the search's process plans the first ZeRO stage's whole batch (whose pipelines are weighed
after every stage has its plan, :mod:`planner.first_plan`), the workers have nothing to do. The
pairs the next stages' searches will bound are handed to one of them then
(:meth:`BoundsAhead.hand_out`), as one task (:func:`bounds_ahead`): every pair's first partial bound
(its largest layer), then whole bounds, the next stage's first, least first partial bound first,
until the first search to bound pairs calls them in (:meth:`BoundsAhead.bound`: the worker stops
at the end of the pair it is bounding, waited for by a search of the pairs handed out, not by
another, a first stage's own; the pairs it had not come to are bounded as before, side by side). Llama 3.1 405B on 16,384 H100s, where ZeRO-1's whole batch takes about 0.9 s: with
``--jobs 2`` the command answered in 5.5 s, 6.3 s without the bounds ahead (the 2-core development
VM, the median of five runs each, alternately).

A pair is bounded whole there, and keeps on the way each partial bound that
:func:`planner.pipeline.bound.partial_bounds` gives: against the step a stage's search holds when
it comes to the pair (known only then), the bound is the first partial bound that reaches it, else
the whole one (:func:`against`), the very number bounding the pair then would give. A pair is
matched by its task without that step (:func:`task_key`), so a search under other settings, or a
lower memory limit, takes none of them. The answer is the one a single process gives.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, replace
from itertools import islice
from typing import Hashable, Sequence

from planner.pipeline.bound import StageBound, partial_bounds, stage_bound
from planner.pipeline.workers.pair_bounds import PairTask, kept_pricing
from planner.pipeline.stage_solver import stage_builder
from planner.problem.parallel import Parallel


@dataclass(frozen=True)
class BoundAhead:
    """A pair's partial bounds ``(step, mean bracket)`` in the order they are weighed, and its whole
    bound (None: not come to: only its first pass's partial bounds are known)."""

    partials: tuple[tuple[float, float], ...]
    whole: StageBound | None = None


def against(got: BoundAhead, above: float | None) -> StageBound | None:
    """The pair's bound against ``above``, the step held (None: the whole bound), as
    :func:`planner.pipeline.bound.stage_bound` gives it: the first partial bound that reaches
    ``above`` (whether anything fits then not known), else the whole bound; None where that is
    not known."""
    if above is not None and above < float("inf"):
        for step, mean in got.partials:
            if step >= above:
                return StageBound(step, None, mean)
    return got.whole


def task_key(task: PairTask) -> Hashable:
    """What a pair's bound depends on, but for the step held (the search's own network, machine and
    compute model: one planning call's)."""
    return (task.settings, task.ranks, task.micro_batch, task.stages, task.micro_batches, task.chunks,
            task.limit, task.sends_s, task.holds)


def _partials(task: PairTask, kept: dict, first: bool) -> tuple[object, tuple[tuple[float, float], ...]]:
    """``task``'s builder and its partial bounds: the first alone (its largest layer at its least
    seconds under any ZeRO stage), or all."""
    settings, compute = kept_pricing(task.settings, task.compute, kept)
    builder = stage_builder(task.ranks, task.micro_batch, task.machine, compute, settings)
    weight = task.micro_batches + (task.stages - 1) / task.chunks
    steps = partial_bounds(builder, task.stack, task.stages, weight, task.sends_s)
    return builder, tuple(islice(steps, 1) if first else steps)


def bound_ahead(task: PairTask, kept: dict) -> BoundAhead:
    """``task``'s whole bound with its partial bounds; ``kept``: the worker's dict across its tasks
    (:func:`planner.pipeline.workers.pair_bounds.kept_pricing`)."""
    builder, partials = _partials(task, kept, False)
    whole = stage_bound(builder, task.stack, task.stages, task.micro_batches, task.limit, task.sends_s,
                        task.chunks, None, task.holds)
    return BoundAhead(partials, whole)


def bounds_ahead(tasks: tuple[PairTask, ...], kept: dict) -> dict:
    """Each task's :class:`BoundAhead` by its :func:`task_key`, until the search calls them in
    (``kept["stopped"]()``): first every pair's first partial bound (its largest layer at its least
    seconds under any ZeRO stage: one layer priced, shared by the stages), which alone bounds out
    the pairs far slower than any step held; then the whole bounds, stage by stage, least first
    partial bound first (the pairs a search must bound whole, and likely searches)."""
    stopped = kept.get("stopped", lambda: False)
    got: dict = {}
    for task in tasks:
        if stopped():
            return got
        got[task_key(task)] = BoundAhead(_partials(task, kept, True)[1])
    stage = {}  # each stage's settings, in the order handed out: its pairs before the next stage's
    for task in tasks:
        stage.setdefault(task.settings, len(stage))
    for task in sorted(tasks, key=lambda t: (stage[t.settings], got[task_key(t)].partials[-1][0])):
        if stopped():
            break
        got[task_key(task)] = bound_ahead(task, kept)
    return got


class BoundsAhead:
    """The pairs handed to a worker ahead of their stage's search, and their bounds once called in
    (module docstring)."""

    def __init__(self, parallel: Parallel):
        self.parallel = parallel
        self.future: Future | None = None
        self.stopping = False  # the worker was asked to stop and send what it has
        self.keys: set = set()  # the pairs handed out (task_key)
        self.got: dict = {}  # key -> BoundAhead

    def hand_out(self, tasks: Sequence[PairTask]) -> None:
        """``tasks`` (each without the step held) to one worker, bounded in this order."""
        tasks = tuple(replace(t, above=None) for t in tasks)
        if not tasks or self.future is not None:
            return
        self.keys = {task_key(t) for t in tasks}
        self.future = self.parallel.submit(bounds_ahead, tasks)

    def bound(self, task: PairTask) -> StageBound | None:
        """``task``'s bound against its step held, where the worker bounded it ahead (None: not
        handed out, or not come to). The first search to bound pairs calls them in: it needs the
        workers. A search of the pairs handed out waits for what the worker has; another (a first
        stage's own pipelines, searched at once) does not."""
        key = task_key(task)
        self._collect(wait=key in self.keys)
        got = self.got.get(key)
        return None if got is None else against(got, task.above)

    def _collect(self, wait: bool) -> None:
        """The worker's bounds so far, once it has sent them (``wait``: waited for): asked to stop
        at the end of the pair it is bounding."""
        future = self.future
        if future is None:
            return
        if not self.stopping:
            self.stopping = True
            if future.cancel():
                self.future = None
                return
            self.parallel.stop_handed_out()
        if not wait and not future.done():
            return
        self.future = None
        try:
            self.got.update(future.result())
        except Exception:  # noqa: BLE001 - a worker that failed: its pairs are bounded as before (a lost worker is raised there)
            pass

    def close(self) -> None:
        """The task taken back, or stopped, where no search called it in (not waited for: the
        command is answering)."""
        future, self.future = self.future, None
        if future is not None and not self.stopping and not future.cancel():
            self.parallel.stop_handed_out()
