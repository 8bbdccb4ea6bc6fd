"""The pipeline and micro-batch pairs' lower bounds computed side by side (pure).

Each pair's bound (:func:`planner.pipeline.bound.stage_bound`) prices one block's layers on the
pair's ranks at its micro-batch, alone: most of the pipeline search's time where most pairs are
only bounded, never searched. With a :class:`planner.problem.parallel.Parallel` of several
processes the search hands the pairs out as :class:`PairTask` s and bounds them in its own
process too, taking them in order beside the workers (what it prices stays where its search
uses it); in a worker :func:`pair_bound` prices and bounds a pair and sends back the bound
alone. A pair a worker bounded and the search then searches is priced again in the search's
process: the few pairs searched cost less to price again than every bounded pair's pricing
costs to send back and take in (docs/planner.md, "Using the cores"). The numbers are the same
in any process, so the answer is too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

from costmodel.compute.model import ComputeModel
from costmodel.comm.spans import pipeline_view
from costmodel.machine.model import Machine
from planner.pipeline.bound import StageBound, stage_bound
from planner.pipeline.stack import Stack
from planner.pipeline.stage_solver import stage_builder
from planner.problem.parallel import Parallel
from planner.problem.solve import Settings


@dataclass(frozen=True)
class PairTask:
    """One (S, m, V)'s bound, as a worker computes it: the stack, the stage's ranks and micro-batch,
    the pricing's inputs, and the stages' point-to-point seconds per micro-batch summed."""

    stack: Stack
    ranks: int
    micro_batch: int
    machine: Machine
    compute: ComputeModel
    settings: Settings  # without its budget and workers (neither crosses processes)
    stages: int
    micro_batches: int
    chunks: int
    limit: float
    sends_s: tuple[float, ...]  # each stage's (device's)
    #: the step held, as :func:`planner.pipeline.bound.stage_bound` takes it (None: the whole bound)
    above: float | None = None
    holds: tuple[int, ...] = ()  # each stage's kept micro-batches (stage_bound's ``holds``)


def kept_pricing(settings: Settings, compute: ComputeModel, kept: dict) -> tuple[Settings, ComputeModel]:
    """``settings`` and ``compute`` with the planning call's pricing a worker keeps across its tasks
    in ``kept`` (its token's: the layers and collectives priced, and the kernel times of a compute
    model that remembers them, :class:`planner.problem.priced_once.PricedOnce`), so the worker's
    later pairs and ZeRO stages reuse what its earlier ones priced, as one process does (only
    the latest planning call's is kept)."""
    if settings.priced is None:
        return settings, compute
    mine = kept.get("priced")
    if mine is None or mine.token != settings.priced.token:
        mine = kept["priced"] = settings.priced
        kept["compute"] = compute
    return replace(settings, priced=mine), kept["compute"]


def pair_bound(task: PairTask, kept: dict) -> StageBound:
    """``task``'s bound; ``kept``: the worker's dict across its tasks (:func:`kept_pricing`: its
    later pairs and ZeRO stages reuse what its earlier ones priced)."""
    settings, compute = kept_pricing(task.settings, task.compute, kept)
    builder = stage_builder(task.ranks, task.micro_batch, pipeline_view(task.machine, task.ranks * task.stages, task.stages),
                            compute, settings)
    return stage_bound(builder, task.stack, task.stages, task.micro_batches, task.limit, task.sends_s, task.chunks,
                       task.above, task.holds)


def pair_tasks(stack: Stack, batch: int, p: int, machine: Machine, compute: ComputeModel, settings: Settings,
               limit: float, sends: Callable[[int, int, int], tuple[float, ...]], combos: list,
               above: float | None = None,
               holds: Callable[[int, int, int], tuple[int, ...]] = lambda s, m, v: ()) -> list[PairTask]:
    """The :class:`PairTask` of each (floor, S, m, V) of ``combos`` (``settings`` without its budget
    and workers, which never cross processes; ``above``: each task's; ``holds(S, m, V)``: its
    stages' kept micro-batches)."""
    plain = settings.plain()
    return [PairTask(stack, p // s, batch // m, machine, compute, plain, s, m, v, limit, sends(s, m, v), above,
                     holds(s, m, v)) for _, s, m, v in combos]


def pair_keys(tasks: list[PairTask]) -> list[tuple[int, int]]:
    """Each task's key: its stage's ranks and micro-batch, what its pricing is kept under (a process
    that bounded the pair before holds it: lifecycle.process_pool's ``keys``)."""
    return [(t.ranks, t.micro_batch) for t in tasks]


def bound_side_by_side(parallel: Parallel, stack: Stack, batch: int, p: int, machine: Machine,
                       compute: ComputeModel, settings: Settings, limit: float,
                       sends: Callable[[int, int, int], tuple[float, ...]],
                       here: Callable[..., StageBound],
                       holds: Callable[[int, int, int], tuple[int, ...]] = lambda s, m, v: ()) -> Callable:
    """``many(combos, above=None)``: for (floor, S, m, V) ``combos``, ``(i, (bound, fits, mean))``
    as each is done (:func:`planner.pipeline.triples.bounded`): this process takes pairs in order
    beside the workers (``here(S, m, V, above)``: the bound on its own pricing); ``above``: the
    step held, as :func:`planner.pipeline.bound.stage_bound` takes it (None: each bound whole).
    ``sends(S, m, V)``: each stage's sends per micro-batch; ``holds(S, m, V)``: its stages' kept
    micro-batches."""

    def many(combos: list, above: float | None = None) -> Iterator[tuple[int, tuple[float, bool, float]]]:
        tasks = pair_tasks(stack, batch, p, machine, compute, settings, limit, sends, combos, above, holds)
        # bounded where it was before (an earlier ZeRO stage's bound), a pair is priced there already
        results = parallel.unordered(pair_bound, tasks, lambda i: here(*combos[i][1:], above), pair_keys(tasks),
                                     shared=(stack,))
        try:
            for i, got in results:
                yield i, (got.step_s, got.fits, got.mean_s)
        finally:
            results.close()

    return many
