"""The planner's driver: build the problem, solve it exactly, map the answer back to a
:class:`~planner.plan.Plan`, check it against ``predict_step``, and price the baselines.

Exactness with algorithms: a convolution's algorithm changes only its node cost and workspace, so
the unconstrained optimum uses, for each chosen strategy, that strategy's fastest algorithm. The
solver first runs on that smaller problem (``Built.fastest``); if its optimum fits the memory
limit it is optimal for the full problem under the limit too. Otherwise the limit binds and the
full problem (every algorithm, dominated candidates pruned) goes to the solver with the limit.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from costmodel.candidates import algorithms
from costmodel.compute import PASSES, ComputeModel
from costmodel.layer_cost import layer_estimate
from costmodel.layer_layouts import local_layer
from costmodel.machine import Machine
from costmodel.optimizer import Optimizer
from costmodel.precision import DEFAULT_PRECISION, get_precision
from costmodel.step import StepPrediction, model_flops_utilization, predict_step
from costmodel.strategy import Strategy
from costmodel.uniform import NAMED, uniform_strategies
from networks.errors import DnnplanError
from networks.ir import Network
from planner.build import Built, build_problem
from planner.plan import Baseline, LayerPlan, Plan
from planner.solvers import Assignment, evaluate, expand_choice, min_memory, prune_dominated, solve
from planner.solvers.problem import fits

GIB = 2.0 ** 30
CHECK_RTOL = 1e-9


class PlanMismatch(RuntimeError):
    """The plan's predicted step differs from the solver's objective (a dnnplan bug)."""


@dataclass(frozen=True)
class Settings:
    """How to solve: ``method`` auto | reduced | ilp; an ILP time limit (s) and relative gap."""

    method: str = "auto"
    time_limit_s: float | None = None
    gap: float | None = None
    optimizer: str = "momentum"
    precision: str = DEFAULT_PRECISION  # recorded in the plan; the network and compute model carry it
    zero: int = 0  # ZeRO stage (costmodel.optimizer)
    recompute: bool = True  # layers may recompute their internals in backward (costmodel.compute.RECOMPUTE)

    @property
    def training(self) -> Optimizer:
        """The optimiser and its ZeRO stage, as the cost model takes them."""
        return Optimizer(self.optimizer, self.zero)


def solve_exact(built: Built, settings: Settings) -> tuple[tuple[int, ...], Assignment, list[str]]:
    """The optimal candidate index per layer in ``built.problem`` (see the module docstring)."""
    notes = []
    full = built.problem
    fast = built.restrict(built.fastest)
    free = fast.with_memory_limit(None)
    if settings.method == "ilp":  # the plain ILP: exact pruning first, no graph reduction
        pruned, kept = prune_dominated(free)
        got = solve(pruned, "ilp", settings.time_limit_s, settings.gap)
        local = expand_choice(kept, got.choice)
    else:
        got = solve(free, settings.method, settings.time_limit_s, settings.gap)
        local = got.choice
    choice = tuple(int(built.fastest[i][c]) for i, c in enumerate(local))
    _, memory = evaluate(full, choice)
    if full.memory_limit is None or fits(full, memory):
        if full.memory_limit is not None:
            notes.append(f"the unconstrained optimum needs {memory / GIB:.3f} GiB per device, within "
                         f"the {full.memory_limit / GIB:.3f} GiB limit")
        return choice, got, notes
    need, _ = min_memory(full)
    if not fits(full, need):
        raise DnnplanError("infeasible")  # replaced by the caller with the full message
    notes.append(f"memory limit binding: the unconstrained optimum needs {memory / GIB:.3f} GiB > "
                 f"{full.memory_limit / GIB:.3f} GiB, so every algorithm was weighed under the limit")
    pruned, kept = prune_dominated(full)
    got = solve(pruned, "ilp" if settings.method == "ilp" else settings.method, settings.time_limit_s,
                settings.gap)
    return expand_choice(kept, got.choice), got, notes


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


def fastest_algorithms(net: Network, strategies: dict[str, Strategy], batch: int, machine: Machine,
                       compute: ComputeModel, optimizer: Optimizer | str = "momentum") -> dict[str, str]:
    """For each convolution the algorithm with the shortest estimate under its strategy."""
    out = {}
    for layer in net.layers:
        algos = algorithms(layer)
        if layer.op != "conv2d":
            continue
        out[layer.name] = min(algos, key=lambda a: (layer_estimate(layer, strategies[layer.name], batch, machine,
                                                                     compute, a, optimizer).total_s,
                                                    algos.index(a)))
    return out


def baselines(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel,
              built: Built | None = None, optimizer: Optimizer | str = "momentum") -> list[tuple[str, StepPrediction]]:
    """Pure data parallel and the best single uniform strategy, each with its fastest algorithms.

    Uniform specs tried: data, filter, channel, spatial (predicted directly), and every strategy that
    is a candidate of some layer, applied to all layers (a layer that cannot take it runs data
    parallel); those are priced on the built problem's own matrices, then the best is predicted.
    """
    priced: list[tuple[float, str, dict[str, Strategy]]] = []
    for spec in NAMED:
        strategies, _ = uniform_strategies(net, p, batch, spec)
        pred = predict_step(net, batch, strategies, fastest_algorithms(net, strategies, batch, machine, compute,
                                                                       optimizer), machine, compute, optimizer)
        priced.append((pred.step_s, spec, strategies))
    if built is not None:
        lookup = [{built.candidates[i][c][0]: int(c) for c in built.fastest[i]} for i in range(len(net.layers))]
        labels = sorted({s.label for cands in built.candidates for s, _ in cands} - {"replicated", "serial"})
        for label in labels:
            spec = ",".join(part for part in label.split(",") if not part.startswith("R="))
            strategies, _ = uniform_strategies(net, p, batch, spec)
            choice = [lookup[i].get(strategies[layer.name]) for i, layer in enumerate(net.layers)]
            if any(c is None for c in choice):
                continue
            priced.append((evaluate(built.problem, choice)[0], spec, strategies))
    data = next(x for x in priced if x[1] == "data")
    best = data
    for x in priced:  # a strict improvement (rounding ties keep the simpler spec)
        if x[0] < best[0] * (1 - 1e-9):
            best = x
    out = []
    for name, (_, spec, strategies) in (("data parallel", data), (f"best uniform ({best[1]})", best)):
        algos = fastest_algorithms(net, strategies, batch, machine, compute, optimizer)
        out.append((name, predict_step(net, batch, strategies, algos, machine, compute, optimizer)))
    return out


def _infeasible(net: Network, batch: int, p: int, machine: Machine, compute: ComputeModel, limit: float,
                need: float, settings: Settings) -> DnnplanError:
    """The infeasible-memory error, saying how much memory and how many devices would fit."""
    more = None
    q = p * 2
    while q <= p * 64:
        try:
            machine.check_devices(q)
        except DnnplanError:
            break
        probe = build_problem(net, batch, q, machine, compute, limit, settings.training, edges=False,
                              recompute=settings.recompute)
        if fits(probe.problem, min_memory(probe.problem)[0]):
            more = q
            break
        q *= 2
    devices = f" or {more} devices" if more else ""
    return DnnplanError(
        f"no plan of {net.name} at batch {batch} fits {limit / GIB:.3f} GiB per device on {p} devices; "
        f"the least any plan needs is {need / GIB:.3f} GiB per device",
        hint=f"allow at least {need / GIB:.3f} GiB per device (--memory){devices}, or a smaller --batch")


def make_plan(net: Network, network_ref: str, batch: int, p: int, machine: Machine, compute: ComputeModel,
              memory_limit_bytes: float | None = None, settings: Settings = Settings(),
              machine_ref: str | None = None, profile_fingerprint: str | None = None,
              with_baselines: bool = True) -> Plan:
    """The optimal plan of ``net`` at ``batch`` on ``p`` devices of ``machine``.

    ``memory_limit_bytes`` defaults to the device memory. Raises :class:`DnnplanError` when no plan
    fits, and :class:`PlanMismatch` if the plan's prediction disagrees with the solver (a bug).
    """
    start = time.perf_counter()
    limit = float(memory_limit_bytes if memory_limit_bytes is not None else machine.device.mem_capacity_bytes)
    built = build_problem(net, batch, p, machine, compute, limit, settings.training, recompute=settings.recompute)
    built_s = time.perf_counter() - start
    try:
        choice, got, notes = solve_exact(built, settings)
    except DnnplanError as err:
        need, _ = min_memory(built.problem)
        if fits(built.problem, need):
            raise
        raise _infeasible(net, batch, p, machine, compute, limit, need, settings) from err
    solved_s = time.perf_counter() - start - built_s
    objective, memory = evaluate(built.problem, choice)
    strategies = {layer.name: built.candidates[i][c][0] for i, (layer, c) in enumerate(zip(net.layers, choice))}
    chosen = {layer.name: built.candidates[i][c][1] for i, (layer, c) in enumerate(zip(net.layers, choice))
              if built.candidates[i][c][1]}
    pred = predict_step(net, batch, strategies, chosen, machine, compute, settings.training)
    check_prediction(pred, objective, memory)
    base = []
    if with_baselines:
        base = [Baseline(name, b.step_s, b.memory_peak_bytes)
                for name, b in baselines(net, batch, p, machine, compute, built, settings.training)]
    total_s = time.perf_counter() - start
    solver = {
        "method": settings.method, "solver": got.solver, "status": got.status,
        "gap": got.gap, "time_limit_s": settings.time_limit_s, "requested_gap": settings.gap,
        "objective_s": objective, "memory_limit_bytes": limit,
        "candidates": int(sum(built.problem.sizes)), "layers": built.problem.num_nodes,
        "distinct_layers": built.distinct_layers, "reshard_pairs": built.reshard_pairs,
        "reduced_nodes": got.reduced_nodes, "build_s": round(built_s, 4), "solve_s": round(solved_s, 4),
        "total_s": round(total_s, 4), "detail": "; ".join([got.detail, *notes]),
    }
    plan = plan_from_prediction(pred, net, network_ref, machine_ref or machine.name, profile_fingerprint,
                                tuple(base), solver, precision=settings.precision, optimizer=settings.training,
                                alternatives=algorithm_alternatives(net, strategies, batch, compute))
    mfu = model_flops_utilization(net, batch, pred.step_s, p, machine, get_precision(settings.precision).matmul)
    return dataclasses.replace(plan, mfu=mfu, memory_parts=pred.memory_parts)


def check_prediction(pred: StepPrediction, objective: float, memory: float) -> None:
    """Raise :class:`PlanMismatch` unless predict_step agrees with the solver (1e-9 relative)."""
    if abs(pred.step_s - objective) > CHECK_RTOL * max(abs(objective), 1e-30):
        raise PlanMismatch(f"predicted step {pred.step_s!r} s differs from the solver objective {objective!r} s")
    if abs(pred.memory_bound_bytes - memory) > CHECK_RTOL * max(abs(memory), 1.0):
        raise PlanMismatch(f"predicted memory bound {pred.memory_bound_bytes} B differs from the solver's {memory}")


def plan_from_prediction(pred: StepPrediction, net: Network, network_ref: str, machine_ref: str,
                         profile_fingerprint: str | None, baselines_: tuple[Baseline, ...] = (),
                         solver: dict | None = None, batch: int | None = None,
                         precision: str = DEFAULT_PRECISION, optimizer: Optimizer = Optimizer(),
                         alternatives: dict[str, tuple[tuple[str, float, int], ...]] | None = None) -> Plan:
    """A :class:`Plan` holding a prediction's per-layer numbers (and the algorithms weighed for
    each convolution, when given: :func:`algorithm_alternatives`)."""
    alternatives = alternatives or {}
    layers = tuple(LayerPlan(
        x.layer.name, x.layer.strategy, x.layer.algorithm, x.layer.fwd_compute_s, x.layer.bwd_compute_s,
        x.layer.fwd_comm_s + x.layer.bwd_comm_s + x.layer.grad_sync_s + x.reshard_s, x.layer.memory.total,
        alternatives.get(x.layer.name, ()))
        for x in pred.layers)
    return Plan(network=network_ref, network_name=net.name, network_hash=net.content_hash(), batch=pred.batch,
                devices=pred.p, machine=machine_ref, layers=layers, step_s=pred.step_s,
                memory_peak_bytes=int(pred.memory_peak_bytes), profile_fingerprint=profile_fingerprint,
                baselines=baselines_, solver=dict(solver or {}), precision=precision, optimizer=optimizer.name,
                zero=optimizer.zero)


def speedup(plan: Plan, baseline: Baseline) -> float:
    return baseline.step_s / plan.step_s if plan.step_s > 0 else float("nan")


def strategy_mix(plan: Plan) -> dict[str, int]:
    """How many layers use each kind of split (by the set of split dimensions, e.g. 'N+F')."""
    out: dict[str, int] = {}
    for lp in plan.layers:
        kind = "+".join(d for d, _ in lp.strategy.degrees) or "replicated"
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


__all__ = ["Settings", "PlanMismatch", "make_plan", "baselines", "check_prediction", "plan_from_prediction",
           "speedup", "strategy_mix", "fastest_algorithms"]
