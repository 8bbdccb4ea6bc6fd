"""The planner's driver: build the problem, solve it exactly, map the answer back to a
:class:`~planner.plan.plan.Plan`, check it against ``predict_step``, and price the baselines.

Exactness with algorithms: a convolution's algorithm changes only its node cost and workspace, so
the unconstrained optimum uses, for each chosen strategy, that strategy's fastest algorithm. The
solver first runs on that smaller problem (``Built.fastest``); if its optimum fits the memory
limit it is optimal for the full problem under the limit too. Otherwise the limit binds and the
full problem (every algorithm, dominated candidates pruned) goes to the solver with the limit.

Within a bound: ``Settings.budget`` (:mod:`planner.solvers.budget`) ends the search at its deadline
with the best plan in hand and its proven gap (status ``feasible``), and holds the best plan so far
for the command line to finish and show if the search is interrupted. The baselines are priced
before the binding limit's search, so the fastest that fits is the first plan in hand, and not for a
whole batch turned away before it (a step held that its optimum without the limit does not beat,
or a binding limit its caller leaves for later).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from costmodel.choices.batch_norm import batch_norm_of
from costmodel.choices.moe_dispatch import moe_dispatch_of
from costmodel.step.breakdown import comm_parts, step_terms
from costmodel.layer.candidates import algorithms
from costmodel.calls.layer_calls import PASSES
from costmodel.compute.model import ComputeModel
from costmodel.parallel.shard import local_layer
from costmodel.machine.model import Machine
from costmodel.choices.precision import get_precision
from costmodel.choices.training import TrainingChoices
from costmodel.comm.overlap import resolve_overlap
from costmodel.frameworks.as_run import framework_overlap, step_as_run
from costmodel.frameworks.framework import Framework
from costmodel.step.prediction import StepPrediction, model_flops_utilization, predict_step
from costmodel.parallel.strategy import Strategy
from networks import durations
from networks.errors import DnnplanError
from networks.ir import Network
from planner.problem.baselines import PricedBaseline, baselines, fastest_algorithms
from planner.problem.build import Builder, Built, build_problem, build_with
from planner.problem.parallel import Parallel
from planner.problem.priced_layers import PricedLayers
from planner.plan.plan import Baseline, LayerPlan, Plan
from planner.solvers import Assignment, Budget, Ceiling, Stopped, evaluate, expand_choice, min_memory, prune_dominated, solve
from planner.solvers.fixing import Better
from planner.solvers.problem import fits

GIB = 2.0 ** 30
CHECK_RTOL = 1e-9


class PlanMismatch(RuntimeError):
    """The plan's predicted step differs from the solver's objective (a dnnplan bug)."""


class Slower(DnnplanError):
    """No plan of the whole batch beats the caller's ``ceiling`` step: ``lower_s``, a lower bound on
    all its plans (the optimum without the memory limit, or the binding limit's search's bound), is
    at least it."""

    def __init__(self, lower_s: float, ceiling: float):
        super().__init__(f"no plan of the whole batch at once beats the {durations.seconds(ceiling, 6)} step held "
                         f"(none is faster than {durations.seconds(lower_s, 6)})")
        self.lower_s = lower_s


class Binding(DnnplanError):
    """The memory limit binds the whole batch (its optimum without the limit does not fit) and the
    caller asked for the unbound optimum only (``make_plan(..., unbound_only=True)``); ``lower_s``,
    that optimum, a lower bound on every plan under the limit."""

    def __init__(self, lower_s: float):
        super().__init__(f"the memory limit binds (the optimum without it, {durations.seconds(lower_s, 6)}, does not fit)")
        self.lower_s = lower_s


class Infeasible(DnnplanError):
    """No plan fits the memory limit: ``need_bytes`` is the least any plan needs a device."""

    def __init__(self, message: str, need_bytes: float, limit_bytes: float, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.need_bytes, self.limit_bytes = need_bytes, limit_bytes


@dataclass(frozen=True)
class Settings:
    """How to solve: ``method`` auto | reduced | ilp; an ILP time limit (s) and relative gap; and
    what to plan for: the training choices."""

    method: str = "auto"
    time_limit_s: float | None = None
    gap: float | None = None
    #: how to train (costmodel.choices.training): what the plan is priced under and records; its
    #: ``recompute`` says whether layers may recompute (``none``: not weighed), its ``overlap`` the
    #: mode with its bucket as priced
    choices: TrainingChoices = TrainingChoices()
    #: when the search ends and the best plan so far (planner.solvers.budget); None: no bound
    budget: Budget | None = field(default=None, compare=False)
    #: workers for the search's independent pieces (planner.problem.parallel); None: this process
    parallel: Parallel | None = field(default=None, compare=False)
    #: the framework the plan is priced under (``choices.framework`` loaded; None: the cost
    #: model's own step). Its kernels and its host's issue of each layer are in the compute model
    #: (costmodel.frameworks.kernels); here, its overlap efficiencies (:attr:`overlap`) and what a
    #: plan's step becomes on its host timeline, with the memory it adds (:meth:`as_run`)
    framework: Framework | None = field(default=None, compare=False)
    #: what the planning call has priced, shared by its builders (planner.problem.priced_layers); None:
    #: each builder its own
    priced: PricedLayers | None = field(default=None, compare=False)

    def plain(self) -> "Settings":
        """These settings without what never crosses processes (the budget and the workers), as a
        task handed to a worker carries them."""
        return dataclasses.replace(self, budget=None, parallel=None)

    def with_zero(self, stage: int) -> "Settings":
        """These settings planning under ZeRO stage ``stage``."""
        return dataclasses.replace(self, choices=self.choices.but(zero=stage))

    @property
    def overlap(self):
        """The overlap the planner prices: the choices' mode (a spec; "": the machine's default),
        at the framework's efficiencies where it states any."""
        if self.framework is None or not self.framework.overlap or not self.choices.overlap:
            return self.choices.overlap
        return framework_overlap(resolve_overlap(self.choices.overlap, None), self.framework)

    def as_run(self, pred: StepPrediction, net: Network, machine: Machine) -> StepPrediction:
        """A plan's step as its framework runs it: its host timeline and added memory
        (costmodel.frameworks.as_run); ``pred`` itself without a framework."""
        return pred if self.framework is None else step_as_run(pred, net, self.framework, machine)


