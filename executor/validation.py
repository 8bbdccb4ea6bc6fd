"""`dnnplan validate` as a library: plan a network, run the plan and the uniform baselines, and
return how far each prediction was from the clock.

:func:`validate` returns a :class:`ValidationReport` and never prints; the caller is told about
each plan as it finishes through ``on_run`` (the command line draws its tables from that).
Inside an MPI job only rank 0 plans: a plan follows the kernels timed on demand, so ranks
planning alone could choose different plans and then run mismatched collectives.

Ctrl-C (KeyboardInterrupt) raises :class:`ValidationInterrupted`, which carries the report of
the plans that finished (``complete`` false); the kernels timed on demand so far are saved to
the profile cache first. Given the rows of such a report back (``earlier``), :func:`validate`
runs only the plans none of them measured: a row is reused for a plan of the same strategy and
algorithm in every layer, and marked ``resumed``; :func:`conflicts` says whether a partial
report was made with this run's settings.
"""

from __future__ import annotations

import os
import signal
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

from costmodel.compute import OnDemand, default_algorithms
from costmodel.step import predict_step
from costmodel.uniform import uniform_strategies
from executor import launch as launcher
from executor.compare import Comparison, comparison_json
from executor.session import Prepared, agree_node_cores, measure, non_finite_loss_warning, prepare
from executor.worker import JobResult
from networks.errors import DnnplanError
from planner.optimize import Settings, make_plan, plan_from_prediction
from planner.plan import Plan
from planner.plan_file import write_plan
from planner.refreshed import refreshed
from profiler import context
from profiler.context import Context

BASELINES = ("data", "filter", "spatial")
#: What a partial report must share with a run to be resumed by it (keys of its JSON).
SETTINGS = ("network", "ranks", "batch", "machine", "compute_model", "steps", "warmup", "check")


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
                "check": comparison_json(self.name, cmp, self.job.check)["check"], "plan": plan_layers(self.plan)}


@dataclass(frozen=True)
class ValidationReport:
    """Every plan's row (predicted, measured, errors, check) and how the planner's plan fared."""

    network: str
    ranks: int
    batch: int
    machine: str
    compute_model: str
    steps: int = 5
    warmup: int = 2
    check: bool = True
    rows: list[dict] = field(default_factory=list)
    planned: int = 0  # how many distinct plans there were to run (0: not planned yet)
    complete: bool = True  # false: interrupted, ``rows`` holds the plans that finished

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
        out = {"complete": self.complete, "network": self.network, "ranks": self.ranks, "batch": self.batch,
               "machine": self.machine, "compute_model": self.compute_model, "steps": self.steps,
               "warmup": self.warmup, "check": self.check, "planned": self.planned, "plans": self.rows}
        if self.rows and self.planner_vs_best_measured is not None:
            out["planner_vs_best_measured"] = self.planner_vs_best_measured
        return out


class ValidationInterrupted(DnnplanError):
    """Ctrl-C stopped a validate. ``report``: the rows of the plans that finished, rows reused from
    an earlier run included (``complete`` false; ``planned`` 0 when it stopped while planning);
    ``cache``: the profile cache file the kernels timed on demand were saved to (None: none)."""

    def __init__(self, report: ValidationReport, cache: str | None):
        if report.planned:
            what = f"{len(report.rows)} of {report.planned} plans finished"
        else:
            what = "while planning, before any plan ran" + (f"; kernels timed so far saved to {cache}" if cache
                                                             else "")
        super().__init__(f"interrupted: {what}", hint="run the same command again to resume")
        self.report = report
        self.cache = cache


def plan_layers(plan: Plan) -> dict:
    """The plan in a partial report: each layer's strategy and algorithm (what a resumed run matches)."""
    return {"strategies": {lp.name: lp.strategy.label for lp in plan.layers}, "algorithms": plan.algorithms()}


def is_partial(data: object) -> bool:
    """Whether ``data`` (read from a JSON file) is the report of an interrupted validate."""
    return isinstance(data, dict) and data.get("complete") is False and isinstance(data.get("plans"), list)


def conflicts(earlier: dict, report: ValidationReport) -> list[str]:
    """How a partial report (its JSON) differs from this run's settings (``report``, from
    :func:`new_report`): ``"batch 16 there, 8 here"`` for each of :data:`SETTINGS`; empty when it
    can be resumed."""
    mine = report.to_json()
    return [f"{key} {earlier.get(key)} there, {mine[key]} here" for key in SETTINGS if earlier.get(key) != mine[key]]


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
                                   settings=Settings(recompute=False),  # the executor keeps every activation
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


