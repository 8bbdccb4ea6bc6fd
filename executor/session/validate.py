"""`dnnplan validate` as a library: plan a network, run the plan and the uniform baselines, and
return how far each prediction was from the clock: the prediction made ahead of time, from the
profile taken before the run (the headline), and beside it, from the same run, the model's error
given kernel times re-timed inside it (executor.report.in_run; ``RunSettings.in_run``).

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

With ``RunSettings.repeats`` above 1 every plan runs that many times in ABBA order; ``rows`` then
holds one row per run (with its ``repeat``) and :attr:`ValidationReport.plans` one per plan
(executor.report.repeats); a resumed run skips the (plan, repeat) pairs already measured. The
:attr:`ValidationReport.summary` is executor.report.summary's, over the plans' rows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable

from costmodel.choices.training import TrainingChoices
from costmodel.compute.model import OnDemand
from executor.launch import mpiexec as launcher
from executor.report.compare import Comparison, comparison_json
from executor.report import in_run
from executor.session import step_choice
from executor.launch.interrupts import save_timed
from executor.report.repeats import plan_rows, run_order
from executor.report.summary import best_plan_loss, is_planner, summarize
from executor.report.job_view import non_finite_loss_warning
from executor.session.execute import (Prepared, agree_node_cores, in_run_unavailable, in_step_context, measure_both,
                                      prepare, step_context_entries)
from executor.session.step_choice import PLANNER, uniform_plans
from executor.launch.worker import JobResult
from networks.errors import DnnplanError
from planner.problem.solve import Settings, make_plan
from planner.plan.plan import Plan
from planner.plan.plan_file import write_plan
from planner.problem.full_profile import refreshed
from profiler import context
from profiler.context import Context
from lifecycle.scratch import scratch_folder

#: What a partial report must share with a run to be resumed by it (keys of its JSON).
SETTINGS = ("network", "ranks", "batch", "machine", "compute_model", "steps", "warmup", "check", "repeats",
            "batch_norm")
#: A setting's value in a partial report written before the setting existed.
SETTING_DEFAULTS = {"repeats": 1, "batch_norm": "sync"}


@dataclass(frozen=True)
class PlanRun:
    """One candidate plan, run and compared: what ``on_run`` receives."""

    name: str
    plan: Plan
    prepared: Prepared
    job: JobResult
    comparison: Comparison
    warnings: tuple[str, ...]
    repeat: int | None = None  # which repeat of the plan this run is (--repeats 2 or more), from 0
    in_run: Comparison | None = None  # the same run against kernels re-timed inside it (executor.report.in_run)

    def row(self) -> dict:
        cmp = self.comparison
        row = {"name": self.name, "strategies": strategy_summary(self.plan), "threads": self.job.threads,
               "predicted_step_s": cmp.predicted_step_s, "measured_step_s": cmp.measured.step_s,
               "measured_step_min_s": cmp.measured.step_min_s, "measured_step_max_s": cmp.measured.step_max_s,
               "step_rel": cmp.step_rel, "layer_median_abs_rel": cmp.layer_median_abs_rel,
               "predicted_peak_bytes": cmp.predicted_peak_bytes, "measured_peak_bytes": cmp.measured.peak_bytes,
               "memory_rel": cmp.memory_rel, **profile_keys(self.prepared, cmp),
               "check": comparison_json(self.name, cmp, self.job.check)["check"], "plan": plan_layers(self.plan),
               **({"device": self.job.device} if getattr(self.job, "device", None) else {}),
               **in_run.row_keys(self.in_run),
               "layers": in_run.with_layers([{"name": e.name, "predicted_s": p.total_s, "measured_s": m.total_s,
                                              "rel": e.total}
                                             for m, p, e in zip(cmp.measured.layers, cmp.predicted, cmp.errors)],
                                            self.in_run)}
        return row if self.repeat is None else {**row, "repeat": self.repeat}


def profile_keys(prep: Prepared, cmp: Comparison) -> dict:
    """A row's prediction from the profile alone, its calls timed in isolation, and its error,
    beside the headline made from the plan's calls timed in step context (both None when the
    headline is the profile's own: no step context)."""
    alone = prep.profile_step_s
    return {"profile_predicted_step_s": alone,
            "profile_step_rel": cmp.measured.step_s / alone - 1 if alone else None}


