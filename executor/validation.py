"""`dnnplan validate` as a library: plan a network, run the plan and the uniform baselines, and
return how far each prediction was from the clock.

:func:`validate` returns a :class:`ValidationReport` and never prints; the caller is told about
each plan as it finishes through ``on_run`` (the command line draws its tables from that).
Inside an MPI job only rank 0 plans: a plan follows the kernels timed on demand, so ranks
planning alone could choose different plans and then run mismatched collectives.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from costmodel.compute import OnDemand, default_algorithms
from costmodel.step import predict_step
from costmodel.uniform import uniform_strategies
from executor import launch as launcher
from executor.compare import Comparison, comparison_json
from executor.session import Prepared, agree_node_cores, measure, non_finite_loss_warning, prepare
from executor.worker import JobResult
from networks.errors import DnnplanError
from planner.optimize import make_plan, plan_from_prediction
from planner.plan import Plan
from planner.plan_file import write_plan
from planner.refreshed import refreshed
from profiler import context
from profiler.context import Context

BASELINES = ("data", "filter", "spatial")


@dataclass(frozen=True)
class PlanRun:
    """One candidate plan, run and compared: what ``on_run`` receives."""

    name: str
    plan: Plan
    prepared: Prepared
    job: JobResult
    comparison: Comparison
    warnings: tuple[str, ...]

    def row(self) -> dict:
        cmp = self.comparison
        return {"name": self.name, "strategies": strategy_summary(self.plan), "threads": self.job.threads,
                "predicted_step_s": cmp.predicted_step_s, "measured_step_s": cmp.measured.step_s,
                "measured_step_min_s": cmp.measured.step_min_s, "measured_step_max_s": cmp.measured.step_max_s,
                "step_rel": cmp.step_rel, "layer_median_abs_rel": cmp.layer_median_abs_rel,
                "check": comparison_json(self.name, cmp, self.job.check)["check"]}


@dataclass(frozen=True)
class ValidationReport:
    """Every plan's row (predicted, measured, errors, check) and how the planner's plan fared."""

    network: str
    ranks: int
    batch: int
    machine: str
    compute_model: str
    rows: list[dict] = field(default_factory=list)

    @property
    def fastest(self) -> dict:
        return min(self.rows, key=lambda r: r["measured_step_s"])

    @property
    def planner_vs_best_measured(self) -> float | None:
        """The planner's measured step against the fastest measured plan's, minus 1 (None without it)."""
        mine = [r for r in self.rows if r["name"].split(" = ")[0] == "planner"]
        return mine[0]["measured_step_s"] / self.fastest["measured_step_s"] - 1 if mine else None

    @property
    def check_failed(self) -> bool:
        return any(r["check"] and not r["check"]["passed"] for r in self.rows)

    def to_json(self) -> dict:
        out = {"network": self.network, "ranks": self.ranks, "batch": self.batch, "machine": self.machine,
               "compute_model": self.compute_model, "plans": self.rows}
        if self.planner_vs_best_measured is not None:
            out["planner_vs_best_measured"] = self.planner_vs_best_measured
        return out


def strategy_summary(plan: Plan) -> str:
    """How many layers take each strategy, the commonest first (``N=2 x12, F=2 x3``)."""
    counts: dict[str, int] = {}
    for lp in plan.layers:
        counts[lp.strategy.label] = counts.get(lp.strategy.label, 0) + 1
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def uniform_plan(ctx: Context, network_arg: str, machine_arg: str, strategies: dict, name: str) -> Plan:
    """A plan of the given strategies with the default convolution algorithm, priced by the cost model."""
    algorithms = default_algorithms(ctx.network)
    pred = predict_step(ctx.network, ctx.batch, strategies, algorithms, ctx.machine, ctx.compute)
    table = ctx.compute.table
    return plan_from_prediction(pred, ctx.network, network_arg, machine_arg,
                                None if table is None else table.short_id, solver={"name": name})


def _merged(found: list[tuple[str, Plan]]) -> list[tuple[str, Plan]]:
    """Identical plans once, their names joined (with one rank every strategy is the same plan)."""
    merged: list[tuple[str, Plan]] = []
    for name, plan in found:
        key = (plan.strategies(), plan.algorithms())
        for i, (other, p) in enumerate(merged):
            if (p.strategies(), p.algorithms()) == key:
                merged[i] = (f"{other} = {name}", p)
                break
        else:
            merged.append((name, plan))
    return merged


def _candidates(ctx: Context, network_arg: str, machine_arg: str, save: bool) -> list[tuple[str, Plan]]:
    table = ctx.compute.table
    found = [("planner", make_plan(ctx.network, network_arg, ctx.batch, ctx.devices, ctx.machine, ctx.compute,
                                   machine_ref=machine_arg,
                                   profile_fingerprint=None if table is None else table.short_id,
                                   with_baselines=False))]
    for spec in BASELINES:
        try:
            strategies, _ = uniform_strategies(ctx.network, ctx.devices, ctx.batch, spec)
        except DnnplanError:
            continue
        found.append((spec, uniform_plan(ctx, network_arg, machine_arg, strategies, spec)))
    if save and isinstance(ctx.compute, OnDemand):
        ctx.compute.save()
    return _merged(found)


def candidate_plans(ctx: Context, network_arg: str, machine_arg: str, save: bool = False) -> list[tuple[str, Plan]]:
    """The planner's plan and each uniform baseline that fits, distinct ones only. ``save``: then
    write what was timed on demand (or re-timed, ``--refresh-profile``) to the cache file, which
    the runs' predictions read afresh. With ``--refresh-profile`` every kernel the plans are weighed
    on is timed again first, side by side (planner.refreshed)."""
    return refreshed(ctx.compute, lambda: _candidates(ctx, network_arg, machine_arg, save))


def _planned_on_rank_0(ctx: Context, network_arg: str, machine_arg: str) -> list[tuple[str, Plan]]:
    """Inside an MPI job: rank 0 plans and sends the plans to every rank; its failure is every
    rank's (the others would otherwise wait for the plans forever)."""
    comm = launcher.world()
    candidates: object = None
    if comm.Get_rank() == 0:
        try:
            candidates = candidate_plans(ctx, network_arg, machine_arg, save=True)
        except Exception as err:  # noqa: BLE001 - sent to every rank, raised there
            candidates = err
    candidates = comm.bcast(candidates, root=0)
    if isinstance(candidates, Exception):
        raise candidates
    return candidates