def solve_exact(built: Built, settings: Settings, better: Better | None = None,
                unbound_only: bool = False, searching: Callable[[], None] | None = None,
                free_optimum: Assignment | None = None) -> tuple[tuple[int, ...], Assignment, list[str], bool]:
    """The optimal candidate index per layer in ``built.problem`` (see the module docstring), the
    assignment, notes, and whether the memory limit binds (the unconstrained optimum does not fit);
    ``better(choice, cost, bound)`` is told each better fitting assignment a binding limit's search
    finds (indices into ``built.problem``); ``unbound_only``: :class:`Binding` where the limit binds;
    ``searching()`` is called once before the binding limit's search starts; ``free_optimum``: the
    unconstrained problem of the fastest candidates already solved by graph reduction (the caller's
    bound: the same problem, the same exact solve), not solved again."""
    notes = []
    full = built.problem
    fast = built.restrict(built.fastest)
    free = fast.with_memory_limit(None)
    if settings.method == "ilp":  # the plain ILP: exact pruning first, no graph reduction
        pruned, kept = prune_dominated(free)
        got = solve(pruned, "ilp", settings.time_limit_s, settings.gap, settings.budget)
        local = expand_choice(kept, got.choice)
    else:
        got = free_optimum if _reusable(free_optimum, settings.method) else solve(
            free, settings.method, settings.time_limit_s, settings.gap)
        local = got.choice
    choice = tuple(int(built.fastest[i][c]) for i, c in enumerate(local))
    _, memory = evaluate(full, choice)
    if full.memory_limit is None or fits(full, memory):
        if full.memory_limit is not None:
            notes.append(f"the unconstrained optimum needs {memory / GIB:.3f} GiB per device, within "
                         f"the {full.memory_limit / GIB:.3f} GiB limit")
        return choice, got, notes, False
    need, _ = min_memory(full)
    if not fits(full, need):
        raise DnnplanError("infeasible")  # replaced by the caller with the full message
    if unbound_only:
        raise Binding(got.objective)
    if searching is not None:
        searching()
    notes.append(f"memory limit binding: the unconstrained optimum needs {memory / GIB:.3f} GiB > "
                 f"{full.memory_limit / GIB:.3f} GiB, so every algorithm was weighed under the limit")
    pruned, kept = prune_dominated(full)
    told = None if better is None else (lambda choice, cost, bound: better(expand_choice(kept, choice), cost, bound))
    got = solve(pruned, "ilp" if settings.method == "ilp" else settings.method, settings.time_limit_s,
                settings.gap, settings.budget, told)
    return expand_choice(kept, got.choice), got, notes, True


