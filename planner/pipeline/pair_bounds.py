"""The pipeline and micro-batch pairs' lower bounds computed side by side (pure).

Each pair's bound (:func:`planner.pipeline.bound.stage_bound`) prices one block's layers on the
pair's ranks at its micro-batch, alone: most of the pipeline search's time where most pairs are
only bounded, never searched. With a :class:`planner.problem.parallel.Parallel` of several workers
the search hands each pair out as a :class:`PairTask`; :func:`pair_bound` prices and bounds it
there and sends back the bound and the priced layers, which the search's own pricing of the pair
takes in (the stage solves of a pair it then searches reuse them, as they reuse the bound's
pricing in one process). The numbers are the same in any process, so the answer is too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator

from costmodel.compute.model import ComputeModel
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


def pair_bound(task: PairTask, kept: dict) -> tuple[StageBound, dict]:
    """``task``'s bound, and its pricing's distinct layers (``Builder.nodes``); ``kept``: the
    worker's dict across its tasks, where the planning call's pricing (its token's) stays, so
    the worker's later pairs and ZeRO stages reuse what its earlier ones priced, as one process
    does (only the latest planning call's is kept)."""
    settings = task.settings
    if settings.priced is not None:
        mine = kept.get("priced")
        if mine is None or mine.token != settings.priced.token:
            mine = kept["priced"] = settings.priced
        settings = replace(settings, priced=mine)
    builder = stage_builder(task.ranks, task.micro_batch, task.machine, task.compute, settings)
    got = stage_bound(builder, task.stack, task.stages, task.micro_batches, task.limit, task.sends_s, task.chunks)
    return got, builder.nodes


def bound_side_by_side(parallel: Parallel, stack: Stack, batch: int, p: int, machine: Machine,
                       compute: ComputeModel, settings: Settings, limit: float,
                       sends: Callable[[int, int, int], tuple[float, ...]],
                       builder_of: Callable[[int, int, int], object]) -> Callable:
    """``many(combos)``: for (floor, S, m, V) ``combos``, ``(i, (bound, fits, mean))`` as each worker
    finishes (:func:`planner.pipeline.triples.bounded`); each pair's priced layers go into
    ``builder_of(S, m, V)``'s pricing. ``sends(S, m, V)``: each stage's sends per micro-batch."""
    plain = replace(settings, budget=None, parallel=None)

    def many(combos: list) -> Iterator[tuple[int, tuple[float, bool, float]]]:
        tasks = [PairTask(stack, p // s, batch // m, machine, compute, plain, s, m, v, limit, sends(s, m, v))
                 for _, s, m, v in combos]
        results = parallel.unordered(pair_bound, tasks)
        try:
            for i, (got, nodes) in results:
                _, s, m, v = combos[i]
                priced = builder_of(s, m, v).nodes
                for key, node in nodes.items():
                    priced.setdefault(key, node)
                yield i, (got.step_s, got.fits, got.mean_s)
        finally:
            results.close()

    return many
