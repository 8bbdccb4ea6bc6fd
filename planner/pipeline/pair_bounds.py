"""The pipeline and micro-batch pairs' lower bounds computed side by side (pure).

Each pair's bound (:func:`planner.pipeline.bound.stage_bound`) prices one block's layers on the
pair's ranks at its micro-batch, alone: most of the pipeline search's time where most pairs are
only bounded, never searched. With a :class:`planner.problem.parallel.Parallel` of several
processes the search hands the pairs out as :class:`PairTask` s and bounds them in its own
process too, taking them in order beside the workers (what it prices stays where its search
uses it); in a worker :func:`pair_bound` prices and bounds a pair and sends back the bound and
the priced layers, which the search's own pricing of the pair takes in (the stage solves of a
pair it then searches reuse them, as they reuse the bound's pricing in one process). The
numbers are the same in any process, so the answer is too.
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


def pair_bound(task: PairTask, kept: dict) -> tuple[StageBound, dict, tuple | None]:
    """``task``'s bound, its pricing's distinct layers (``Builder.nodes``) and what it added to the
    planning call's pricing (:func:`priced_since`); ``kept``: the worker's dict across its tasks
    (:func:`kept_pricing`)."""
    settings, compute = kept_pricing(task.settings, task.compute, kept)
    before = priced_sizes(settings, compute)
    builder = stage_builder(task.ranks, task.micro_batch, task.machine, compute, settings)
    got = stage_bound(builder, task.stack, task.stages, task.micro_batches, task.limit, task.sends_s, task.chunks)
    return got, builder.nodes, priced_since(settings, compute, before)


def _priced_dicts(settings: Settings, compute: ComputeModel) -> tuple[dict, ...]:
    """The planning call's pricing, remembered: its collectives' and layers' (PricedLayers) and its
    kernel times (PricedOnce); none where nothing is kept."""
    if settings.priced is None:
        return ()
    asked = getattr(compute, "asked", None)
    return (settings.priced.collectives, settings.priced.estimates) + ((asked,) if isinstance(asked, dict) else ())


def priced_sizes(settings: Settings, compute: ComputeModel) -> tuple[int, ...]:
    return tuple(len(d) for d in _priced_dicts(settings, compute))


def priced_since(settings: Settings, compute: ComputeModel, sizes: tuple[int, ...]) -> tuple | None:
    """The entries each of the pricing's dicts gained since it held ``sizes`` (dicts keep their
    order: the last ones), for the command to take in (:func:`take_priced`)."""
    dicts = _priced_dicts(settings, compute)
    if not dicts:
        return None
    return tuple(list(d.items())[n:] for d, n in zip(dicts, sizes))


def take_priced(settings: Settings, compute: ComputeModel, added: tuple | None) -> None:
    """A worker's :func:`priced_since` into this process's pricing: each entry a pure function of
    its key, so the same number whichever process priced it; one priced here already is kept."""
    if added is None:
        return
    for d, items in zip(_priced_dicts(settings, compute), added):
        for key, value in items:
            d.setdefault(key, value)


def bound_side_by_side(parallel: Parallel, stack: Stack, batch: int, p: int, machine: Machine,
                       compute: ComputeModel, settings: Settings, limit: float,
                       sends: Callable[[int, int, int], tuple[float, ...]],
                       builder_of: Callable[[int, int, int], object],
                       here: Callable[[int, int, int], StageBound]) -> Callable:
    """``many(combos)``: for (floor, S, m, V) ``combos``, ``(i, (bound, fits, mean))`` as each is
    done (:func:`planner.pipeline.triples.bounded`): this process takes pairs in order beside the
    workers (``here(S, m, V)``: the bound on its own pricing), and each pair a worker bounded has
    its priced layers put into ``builder_of(S, m, V)``'s pricing. ``sends(S, m, V)``: each stage's
    sends per micro-batch."""
    plain = replace(settings, budget=None, parallel=None)

    def many(combos: list) -> Iterator[tuple[int, tuple[float, bool, float]]]:
        tasks = [PairTask(stack, p // s, batch // m, machine, compute, plain, s, m, v, limit, sends(s, m, v))
                 for _, s, m, v in combos]
        results = parallel.unordered(pair_bound, tasks, lambda i: (here(*combos[i][1:]), None, None))
        try:
            for i, (got, nodes, added) in results:
                if nodes is not None:  # a worker's: its pricing joins this process's
                    _, s, m, v = combos[i]
                    priced = builder_of(s, m, v).nodes
                    for key, node in nodes.items():
                        priced.setdefault(key, node)
                    take_priced(settings, compute, added)
                yield i, (got.step_s, got.fits, got.mean_s)
        finally:
            results.close()

    return many