def _reusable(free_optimum: Assignment | None, method: str) -> bool:
    """Whether a solve of the unconstrained problem is the one ``solve(problem, method)`` would give
    again: the graph reduction's (``auto`` and ``reduced`` run it on a problem without a limit),
    optimal by the dynamic programme or enumeration after it (exact and deterministic; a remainder
    left to the ILP, whose answer among equal optima depends on its gap and time limit, is solved
    again, as is every problem of another method)."""
    return (method in ("auto", "reduced") and free_optimum is not None and free_optimum.status == "optimal"
            and not free_optimum.ilp)


def algorithm_alternatives(net: Network, strategies: dict[str, Strategy], batch: int,
                           compute: ComputeModel) -> dict[str, tuple[tuple[str, float, int], ...]]:
    """For each convolution, every algorithm that can run it under its strategy: (algorithm,
    forward + backward compute seconds, workspace bytes), the numbers the planner chose by."""
    out = {}
    for layer in net.layers:
        if layer.op != "conv2d":
            continue
        local = local_layer(layer, strategies[layer.name], batch)
        rows = []
        for algo in algorithms(layer):
            secs = sum(compute.pass_s(local, pass_, algo) for pass_ in PASSES)
            rows.append((algo, secs, int(compute.workspace_bytes(local, algo))))
        out[layer.name] = tuple(rows)
    return out


def _infeasible(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                need: float, settings: Settings, suggest: bool = True) -> Infeasible:
    """The infeasible-memory error, saying how much memory and (``suggest``) how many devices would fit."""
    more = None
    q = p * 2
    while suggest and q <= p * 64:
        try:
            machine.check_devices(q)
        except DnnplanError:
            break
        probe = build_problem(net, batch, q, machine, compute, limit, settings.choices.sharded_optimizer, edges=False,
                              recompute=settings.choices.may_recompute)
        if fits(probe.problem, min_memory(probe.problem)[0]):
            more = q
            break
        q *= 2
    devices = f" or {more} devices" if more else ""
    return Infeasible(
        f"no plan of {net.name} at batch {batch} fits {limit / GIB:.3f} GiB per device on {p} devices with the "
        f"whole batch at once; the least such a plan needs is {need / GIB:.3f} GiB per device", need, limit,
        hint=f"allow at least {need / GIB:.3f} GiB per device (--memory){devices}, or a smaller --batch")


@dataclass(frozen=True)
class _Maker:
    """What turns a choice of the built problem (or a baseline) into a :class:`Plan`."""

    net: Network
    network_ref: str
    batch: int
    p: int
    machine: Machine
    compute: ComputeModel
    settings: Settings
    built: Built
    machine_ref: str
    fingerprint: str | None
    #: the baselines' pricing (:func:`planner.problem.baselines.baselines`; None: none)
    pricing: Callable[[], tuple[PricedBaseline, ...]] | None = None

    @cached_property
    def base(self) -> tuple[PricedBaseline, ...]:
        """The baselines, priced when a plan or the binding limit's search first needs them: never
        for a whole batch that the step held or the binding limit turns away (:class:`Slower`,
        :class:`Binding`; GPT-3 175B on 4,096 H100s, three of its four ZeRO stages' whole batches,
        0.4 s each)."""
        return () if self.pricing is None else self.pricing()

    def plan(self, choice: tuple[int, ...], solver: dict) -> Plan:
        """The plan of ``choice`` (its prediction checked against the solver's numbers)."""
        objective, memory = evaluate(self.built.problem, choice)
        cands = self.built.candidates
        strategies = {layer.name: cands[i][c][0] for i, (layer, c) in enumerate(zip(self.net.layers, choice))}
        chosen = {layer.name: cands[i][c][1] for i, (layer, c) in enumerate(zip(self.net.layers, choice))
                  if cands[i][c][1]}
        pred = predict_step(self.net, self.batch, strategies, chosen, self.machine, self.compute,
                            self.settings.choices.sharded_optimizer, overlap=self.settings.overlap)
        check_prediction(pred, objective, memory)
        return self.finished(self.settings.as_run(pred, self.net, self.machine), {**solver, "objective_s": objective},
                             algorithm_alternatives(self.net, strategies, self.batch, self.compute))

    def finished(self, pred: StepPrediction, solver: dict, alternatives: dict | None = None) -> Plan:
        plan = plan_from_prediction(pred, self.net, self.network_ref, self.machine_ref, self.fingerprint,
                                    tuple(b.row() for b in self.base), solver, choices=self.settings.choices,
                                    alternatives=alternatives)
        mfu = model_flops_utilization(self.net, self.batch, pred.step_s, self.p, self.machine,
                                      get_precision(self.settings.choices.precision).matmul)
        return dataclasses.replace(plan, mfu=mfu, memory_parts=pred.memory_parts)

    def stopped(self, choice: tuple[int, ...] | None, baseline: PricedBaseline | None, solver: dict) -> Plan:
        """The best plan in hand when the search was stopped: a choice, or a baseline."""
        if choice is not None:
            return self.plan(choice, solver)
        return self.finished(baseline.prediction, {**solver, "solver": f"baseline: {baseline.name}"})


