"""One pipeline search's pairs, each searched on its own (pure): the stage solvers and pricing of
each (pipeline degree, micro-batch count, model chunks), their bounds, the sends and tied tables
their stages weigh, and the best cut of each (:class:`PairSearch`). The order the pairs are taken
in, the proof and the choice are :mod:`planner.pipeline.search`'s.
"""

from __future__ import annotations

import time

from costmodel.compute.model import ComputeModel
from costmodel.layer.edge_table import PricingStopped
from costmodel.layer.tied import crossing_ties, tied_table_s
from costmodel.comm.spans import pipeline_view
from costmodel.machine.model import Machine
from costmodel.step.pipeline import kept_micro_batches
from networks.ir import Network
from planner.pipeline import interleave
from planner.pipeline.bound import stage_bound
from planner.pipeline.choice import Best, OutOfTime
from planner.pipeline.cuts import best_cut, cut_lower
from planner.pipeline.sends import pair_sends_s, stage_sends_s
from planner.pipeline.stack import Stack, roles
from planner.pipeline.stage_solver import StageSolver
from planner.pipeline.workers.pair_bounds import bound_side_by_side
from planner.pipeline.workers.pair_searches import Searched
from planner.problem.parallel import side_by_side
from planner.problem.solve import Settings

SCHEDULE = "1f1b"


def kept(stages: int, s: int, micro_batches: int, schedule: str = SCHEDULE) -> int:
    """Micro-batches whose activations stage ``s`` is solved to hold: ``min(S - s, m)`` under 1F1B
    for the first and last stage, and for every middle stage the most any middle stage holds
    (stage 1's), so one solution serves them all (planner.pipeline.search, module docstring); all ``m`` under GPipe."""
    return int(kept_micro_batches(schedule, stages, s if s in (0, stages - 1) else 1, micro_batches))