def new_report(ctx: Context, machine_arg: str, settings: RunSettings, planned: int = 0) -> ValidationReport:
    """An empty report of this run's settings."""
    return ValidationReport(ctx.network.name, ctx.devices, ctx.batch, machine_arg, ctx.compute.name,
                            settings.steps, settings.warmup, settings.check, planned=planned)


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C is ignored meanwhile, so that what an interrupted run keeps is written whole
    (a signal handler can be set in the main thread only: elsewhere this changes nothing)."""
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


@contextmanager
def _sigint_here_only() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this process only, not in the helpers it forks meanwhile
    (the companion processes that load the computer while a kernel is timed, profiler.companions,
    which would print a traceback): a terminal's Ctrl-C reaches its whole process group, and the
    helpers are ended by this process (:func:`_save_timed`)."""
    me = os.getpid()

    def handler(signum, frame):
        if os.getpid() == me:
            raise KeyboardInterrupt

    try:
        old = signal.getsignal(signal.SIGINT)
        if old is signal.default_int_handler:
            signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: handlers stay as they are
        old = None
    try:
        yield
    finally:
        if old is signal.default_int_handler:
            signal.signal(signal.SIGINT, old)


def _save_timed(compute: object) -> str | None:
    """Write what ``compute`` timed on demand to its cache file (its path; None: nothing to save)."""
    if not isinstance(compute, OnDemand):
        return None
    with sigint_ignored():
        compute.save()
    return getattr(compute, "path", None)


def _plans(ctx: Context, network_arg: str, machine_arg: str, settings: RunSettings) -> list[tuple[str, Plan]]:
    """The candidate plans; Ctrl-C while planning saves the kernels timed so far and raises
    :class:`ValidationInterrupted` (with no rows)."""
    try:
        if launcher.inside_mpi_job():
            return _planned_on_rank_0(ctx, network_arg, machine_arg)
        with _sigint_here_only():
            return candidate_plans(ctx, network_arg, machine_arg, save=True)
    except KeyboardInterrupt:
        cache = _save_timed(ctx.compute)
        raise ValidationInterrupted(replace(new_report(ctx, machine_arg, settings), complete=False), cache) from None


def _run(name: str, plan: Plan, path: str, ctx: Context, s: RunSettings) -> PlanRun | None:
    """Run one plan and compare it with its prediction (None on ranks other than 0 of an MPI job)."""
    write_plan(plan, path)
    prep = prepare(path, ctx.devices, s.threads, s.profile, s.fresh)
    try:
        job, cmp = measure(prep, steps=s.steps, warmup=s.warmup, check=s.check, trace=False,
                           timeout_s=s.timeout_s, fresh=s.fresh)
    except KeyboardInterrupt:
        _save_timed(prep.compute)  # kernels its prediction timed on demand, if any
        raise
    if job is None:
        return None
    loss = non_finite_loss_warning(job, s.warmup, f"{name}: ")
    return PlanRun(name, plan, prep, job, cmp, prep.warnings + ((loss,) if loss else ()))


def _earlier_row(earlier: list[dict], name: str, plan: Plan) -> dict | None:
    """The row an earlier, interrupted run measured for this plan, renamed and marked ``resumed``."""
    key = plan_layers(plan)
    row = next((r for r in earlier if isinstance(r, dict) and r.get("plan") == key), None)
    return None if row is None else {**row, "name": name, "resumed": True}


def validate(ctx: Context, network_arg: str, machine_arg: str, settings: RunSettings,
             on_run: Callable[[PlanRun], None] | None = None, earlier: list[dict] | None = None,
             on_reused: Callable[[dict], None] | None = None) -> ValidationReport | None:
    """Plan, then run and compare every candidate plan; None on ranks other than 0 of an MPI job.
    ``ctx`` comes from :func:`resolve`. ``earlier``: the rows of an interrupted run of the same
    settings (:func:`conflicts`); a plan measured there is not run again, its row is reused (and
    passed to ``on_reused``). Ctrl-C raises :class:`ValidationInterrupted` with the rows so far."""
    candidates = _plans(ctx, network_arg, machine_arg, settings)
    report = new_report(ctx, machine_arg, settings, planned=len(candidates))
    try:
        with tempfile.TemporaryDirectory(prefix="dnnplan-validate-") as tmp:
            for i, (name, plan) in enumerate(candidates):
                if (row := _earlier_row(earlier or [], name, plan)) is not None:
                    report.rows.append(row)
                    if on_reused is not None:
                        on_reused(row)
                    continue
                run = _run(name, plan, os.path.join(tmp, f"plan{i}.yaml"), ctx, settings)
                if run is None:
                    continue
                report.rows.append(run.row())
                if on_run is not None:
                    on_run(run)
    except KeyboardInterrupt:
        raise ValidationInterrupted(replace(report, complete=False), None) from None
    return report if report.rows else None