def make_plan(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
              memory_limit_bytes: float | None = None, settings: Settings = Settings(),
              machine_ref: str | None = None, profile_fingerprint: str | None = None,
              with_baselines: bool = True, suggest: bool = True, ceiling: float | None = None,
              unbound_only: bool = False) -> Plan:
    """The optimal plan of ``net`` at ``batch`` on ``p`` devices of ``machine``.

    ``memory_limit_bytes`` defaults to the device memory. Raises :class:`Infeasible` when no plan
    fits (``suggest``: its hint names the device count that would fit, found by trying them), and
    :class:`PlanMismatch` if the plan's prediction disagrees with the solver (a bug). Under
    ``settings.budget`` the search ends at its deadline with the best plan in hand (module
    docstring). ``ceiling``: a step held from elsewhere (a pipelined plan, another ZeRO stage's):
    :class:`Slower` when the optimum without the memory limit, a lower bound on every plan, is no
    faster, or once the binding limit's search proves a bound that reaches it; ``unbound_only``:
    :class:`Binding` where that optimum does not fit (the limit binds: its search takes longer).
    """
    start = time.perf_counter()
    limit = float(memory_limit_bytes if memory_limit_bytes is not None else machine.device.mem_capacity_bytes)
    builder = Builder(batch, p, machine, compute, settings.choices.sharded_optimizer,
                      recompute=settings.choices.may_recompute,
                      overlap=settings.overlap, priced=settings.priced)
    need, _ = min_memory(build_with(builder, net, limit, edges=False).problem)  # the nodes alone: cheap
    if need > limit * (1 + 1e-9):
        raise _infeasible(net, batch, p, machine, compute, limit, need, settings, suggest)
    built = build_with(builder, net, limit, alone=True)  # one micro-batch: +experts' all-to-alls run alone
    as_run, optimizer, overlap = settings.as_run, settings.choices.sharded_optimizer, settings.overlap

    def pricing() -> tuple[PricedBaseline, ...]:
        return tuple(dataclasses.replace(b, prediction=as_run(b.prediction, net, machine))
                     for b in baselines(net, batch, p, machine, compute, built, optimizer, limit, overlap))

    # under a ceiling the search ends once its bounds reach it (Slower)
    view = Ceiling(settings.budget, ceiling) if ceiling is not None and settings.budget is not None else None
    settings = settings if view is None else dataclasses.replace(settings, budget=view)
    maker = _Maker(net, network_ref, batch, p, machine, compute, settings, built, machine_ref or machine.name,
                   profile_fingerprint, pricing if with_baselines else None)
    built_s = time.perf_counter() - start
    free = None
    if settings.budget is not None or ceiling is not None:
        free = _free_bound(built, settings.budget)
        if ceiling is not None and free is not None and free.objective >= ceiling * (1 - 1e-12):
            raise Slower(free.objective, ceiling)
    try:
        choice, got, notes, binding = solve_exact(built, settings, _offers(maker, settings.budget, limit), unbound_only,
                                                  lambda: _offer_baselines(maker, settings.budget, limit), free)
    except Stopped:
        if view is not None and view.beaten:
            raise Slower(view.lower_s, ceiling) from None
        return _out_of_time(maker, settings.budget, limit)
    except DnnplanError as err:
        need, _ = min_memory(built.problem)
        if fits(built.problem, need):
            raise
        raise _infeasible(net, batch, p, machine, compute, limit, need, settings, suggest) from err
    if view is not None and view.beaten:
        raise Slower(view.lower_s, ceiling)
    solved_s = time.perf_counter() - start - built_s
    solver = {
        "method": settings.method, "solver": got.solver, "status": got.status,
        "gap": got.gap, "time_limit_s": _limit_s(settings), "requested_gap": settings.gap,
        "memory_limit_bytes": limit, "memory_binding": binding,
        "candidates": int(sum(built.problem.sizes)), "layers": built.problem.num_nodes,
        "distinct_layers": built.distinct_layers, "reshard_pairs": built.reshard_pairs,
        "reduced_nodes": got.reduced_nodes, "build_s": round(built_s, 4), "solve_s": round(solved_s, 4),
        "total_s": round(time.perf_counter() - start, 4), "detail": "; ".join([got.detail, *notes]),
    }
    plan = _no_slower_than_baselines(maker, maker.plan(choice, solver))
    _offer_answer(plan, got.status == "optimal", settings.budget)
    return plan