@dataclass(frozen=True)
class ValidationReport:
    """Every run's row (predicted, measured, errors, memory, check), each plan's row over its
    repeats (:attr:`plans`), the :attr:`summary` and how the planner's plan fared."""

    network: str
    ranks: int
    batch: int
    machine: str
    compute_model: str
    steps: int = 5
    warmup: int = 2
    check: bool = True
    rows: list[dict] = field(default_factory=list)  # one per run, in the order they ran
    planned: int = 0  # how many distinct plans there were to run (0: not planned yet)
    complete: bool = True  # false: interrupted, ``rows`` holds the runs that finished
    repeats: int = 1  # runs of each plan (executor.report.repeats)
    in_run_note: str | None = None  # why the in-run keys are null (None: in-run timing applies; executor.report.in_run)
    batch_norm: str = "sync"  # costmodel.choices.batch_norm: what every plan it ran assumes

    @property
    def plans(self) -> list[dict]:
        """One row per plan, over its repeats (executor.report.repeats.plan_rows, executor.report.in_run.merged)."""
        return [in_run.merged(row, self.rows) for row in plan_rows(self.rows)]

    @property
    def fastest(self) -> dict:
        return min(self.plans, key=lambda r: r["measured_step_s"])

    @property
    def planner_vs_best_measured(self) -> float | None:
        """The planner's measured step against the fastest measured plan's, minus 1 (None without it)."""
        return best_plan_loss(self.plans)

    @property
    def summary(self) -> dict:
        return summarize(self.plans)

    @property
    def check_failed(self) -> bool:
        return any(r["check"] and not r["check"]["passed"] for r in self.rows)

    def to_json(self) -> dict:
        out = {"complete": self.complete, "network": self.network, "ranks": self.ranks, "batch": self.batch,
               "machine": self.machine, "compute_model": self.compute_model, "steps": self.steps,
               "warmup": self.warmup, "check": self.check, "repeats": self.repeats, "planned": self.planned,
               "in_run_note": self.in_run_note, "batch_norm": self.batch_norm, "plans": self.plans}
        if self.repeats > 1:
            out["runs"] = self.rows
        if self.rows:
            out["summary"] = self.summary
            if self.planner_vs_best_measured is not None:
                out["planner_vs_best_measured"] = self.planner_vs_best_measured
        return out


class ValidationInterrupted(DnnplanError):
    """Ctrl-C stopped a validate. ``report``: the rows of the plans that finished, rows reused from
    an earlier run included (``complete`` false; ``planned`` 0 when it stopped while planning);
    ``cache``: the profile cache file the kernels timed on demand were saved to (None: none)."""

    def __init__(self, report: ValidationReport, cache: str | None):
        if report.planned:
            what = (f"{len(report.rows)} of {report.planned} plans finished" if report.repeats == 1 else
                    f"{len(report.rows)} of {report.planned * report.repeats} runs finished")
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
    """Whether ``data`` (read from a JSON file) is the report of an interrupted validate: its plans
    (and runs, where it has them) each a row named as validate names them (a file edited otherwise
    is no report to resume, and is replaced only with --force)."""
    if not (isinstance(data, dict) and data.get("complete") is False and isinstance(data.get("plans"), list)):
        return False
    rows = data["plans"] + (data["runs"] if isinstance(data.get("runs"), list) else [])
    return all(isinstance(row, dict) and isinstance(row.get("name"), str) for row in rows)


def conflicts(earlier: dict, report: ValidationReport) -> list[str]:
    """How a partial report (its JSON) differs from this run's settings (``report``, from
    :func:`new_report`): ``"batch 16 there, 8 here"`` for each of :data:`SETTINGS`; empty when it
    can be resumed."""
    mine = report.to_json()
    theirs = {key: earlier.get(key, SETTING_DEFAULTS.get(key)) for key in SETTINGS}
    return [f"{key} {theirs[key]} there, {mine[key]} here" for key in SETTINGS if theirs[key] != mine[key]]


def earlier_runs(earlier: dict) -> list[dict]:
    """The runs a partial report (its JSON) holds: its ``runs`` with --repeats, else its ``plans``."""
    runs = earlier.get("runs")
    return runs if isinstance(runs, list) else earlier["plans"]