def resolve(network: str, ranks: int, batch: int | None, machine: str, profile: str | None,
            refresh: bool) -> Context:
    """:func:`profiler.context.resolve` for a run on ``ranks`` ranks: inside an MPI job the ranks
    first agree on the node's cores, which size machine `local` (executor.node)."""
    agree_node_cores()
    return context.resolve(network, ranks, batch, machine, profile, refresh)


@dataclass(frozen=True)
class RunSettings:
    """How each plan is run: ``dnnplan execute``'s flags."""

    steps: int = 5
    warmup: int = 2
    timeout_s: float = 600.0
    threads: int | None = None
    profile: str | None = None
    fresh: bool = False
    check: bool = True


def validate(ctx: Context, network_arg: str, machine_arg: str, settings: RunSettings,
             on_run: Callable[[PlanRun], None] | None = None) -> ValidationReport | None:
    """Plan, then run and compare every candidate plan; None on ranks other than 0 of an MPI job.
    ``ctx`` comes from :func:`resolve`."""
    if launcher.inside_mpi_job():
        candidates = _planned_on_rank_0(ctx, network_arg, machine_arg)
    else:
        candidates = candidate_plans(ctx, network_arg, machine_arg, save=True)
    report = ValidationReport(ctx.network.name, ctx.devices, ctx.batch, machine_arg, ctx.compute.name)
    s = settings
    with tempfile.TemporaryDirectory(prefix="dnnplan-validate-") as tmp:
        for i, (name, plan) in enumerate(candidates):
            path = os.path.join(tmp, f"plan{i}.yaml")
            write_plan(plan, path)
            prep = prepare(path, ctx.devices, s.threads, s.profile, s.fresh)
            job, cmp = measure(prep, steps=s.steps, warmup=s.warmup, check=s.check, trace=False,
                               timeout_s=s.timeout_s, fresh=s.fresh)
            if job is None:
                continue
            loss = non_finite_loss_warning(job, s.warmup, f"{name}: ")
            run = PlanRun(name, plan, prep, job, cmp, prep.warnings + ((loss,) if loss else ()))
            report.rows.append(run.row())
            if on_run is not None:
                on_run(run)
    return report if report.rows else None