def _offer_answer(plan: Plan, optimal: bool, budget: Budget | None) -> None:
    """Offer the search's answer to ``budget`` (an exact solver that ends at once offers nothing
    before it): a stop that lands while the caller goes on (a later ZeRO stage, the pipelines)
    answers with it, not with a slower plan offered earlier."""
    if budget is None:
        return
    budget.offer(plan.step_s, "the search's plan",
                 lambda: dataclasses.replace(plan, solver={**plan.solver, "status": "interrupted",
                                                           "gap": budget.best.gap}),
                 plan.step_s if optimal else None)


def _limit_s(settings: Settings) -> float | None:
    """The time limit the search ran under: the budget's, else the ILP's."""
    budget = settings.budget
    return budget.stated_s if budget is not None and budget.stated_s is not None else settings.time_limit_s


def _interrupted(budget: Budget, limit: float) -> dict:
    """The solver record of a plan offered to ``budget`` before its search ends (Ctrl-C's answer)."""
    return {"status": "interrupted", "memory_limit_bytes": limit, "time_limit_s": budget.stated_s}


def _offer_baselines(maker: _Maker, budget: Budget | None, limit: float) -> None:
    """Offer the fitting baselines to ``budget`` as the first plans in hand, before the binding
    limit's search (module docstring)."""
    if budget is None:
        return
    stopped = _interrupted(budget, limit)
    for b in maker.base:
        if b.fits:
            budget.offer(b.prediction.step_s, b.name, lambda b=b: maker.stopped(None, b, {**stopped,
                                                                                          "gap": budget.best.gap}))


def _offers(maker: _Maker, budget: Budget | None, limit: float) -> Better | None:
    """The function that offers ``budget`` each better assignment the binding limit's search finds."""
    if budget is None:
        return None
    stopped = _interrupted(budget, limit)

    def better(choice: tuple[int, ...], cost: float, bound: float) -> None:
        if budget.best is not None and cost >= budget.best.step_s:
            budget.bound(bound)
            return
        plan = maker.stopped(choice, None, {**stopped, "solver": "search"})  # now: Ctrl-C then answers at once
        budget.offer(cost, "the search's best plan",
                     lambda: dataclasses.replace(plan, solver={**plan.solver, "gap": budget.best.gap}), bound)

    return better


def _free_bound(built: Built, budget: Budget | None) -> Assignment | None:
    """The optimum without the memory limit (None: the budget stopped it first), its objective told
    to ``budget``: no plan within the limit is faster."""
    try:
        got = solve(built.restrict(built.fastest).with_memory_limit(None), "reduced", budget=budget)
    except Stopped:
        return None
    if got.status != "optimal":
        return None
    if budget is not None:
        budget.bound(got.objective)
    return got


