"""One pipeline stage's per-layer problem, solved exactly and remembered (pure).

A stage of a uniform stack (:mod:`planner.pipeline.stack`) is ``k`` identical blocks, with the layers before
the first block when it is the first stage and those after the last when it is the last: its
problem depends only on ``(k, role)``, not on which blocks it holds, so each is built and solved
once per (ranks, micro-batch) and reused for every position and every stage cut the search tries.

The stage's objective is ``weight * T + O``: ``T`` its forward and backward of one micro-batch
(kernels, collectives, reshards), ``O`` its once-a-step gradient sync and update, and ``weight =
m + S - 1`` how often a stage's ``T`` counts in a pipelined step when the stages are balanced
(``costmodel.step.pipeline``: ``sum_s T_s + (m - 1) max_s T_s + max_s O_s``). Its memory holds the
activations of the ``kept`` micro-batches its schedule has in flight. The unconstrained optimum does
not depend on ``kept``; it is solved once and reused for every ``kept`` whose memory it fits, and
only a binding limit costs another solve: by Lagrangian relaxation (:mod:`planner.solvers.lagrange`,
fast, with its proven gap recorded), then, with ``close``, the gap closed exactly
(:func:`planner.solvers.fixing.solve_relaxed`: Pareto fronts, else the ILP rounds), or, with
``exact``, by the planner's own exact solve from the start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from costmodel.memory.pipeline import ChunkHold
from costmodel.step.prediction import StepPrediction, predict_step
from costmodel.parallel.strategy import Strategy
from networks.errors import DnnplanError
from networks.ir import Network
from planner.problem.build import Builder, build_with
from planner.pipeline.chunks import solve_held
from planner.problem.solve import PlanMismatch, Settings, solve_exact
from planner.solvers import evaluate
from planner.solvers.fixing import solve_relaxed
from planner.solvers.lagrange import Relaxation, solve_lagrange

CHECK_RTOL = 1e-9


@dataclass(frozen=True)
class StageSolution:
    """A stage's chosen strategies and algorithms at one micro-batch on its ranks."""

    network: Network
    strategies: dict[str, Strategy]
    algorithms: dict[str, str]
    micro_s: float  # T: forward and backward of one micro-batch (no point-to-point sends)
    once_s: float  # O: gradient sync and update
    memory_bytes: float  # its peak with ``kept`` micro-batches' activations
    activation_bytes: float  # the activations of one micro-batch it keeps
    tied_s: float = 0.0  # once a step: the tied table's gradient summed with the other stage holding it
    gap: float = 0.0  # its objective is within this fraction of the stage's optimum (0: optimal)
    layer_activation_bytes: tuple[float, ...] = ()  # each layer's share of ``activation_bytes``

    def held_bytes(self, kept: float | ChunkHold) -> float:
        """Its memory count holding ``kept`` micro-batches' activations, or, interleaved, what a
        :class:`ChunkHold` holds at its busiest moment chunk by chunk."""
        if isinstance(kept, ChunkHold):
            return self.memory_bytes + kept.held(self.layer_activation_bytes) - self.activation_bytes
        return self.memory_bytes + (kept - 1) * self.activation_bytes

    def lower_s(self, weight: float) -> float:
        """No solution of this stage's problem has a smaller objective ``weight * T + O`` (its
        optimum, or the Lagrangian bound when a gap is left)."""
        return (weight * self.micro_s + self.once_s + self.tied_s) * (1 - self.gap)

    def predict(self, micro_batch: int, machine: Machine, compute: ComputeModel, settings: Settings) -> StepPrediction:
        """The cost model's step of this stage at one micro-batch, checked against the solver's
        numbers (a mismatch is a dnnplan bug, :class:`PlanMismatch`)."""
        pred = predict_step(self.network, micro_batch, self.strategies, self.algorithms, machine, compute,
                            settings.choices.sharded_optimizer, overlap=settings.overlap)
        micro = pred.fwd_s + pred.bwd_s + pred.dispatch_s
        once = pred.sync_s + pred.update_s
        for what, got, want in (("per-micro-batch time", micro, self.micro_s), ("once-a-step time", once, self.once_s)):
            if abs(got - want) > CHECK_RTOL * max(abs(want), 1e-30):
                raise PlanMismatch(f"stage {self.network.name}: predicted {what} {got!r} s differs from the "
                                   f"solver's {want!r} s")
        return pred


def stage_builder(ranks: int, micro_batch: int, machine: Machine, compute: ComputeModel,
                  settings: Settings) -> Builder:
    """The pricing of a stage's layers on ``ranks`` at ``micro_batch`` samples under ``settings``' choices."""
    return Builder(micro_batch, ranks, machine, compute, settings.choices.sharded_optimizer,
                   recompute=settings.choices.may_recompute, overlap=settings.overlap, priced=settings.priced)