class PairSearch:
    """The pipeline search's state over its pairs (planner.pipeline.search): each (S, m, V)'s stage
    solver and pricing, its bounds, and its best cut (:meth:`best`)."""

    def __init__(self, stack: Stack, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                 settings: Settings, exact: bool = False, schedule: str = SCHEDULE):
        self.stack, self.batch, self.p, self.machine, self.compute = stack, batch, p, machine, compute
        self.schedule = schedule
        self.limit, self.settings, self.exact = limit, settings, exact
        self.deadline: float | None = None  # perf_counter time at which closing stage gaps stops (pair_closing.proved)
        #: perf_counter time at which any search of a pair stops: a worker's, which has no budget, at
        #: the command's deadline (planner.pipeline.workers.pair_searches.SearchTask.ends)
        self.ends: float | None = None
        #: in a worker, whether the search that handed this pair out has moved on (None: never asks;
        #: planner.pipeline.workers.pair_searches.Ahead.close)
        self.stopped = None
        self.worst_gap = 0.0
        self.boundary = stack.boundary_bytes()
        ends = {layer.name: 0 for layer in stack.before} | {layer.name: 2 for layer in stack.after}
        self.ties = crossing_ties(stack.network, lambda name: ends.get(name, 1))  # embedding first, head last
        self.solves = 0
        self._solvers: dict[tuple[int, int, int, bool], StageSolver] = {}  # (S, m, V, close)
        self._builders: dict[tuple[int, int], object] = {}  # (S, m): one pricing for every V
        #: (S, m, V): the solver of a triple searched with gaps left, for closing them (its bisections)
        self._searched: dict[tuple[int, int, int], StageSolver] = {}
        self.pending: dict[tuple[int, int], int] = {}  # (S, m): its triples not yet searched
        #: the default schedule's interleaving (triples.Interleaving), whose pairs not yet
        #: interleaved bound the plans offered below their 1F1B bound (chosen.offer)
        self.interleaving = None
        self.held: tuple[int, int] | None = None  # the best pair so far: its pricing is kept (hold)
        self.predicted: dict = {}  # the last choice's (solutions, prediction): _choice
        self.ceiling = float("inf")  # a step the caller holds already: pairs bounded at it are not searched
        self.pair_deadline: float | None = None  # budget clock time the pair being searched is left at (FIRST_SHARE)
        self.bounding_s = 0.0  # how long bounding the pairs took (the proof's deadline: Budget.proof_deadline)
        parallel = side_by_side(settings.parallel, compute)
        #: the pairs' bounds computed by workers (planner.pipeline.workers.pair_bounds), None: here, one by one
        self.many = None if parallel is None else bound_side_by_side(
            parallel, stack, batch, p, machine, compute, settings, limit, lambda s, m, v: tuple(self.sends(s, m, v)),
            self.stage_bound, self.holds)

    def solver(self, stages: int, m: int, close: bool = False, chunks: int = 1) -> StageSolver:
        """The stage solver of ``(S, m, V)``: one pricing of its ranks and micro-batch (shared by its
        ``V``), kept for the bound and the search of that triple; ``close``: memory-bound stages have
        their Lagrangian gap closed (planner.pipeline.search, module docstring)."""
        key = (stages, m, chunks, close)
        if key not in self._solvers:
            builder = self._builders.get((stages, m))
            self._solvers[key] = StageSolver(self.p // stages, self.batch // m, m + (stages - 1) / chunks,
                                             self.view(stages), self.compute, self.settings, self.limit, self.exact,
                                             close, self.deadline if close else None, builder,
                                             self._searched.pop((stages, m, chunks), None) if close else None)
            if not close:
                self._builders[(stages, m)] = self._solvers[key].builder
        return self._solvers[key]

    def bound(self, stages: int, m: int, chunks: int = 1,
              above: float | None = None) -> tuple[float, bool | None, float]:
        """No cut of ``(S, m, V)`` is faster than this (planner.pipeline.search, module docstring); False: none fits (None:
        not known, a partial bound against ``above``); and the stages' mean bracket
        (:class:`planner.pipeline.bound.StageBound`);
        ``above``: the step held (:meth:`stage_bound`)."""
        got = self.stage_bound(stages, m, chunks, above)
        return got.step_s, got.fits, got.mean_s

    def stage_bound(self, stages: int, m: int, chunks: int = 1, above: float | None = None, edges: bool = False):
        """``(S, m, V)``'s :class:`planner.pipeline.bound.StageBound`, on its own pricing; once it
        reaches ``above`` (the step held; None: the caller's ceiling, when it gave one) from part of
        a block's layers, that partial bound, the rest not priced (:func:`planner.pipeline.bound.stage_bound`);
        ``edges``: whole, with the reshards inside a block."""
        if above is None and self.ceiling < float("inf") and not edges:
            above = self.ceiling
        sends = tuple(self.sends(stages, m, chunks))
        return stage_bound(self.solver(stages, m, chunks=chunks).builder, self.stack, stages, m, self.limit, sends,
                           chunks, above, self.holds(stages, m, chunks), edges)

    def view(self, stages: int) -> Machine:
        """The machine as each of ``stages`` stages sees it: its collectives on the slowest group of
        every stage (costmodel.comm.spans.pipeline_view)."""
        return pipeline_view(self.machine, self.p, stages)

    def kept(self, stages: int, s: int, m: int) -> int:
        """Micro-batches whose activations stage ``s`` is solved to hold (:func:`kept`)."""
        return kept(stages, s, m, self.schedule)

    def holds(self, stages: int, m: int, chunks: int) -> tuple[int, ...]:
        """Each stage's kept micro-batches as :meth:`_best` solves it (:func:`kept`), for the bound's
        proof that no cut fits; none interleaved (its devices hold chunk by chunk)."""
        return () if chunks > 1 else tuple(kept(stages, s, m, self.schedule) for s in range(stages))

    def command_end(self) -> float | None:
        """The command's deadline as a ``time.perf_counter`` time (the same clock in every process on
        one machine), for a worker's search to stop at; None without one."""
        budget = self.settings.budget
        while getattr(budget, "parent", None) is not None:  # a ZeRO stage's share: the command's own
            budget = budget.parent
        left = None if budget is None else budget.left()
        return None if left is None else time.perf_counter() + left

    def sends(self, stages: int, m: int, chunks: int) -> list[float]:
        """Each stage's (device's) sends per micro-batch (planner.pipeline.sends)."""
        return pair_sends_s(self.machine, self.p, self.batch, self.boundary, stages, m, chunks)

    def p2p_s(self, stages: int, s: int, micro: int) -> float:
        """Stage ``s``'s sends per micro-batch: the activation forward, its gradient back."""
        return stage_sends_s(self.machine, self.p, stages, s, self.boundary, micro)

    def tied(self, stages: int, s: int, net: Network) -> dict | None:
        """The first and the last stage's tied layers (embedding, head with its copy), each with its
        share of the table's gradient sum between the two stages, for the stage solver to weigh."""
        if stages == 1 or s not in (0, stages - 1) or not self.ties:
            return None
        ranks = (0, (stages - 1) * (self.p // stages))
        return {layer.name: (lambda st, layer=layer: tied_table_s(layer, st, self.machine, ranks, self.p // stages))
                for layer in net.layers if layer.name in self.ties}

    def late(self, close: bool) -> bool:
        """A pair being searched should be left: its gaps being closed past the deadline, or the
        budget spent."""
        budget = self.settings.budget
        if budget is not None:
            budget.check()  # a stop request: KeyboardInterrupt (the budget holds the best plan so far)
        if self.ends is not None and time.perf_counter() >= self.ends:
            return True
        if self.stopped is not None and self.stopped():
            return True
        if close:
            return self.deadline is not None and time.perf_counter() >= self.deadline
        return budget is not None and (budget.expired() or (self.pair_deadline is not None
                                                            and budget.clock() >= self.pair_deadline))

    def best(self, stages: int, m: int, close: bool = False, chunks: int = 1,
             below: float | None = None) -> Best | None:
        """The best cut of ``(S, m, V)`` (None: nothing fits); raises :class:`OutOfTime` when it is
        left unfinished (:meth:`late`), also in the middle of pricing one stage's reshards (a stage of
        thousands of ranks can take longer than the whole time limit), and, for a triple,
        :class:`planner.pipeline.interleave.Unplanned` when a device is unresolved or, with ``below``
        (the step to beat), once its devices solved prove it no faster."""
        solver = self.solver(stages, m, close, chunks)
        del self._solvers[(stages, m, chunks, close)]  # searched once: its pricing is not needed again
        solver.builder.stop = lambda: self.late(close)
        try:
            return self._best(solver, stages, m, close, chunks, below)
        except PricingStopped:
            raise OutOfTime from None
        finally:
            solver.builder.stop = None

    def _best(self, solver: StageSolver, stages: int, m: int, close: bool, chunks: int,
              below: float | None = None) -> Best | None:
        n, micro = self.stack.n, self.batch // m
        if not close:
            self._searched_one((stages, m))
        if chunks > 1:
            return self._interleaved(solver, stages, m, chunks, close, below)
        rl, weight = roles(stages), m + stages - 1
        lows: dict[tuple[int, int], float | None] = {}  # each stage solve's lower bound (cut_lower)

        def cost(s: int, k: int) -> tuple[float, float] | None:
            if self.late(close):
                raise OutOfTime
            net = self.stack.stage(k, rl[s])
            sol = solver.solve((k, rl[s]), net, kept(stages, s, m, self.schedule), self.tied(stages, s, net))
            sends = self.p2p_s(stages, s, micro)
            lows[(s, k)] = None if sol is None else sol.lower_s(weight) + weight * sends
            return None if sol is None else (sol.micro_s + sends, sol.once_s + sol.tied_s)

        if stages == 1:
            got, hi = best_cut(n, 1, m, cost, range(n, n + 1)), n
        else:
            got, hi = self._widening(n, stages, m, cost)
        self._count(solver.solves, None if close else solver.worst_gap)
        if not close and solver.open:
            self._searched[(stages, m, chunks)] = solver
        if got is None:
            return None
        lower = got[0]
        if solver.worst_gap > 0:  # a stage kept a gap: the pair's optimum may be lower (cut_lower)
            lower = min(lower, cut_lower(n, stages, m, lambda s, k: lows.get((s, k), 0.0), hi))
        return Best(got[0], stages, m, got[1], solver, lower)

    def taken_elsewhere(self, got: Searched) -> None:
        """A pair a worker searched (planner.pipeline.workers.pair_searches), counted as :meth:`_best`
        counts one searched here: its stage solves and gaps, and its pricing let go."""
        self._searched_one((got.stages, got.micro_batches))
        self._count(got.solves, got.worst_gap)

    def _searched_one(self, pair: tuple[int, int]) -> None:
        """One of ``pair``'s triples searched: its pricing let go once none is left, unless it is
        the pair held (:meth:`hold`)."""
        self.pending[pair] = left = self.pending.get(pair, 1) - 1
        if left <= 0 and pair != self.held:
            self._builders.pop(pair, None)

    def _count(self, solves: int, worst_gap: float | None) -> None:
        """A search's stage solves, and its worst gap left (None: a closing, whose gaps are not the search's)."""
        self.solves += solves
        if worst_gap is not None:
            self.worst_gap = max(self.worst_gap, worst_gap)

    def hold(self, stages: int, m: int) -> None:
        """Keep ``(S, m)``'s pricing (the best pair so far, to be interleaved after), and let the
        previous one's go."""
        if self.held is not None and self.pending.get(self.held, 0) <= 0:
            self._builders.pop(self.held, None)
        self.held = (stages, m)

    def share_pricing(self, pair: tuple[int, int], builder) -> None:
        """Give ``pair``'s other triples its 1F1B search's pricing (planner.pipeline.triples.Interleaving)."""
        self._builders[pair] = builder

    def _interleaved(self, solver: StageSolver, stages: int, m: int, chunks: int, close: bool,
                     below: float | None) -> Best | None:
        def late():
            if self.late(close):
                raise OutOfTime

        try:
            got = interleave.search(solver, self.stack, stages, m, chunks, self.sends(stages, m, chunks),
                                    lambda s, net: self.tied(stages, s, net), late, below)
        finally:
            self._count(solver.solves, None if close else solver.worst_gap)
        if got is None:
            return None
        return Best(got.step_s, stages, m, (self.stack.n // stages,) * stages, solver, got.lower_s, chunks,
                    got.solutions)

    def _widening(self, n: int, stages: int, m: int, cost) -> tuple[tuple[float, tuple[int, ...]] | None, int]:
        """The best cut, first over stage sizes around n / S, then wider while a larger stage could
        still win (planner.pipeline.search, module docstring); and the largest stage size tried through."""
        lo, hi = max(1, n // stages - 1), min(n - stages + 1, -(-n // stages) + 1)
        got = best_cut(n, stages, m, cost, range(lo, hi + 1))
        while hi < n - stages + 1:
            floor = [c for c in (cost(s, hi + 1) for s in range(stages)) if c is not None]
            if got is not None and (not floor or min(m * t + o for t, o in floor) >= got[0]):
                break
            hi += 1
            lo = max(1, n - (stages - 1) * hi) if got is not None else 1
            got = best_cut(n, stages, m, cost, range(lo, hi + 1))
        return got, hi