def _out_of_time(maker: _Maker, budget: Budget | None, limit: float) -> Plan:
    """The search was stopped before it found a plan: the fastest fitting baseline, else an error."""
    fitting = sorted((b for b in maker.base if b.fits), key=lambda b: b.prediction.step_s)
    if not fitting:
        raise DnnplanError(f"no plan of {maker.net.name} was found within the time limit of "
                           f"{_limit_s(maker.settings):g} s", hint="raise --time-limit")
    gap = budget.best.gap if budget is not None and budget.best is not None else None
    return maker.stopped(None, fitting[0], {"status": "feasible", "gap": gap, "memory_limit_bytes": limit,
                                            "time_limit_s": _limit_s(maker.settings),
                                            "detail": "the time limit ended the search before it found a plan: "
                                                      "the fastest baseline that fits"})


def _no_slower_than_baselines(maker: _Maker, plan: Plan) -> Plan:
    """The plan, or a fitting baseline that is faster (planner.problem.baselines: one set of numbers)."""
    faster = [b for b in maker.base if b.fits and b.prediction.step_s < plan.step_s * (1 - 1e-9)]
    if not faster:
        return plan
    b = min(faster, key=lambda b: b.prediction.step_s)
    note = (f"{b.name} is faster than the search's plan ({durations.seconds(plan.step_s, 6)}, {plan.solver.get('status')}) "
            "and fits, so it is the plan")
    return maker.finished(b.prediction, {**plan.solver, "solver": f"baseline: {b.name}",
                                         "detail": "; ".join(x for x in (plan.solver.get("detail"), note) if x)})


def check_prediction(pred: StepPrediction, objective: float, memory: float) -> None:
    """Raise :class:`PlanMismatch` unless predict_step agrees with the solver (1e-9 relative)."""
    if abs(pred.step_s - objective) > CHECK_RTOL * max(abs(objective), 1e-30):
        raise PlanMismatch(f"predicted step {pred.step_s!r} s differs from the solver objective {objective!r} s")
    if abs(pred.memory_bound_bytes - memory) > CHECK_RTOL * max(abs(memory), 1.0):
        raise PlanMismatch(f"predicted memory bound {pred.memory_bound_bytes} B differs from the solver's {memory}")


def plan_from_prediction(pred: StepPrediction, net: Network, network_ref: str, machine_ref: str,
                         profile_fingerprint: str | None, baselines_: tuple[Baseline, ...] = (),
                         solver: dict | None = None, choices: TrainingChoices = TrainingChoices(),
                         alternatives: dict[str, tuple[tuple[str, float, int], ...]] | None = None) -> Plan:
    """A :class:`Plan` holding a prediction's per-layer numbers, under ``choices`` as the plan
    records them (the overlap's mode as priced; batch norm and the token dispatcher as the network
    is marked), and the algorithms weighed for each convolution, when given
    (:func:`algorithm_alternatives`)."""
    alternatives = alternatives or {}
    layers = tuple(LayerPlan(
        x.layer.name, x.layer.strategy, x.layer.algorithm, x.layer.fwd_compute_s, x.layer.bwd_compute_s,
        x.layer.fwd_comm_s + x.layer.bwd_comm_s + x.layer.grad_sync_s + x.reshard_s, x.layer.memory.total,
        alternatives.get(x.layer.name, ()))
        for x in pred.layers)
    return Plan(network=network_ref, network_name=net.name, network_hash=net.content_hash(), batch=pred.batch,
                devices=pred.p, machine=machine_ref, layers=layers, step_s=pred.step_s,
                memory_peak_bytes=int(pred.memory_peak_bytes), profile_fingerprint=profile_fingerprint,
                baselines=baselines_, solver=dict(solver or {}),
                choices=choices.as_planned(overlap=pred.overlap, batch_norm=batch_norm_of(net),
                                           moe_dispatch=moe_dispatch_of(net)),
                breakdown=step_terms(pred), comm=comm_parts(pred))


def speedup(plan: Plan, baseline: Baseline) -> float:
    return baseline.step_s / plan.step_s if plan.step_s > 0 else float("nan")


def strategy_mix(plan: Plan) -> dict[str, int]:
    """How many layers use each kind of split (by the set of split dimensions, e.g. 'N+F')."""
    out: dict[str, int] = {}
    for lp in plan.layers:
        kind = "+".join(d for d, _ in lp.strategy.degrees) or "replicated"
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


__all__ = ["Settings", "PlanMismatch", "Infeasible", "make_plan", "baselines", "check_prediction",
           "plan_from_prediction", "speedup", "strategy_mix", "fastest_algorithms"]