def strategy_summary(plan: Plan) -> str:
    """How many layers take each strategy, the commonest first (``N=2 x12, F=2 x3``)."""
    counts: dict[str, int] = {}
    for lp in plan.layers:
        counts[lp.strategy.label] = counts.get(lp.strategy.label, 0) + 1
    return ", ".join(f"{label} x{n}" for label, n in sorted(counts.items(), key=lambda kv: -kv[1]))


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
    found = [(PLANNER, make_plan(ctx.network, network_arg, ctx.batch, ctx.devices, ctx.machine, ctx.compute,
                                 settings=Settings(choices=ctx.choices.but(recompute="none")),  # the executor
                                 # keeps every activation
                                 machine_ref=machine_arg,
                                 profile_fingerprint=None if table is None else table.short_id,
                                 with_baselines=False))]
    found += uniform_plans(ctx, network_arg, machine_arg)
    if save and isinstance(ctx.compute, OnDemand):
        ctx.compute.save()
    return _merged(found)


def candidate_plans(ctx: Context, network_arg: str, machine_arg: str, save: bool = False) -> list[tuple[str, Plan]]:
    """The planner's plan and each uniform baseline that fits, distinct ones only. ``save``: then
    write what was timed on demand (or re-timed, ``--refresh-profile``) to the cache file, which
    the runs' predictions read afresh. With ``--refresh-profile`` every kernel the plans are weighed
    on is timed again first, side by side (planner.problem.full_profile)."""
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
            refresh: bool, choices: TrainingChoices = TrainingChoices()) -> Context:
    """:func:`profiler.context.resolve` for a run on ``ranks`` ranks under ``choices`` (the executor's:
    fp32, momentum, its batch norm): inside an MPI job the ranks first agree on the node's cores,
    which size machine `local` (executor.launch.node)."""
    agree_node_cores()
    return context.resolve(network, ranks, batch, machine, profile, refresh, choices)


@dataclass(frozen=True)
class RunSettings:
    """How each plan is run: ``dnnplan execute``'s flags."""

    steps: int = 5
    warmup: int = 2
    timeout_s: float = 600.0
    threads: int | None = None
    profile: str | None = None
    in_run: bool = True  # also time the prediction's kernels inside each run (executor.report.in_run)
    check: bool = True
    repeats: int = 1  # runs of each plan, interleaved (executor.report.repeats)
    step_context: bool = True  # predict from each plan's calls timed in its step's context (executor.session.execute)


def new_report(ctx: Context, machine_arg: str, settings: RunSettings, planned: int = 0) -> ValidationReport:
    """An empty report of this run's settings (and why its in-run column stays empty, if it does)."""
    note = in_run.unavailable_note(settings.in_run, in_run_unavailable(ctx.compute, settings.profile, machine_arg))
    return ValidationReport(ctx.network.name, ctx.devices, ctx.batch, machine_arg, ctx.compute.name,
                            settings.steps, settings.warmup, settings.check, planned=planned,
                            repeats=settings.repeats, in_run_note=note, batch_norm=ctx.choices.batch_norm)


def _plans(ctx: Context, network_arg: str, machine_arg: str, settings: RunSettings) -> list[tuple[str, Plan]]:
    """The candidate plans; Ctrl-C while planning saves the kernels timed so far and raises
    :class:`ValidationInterrupted` (with no rows)."""
    try:
        if launcher.inside_mpi_job():
            return _planned_on_rank_0(ctx, network_arg, machine_arg)
        return candidate_plans(ctx, network_arg, machine_arg, save=True)
    except KeyboardInterrupt:
        cache = save_timed(ctx.compute)
        raise ValidationInterrupted(replace(new_report(ctx, machine_arg, settings), complete=False), cache) from None


def _in_context(candidates: list[tuple[str, Plan]], s: RunSettings,
                earlier: list[dict] | None = None) -> list[tuple[str, Plan, dict]]:
    """The candidates, each with its kernel calls timed in its step's context before any run
    (executor.session.step_choice; empty without ``s.step_context`` or where they cannot be timed). When a
    uniform plan is predicted faster there than the solver's plan, it is the planner's plan, as
    `dnnplan plan` chooses it, and the solver's plan stays a candidate of its own ("solver").
    Resuming (``earlier``: an interrupted run's rows), the plan that run ran as the planner's stays
    the planner's: weighings minutes apart can differ by a few percent."""
    if not s.step_context:
        return [(name, plan, {}) for name, plan in candidates]
    timed = step_choice.weighed(candidates, s.threads, s.profile)
    ran = [r.get("plan") for r in earlier or [] if isinstance(r, dict) and is_planner(r)]
    best = next((t for t in timed if ran and plan_layers(t.plan) == ran[0]), None) or step_choice.fastest(timed)
    out = [(t.name, t.plan, t.entries) for t in timed]
    if best is not timed[0]:
        solver = (timed[0].name.replace(PLANNER, "solver", 1),) + out[0][1:]
        out = [(f"{PLANNER} = {best.name}", best.plan, best.entries), solver]
        out += [(t.name, t.plan, t.entries) for t in timed[1:] if t is not best]
    return out