class StageSolver:
    """Solves the stages of one (ranks, micro-batch, weight) and remembers them."""

    def __init__(self, ranks: int, micro_batch: int, weight: float, machine: Machine, compute: ComputeModel,
                 settings: Settings, memory_limit: float, exact: bool = False, close: bool = False,
                 deadline: float | None = None, builder: Builder | None = None,
                 searched: StageSolver | None = None):
        self.deadline = deadline  # perf_counter time after which no gap is closed (each left open)
        self.ranks, self.micro_batch, self.weight = ranks, micro_batch, weight
        self.settings, self.limit, self.exact, self.close = settings, memory_limit, exact, close
        self.worst_gap = 0.0  # the largest proven gap of a Lagrangian solve (0 when exact)
        # ``builder``: another solver's pricing of the same ranks and micro-batch, shared
        self.builder = builder or stage_builder(ranks, micro_batch, machine, compute, settings)
        self._free: dict[object, StageSolution] = {}
        self._bound: dict[tuple[object, int], StageSolution | None] = {}
        self.solves = 0
        self.relaxed = 0  # solves the Lagrangian bisection left a gap in
        self.open = 0  # of those, the ones left with a gap (always 0 with ``close`` but an ILP time limit)
        self._lam: float | None = None  # the last stage's multiplier: where the next bisection starts
        #: (key, kept) -> the multiplier it started from, the problem built and the bisection's
        #: answer, for each solve whose bisection left a gap (:meth:`_solve`); ``searched``: the
        #: solver that searched this pair before its gaps are closed, whose free solves and
        #: bisections this one takes where it would compute the same (``tests/unit/planner/pipeline/test_pipeline_search.py``)
        self._relaxed: dict[tuple[object, object], tuple] = {}
        self._taken: dict[tuple[object, object], tuple] = {} if searched is None else searched._relaxed
        if searched is not None:
            self._free.update(searched._free)

    def solve(self, key: object, net: Network, kept: float | ChunkHold, extra: dict | None = None) -> StageSolution | None:
        """The best solution of stage ``net`` (``key`` names its (k, role)) holding ``kept``
        micro-batches' activations within the memory limit (a :class:`ChunkHold`: each chunk's in
        flight, :mod:`planner.pipeline.chunks`); None when none fits. ``extra``: layer name ->
        once-a-step seconds under a strategy, weighed with the layer (the tied table's sum between
        two stages; the same for every solve of one ``key``)."""
        free = self.free(key, net, extra)
        if free is not None and free.held_bytes(kept) <= self.limit * (1 + 1e-9):
            return free
        if free is not None and isinstance(kept, ChunkHold):
            return solve_held(self, key, net, kept, extra)
        return self.bound(key, net, kept, extra)

    def free(self, key: object, net: Network, extra: dict | None = None) -> StageSolution | None:
        """The stage's optimum with no memory limit (solved once a ``key``)."""
        if key not in self._free:
            self._free[key] = self._solve(net, 1, None, extra)
        return self._free[key]

    def bound(self, key: object, net: Network, kept: float | tuple[float, ...], extra: dict | None = None):
        """The stage's optimum under the limit, each layer's activations counted ``kept`` times
        (one count, or one a layer); remembered."""
        if (key, kept) not in self._bound:
            self._bound[(key, kept)] = self._solve(net, kept, self.limit, extra, key)
        return self._bound[(key, kept)]

    def _left(self) -> float | None:
        """Seconds a gap may take to close: the ILP time limit, up to the deadline."""
        budget = self.settings.budget
        limits = [x for x in (self.settings.time_limit_s, None if budget is None else budget.left(),
                              None if self.deadline is None else self.deadline - time.perf_counter()) if x is not None]
        return min(limits, default=None)

    def _solve(self, net: Network, kept: float | tuple[float, ...], limit: float | None, extra: dict | None = None,
               key: object = None) -> StageSolution | None:
        self.solves += 1
        # the bisection the search ran on this stage from the same multiplier: the same problem,
        # the same answer (a pure function of them), not computed again
        taken = self._taken.get((key, kept)) if key is not None and limit is not None and not self.exact else None
        if taken is not None and taken[0] != self._lam:
            taken = None
        built = taken[1] if taken is not None else \
            build_with(self.builder, net, limit, weight=self.weight, kept=kept, extra_once=extra)
        if limit is not None and not self.exact:
            budget = self.settings.budget  # at its deadline the bisection ends with what it holds
            if taken is not None:
                got = taken[2]
            else:
                hint = self._lam
                got = solve_lagrange(built.problem, hint=hint, stop=None if budget is None else budget.expired)
                if got is not None and got.status != "optimal" and key is not None and not self.close \
                        and (budget is None or not budget.expired()):  # a bisection the budget did not cut
                    self._relaxed[(key, kept)] = (hint, built, got)
            if got is None:
                return None  # nothing fits
            self._lam = got.lam or self._lam
            if got.status != "optimal":
                self.relaxed += 1
            left = self._left()
            if got.status != "optimal" and self.close and (left is None or left > 0):
                bound = got.objective * (1 - (got.gap or 0.0))
                closed = solve_relaxed(built.problem, Relaxation(got.choice, got.objective, bound, got.lam or 0.0),
                                       left, self.settings.gap, budget=self.settings.budget)
                # the same assignment summed in another order may differ in its last digit
                got = closed if closed.objective <= got.objective * (1 + CHECK_RTOL) else got
            choice, gap = got.choice, (got.gap or 0.0) if got.status != "optimal" else 0.0
            self.worst_gap = max(self.worst_gap, gap)
            self.open += got.status != "optimal"
        else:
            gap = 0.0
            try:
                choice, *_ = solve_exact(built, self.settings)
            except DnnplanError:
                return None  # nothing fits
        objective, memory = evaluate(built.problem, choice)
        once = float(sum(o[c] for o, c in zip(built.once, choice)))
        layer_acts = tuple(float(a[c]) for a, c in zip(built.activations, choice))
        counts = kept if isinstance(kept, tuple) else (kept,) * len(layer_acts)
        strategies = {layer.name: built.candidates[i][c][0] for i, (layer, c) in enumerate(zip(net.layers, choice))}
        tied = float(sum(f(strategies[name]) for name, f in (extra or {}).items()))
        algorithms = {layer.name: built.candidates[i][c][1] for i, (layer, c) in enumerate(zip(net.layers, choice))
                      if built.candidates[i][c][1]}
        return StageSolution(net, strategies, algorithms, (objective - once - tied) / self.weight, once,
                             memory - sum((k - 1) * a for k, a in zip(counts, layer_acts)), sum(layer_acts), tied,
                             gap, layer_acts)