def _run(name: str, plan: Plan, path: str, ctx: Context, s: RunSettings, repeat: int | None,
         timed_in_run: bool, context: dict) -> PlanRun | None:
    """Run one plan and compare it with its prediction made ahead of time and, with
    ``timed_in_run``, with the one from kernels re-timed inside the run (None on ranks other than
    0 of an MPI job). Where the plan was weighed in step context (``context`` not empty), its
    calls are timed in step context again just before this run, as `dnnplan execute` predicts a
    run: the machine's speed drifts over the minutes the other plans' runs take."""
    write_plan(plan, path)
    prep = prepare(path, ctx.devices, s.threads, s.profile)  # why in-run timing cannot apply: said once
    try:
        prep = in_step_context(prep, (step_context_entries(prep) or context) if context else {})
        job, cmp, again = measure_both(prep, steps=s.steps, warmup=s.warmup, check=s.check, trace=False,
                                       timeout_s=s.timeout_s, in_run=timed_in_run)
    except KeyboardInterrupt:
        save_timed(prep.compute)  # kernels its prediction timed on demand, if any
        raise
    if job is None:
        return None
    loss = non_finite_loss_warning(job, s.warmup, f"{name}: ")
    return PlanRun(name, plan, prep, job, cmp, prep.warnings + ((loss,) if loss else ()), repeat, again)


def _earlier_row(earlier: list[dict], name: str, plan: Plan, repeat: int | None) -> dict | None:
    """The row an earlier, interrupted run measured for this plan (and repeat), renamed and
    marked ``resumed``."""
    key = plan_layers(plan)
    row = next((r for r in earlier if isinstance(r, dict) and r.get("plan") == key
                and r.get("repeat") == repeat), None)
    return None if row is None else {**in_run.normalised(row), "name": name, "resumed": True}


def validate(ctx: Context, network_arg: str, machine_arg: str, settings: RunSettings,
             on_run: Callable[[PlanRun], None] | None = None, earlier: list[dict] | None = None,
             on_reused: Callable[[dict], None] | None = None,
             on_progress: Callable[[ValidationReport], None] | None = None) -> ValidationReport | None:
    """Plan, then run and compare every candidate plan; None on ranks other than 0 of an MPI job.
    ``ctx`` comes from :func:`resolve`. ``earlier``: the rows of an interrupted run of the same
    settings (:func:`conflicts`, :func:`earlier_runs`); a plan (repeat) measured there is not run
    again, its row is reused (and passed to ``on_reused``). ``on_progress``: the report so far
    (incomplete) after each plan measured, for the caller to keep (a killed run loses none of them).
    With ``settings.repeats`` above 1 every plan runs that many times, interleaved
    (executor.report.repeats). Ctrl-C raises :class:`ValidationInterrupted` with the rows so far."""
    candidates = _plans(ctx, network_arg, machine_arg, settings)
    report = new_report(ctx, machine_arg, settings, planned=len(candidates))
    try:
        with scratch_folder("validate") as tmp:
            candidates = _in_context(candidates, settings, earlier)
            for repeat, i in run_order(len(candidates), settings.repeats):
                name, plan, context = candidates[i]
                repeat = repeat if settings.repeats > 1 else None
                if (row := _earlier_row(earlier or [], name, plan, repeat)) is not None:
                    report.rows.append(row)
                    if on_reused is not None:
                        on_reused(row)
                    continue
                run = _run(name, plan, os.path.join(tmp, f"plan{i}.yaml"), ctx, settings, repeat,
                           report.in_run_note is None, context)
                if run is None:
                    continue
                report.rows.append(run.row())
                if on_run is not None:
                    on_run(run)
                if on_progress is not None:
                    on_progress(replace(report, complete=False))
    except KeyboardInterrupt:
        raise ValidationInterrupted(replace(report, complete=False), None) from None
    return report if report.rows else None
