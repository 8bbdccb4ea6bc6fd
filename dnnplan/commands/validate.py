"""`dnnplan validate`: plan, run and compare the planner's plan and the uniform baselines.

Ctrl-C keeps the rows of the plans that finished in a partial report (``"complete": false``):
the ``--json`` file, else ``validate-NETWORK-Pr.partial.json`` in the current folder. The same
command then resumes: the plans measured there are not run again (executor.session.validate).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import typer

from costmodel.choices.training import TrainingChoices
from costmodel.machine.loading import usable_cores
from dnnplan.commands.execute import EXIT_CHECK_FAILED, guard_failure
from dnnplan.choice_flags import takes_choices
from dnnplan.options import (BatchOpt, CheckEachOpt, DetailsOpt, ForceOpt, InRunOpt, JsonFileOpt,
                             LocalMachineOpt, ProfileOpt, QuickValidateOpt, refresh_warning, RefreshOpt, RepeatsOpt,
                             ReportDirOpt, StepContextOpt, StepsOpt, ThreadsOpt, TimeoutOpt, ValidateNetworkArg,
                             ValidateRanksOpt, WarmupOpt)
from dnnplan.rerun import command_line
from dnnplan.output import check_output, check_output_folder, is_stdout, tables_to_stderr, write_json_file, named
from dnnplan.render.measured import execute as render, report as report_files
from dnnplan.render.terminal.messages import fail_line, warn
from executor.launch.interrupts import sigint_ignored
from executor.session import validate as validation
from executor.report.job_view import strategy_labels
from executor.session.validate import PlanRun, RunSettings, ValidationInterrupted, ValidationReport, strategy_summary
from networks.errors import DnnplanError
from networks.writing import target_kind
from lifecycle import stops

#: ``--quick``: what it sets unless given on the command line (ranks: 2, or 1 on a one-core computer).
QUICK = {"network": "lenet5", "batch": 8, "steps": 3, "warmup": 1, "repeats": 2}


@takes_choices("batch_norm")
def validate(cli: typer.Context, network: ValidateNetworkArg = None, ranks: ValidateRanksOpt = None,
             batch: BatchOpt = None, machine: LocalMachineOpt = "local", steps: StepsOpt = 5, warmup: WarmupOpt = 2,
             repeats: RepeatsOpt = 1, quick: QuickValidateOpt = False, timeout: TimeoutOpt = 600.0,
             threads: ThreadsOpt = None, profile: ProfileOpt = None, in_run: InRunOpt = True,
             step_context: StepContextOpt = True, refresh: RefreshOpt = False, check: CheckEachOpt = True,
             json_out: JsonFileOpt = None, report_dir: ReportDirOpt = None, details: DetailsOpt = False,
             force: ForceOpt = False, choices: TrainingChoices = TrainingChoices()) -> None:
    """Plan a network, run the plan and the uniform baselines, and report each prediction's error.

    The loop in one command: plan, then run the plan and each uniform baseline that fits (data,
    filter, spatial) with --check, and compare measured with predicted step time, per-layer
    times and peak memory; says whether the planner's plan was measured fastest. Where the
    planner's answer is a baseline re-weighed in its step's context (`planner = data`), the
    solver's own plan runs too, as `solver`. The headline
    prediction is made before the run: from the profile this computer already has, each plan's
    kernels (and collectives) then timed again in its step's order and context before any plan runs (--step-context;
    the prediction from the profile alone is shown beside). Beside it, by default (--in-run), the
    same run also gives the model's error given kernel times re-timed inside it, on machine `local` without --profile: a check of
    the model's structure; the distance between the two is how far the kernels' times drifted
    since the profile. --report DIR writes a Markdown report with figures; --quick is a small
    preset to try it (`dnnplan validate --quick --report out`).

    Ctrl-C keeps the plans that finished (in the --json file, else in
    validate-NETWORK-Pr.partial.json here); the same command then runs only the others.
    """
    given = {"network": network, "ranks": ranks, "batch": batch, "steps": steps, "warmup": warmup, "repeats": repeats}
    network, ranks, batch, steps, warmup, repeats = _preset(cli, given, quick)
    if report_dir:
        report_files.check_report_folder(report_dir, force)
    earlier = _partial(json_out, force) if named("--json", json_out) else None
    if is_stdout(json_out):  # --json /dev/stdout: the JSON alone on stdout, the tables on stderr
        tables_to_stderr(render.console)
    try:
        ctx = validation.resolve(network, ranks, batch, machine, profile, refresh, choices)
    except DnnplanError as err:  # the machine's devices (sized by the MPI job inside one): said in validate's flag
        raise _in_ranks(err, ranks) from None
    if (line := refresh_warning(refresh, ctx.compute)) is not None:
        warn(line)
    settings = RunSettings(steps, warmup, timeout, threads, profile, in_run, check, repeats, step_context)
    keep = json_out or f"validate-{ctx.network.name}-{ranks}r.partial.json"
    if not json_out:
        earlier = _partial(keep, force)
    found = earlier is not None  # a partial report: resumed, or replaced (--force)
    if found:
        earlier = _resumable(earlier, keep, validation.new_report(ctx, machine, settings), force)
    try:
        report = guard_failure(lambda: validation.validate(
            ctx, network, machine, settings, on_run=lambda run: _shown(run, details), earlier=earlier,
            on_reused=lambda row: render.validate_reused(row, keep),
            on_progress=(lambda so_far: _kept(so_far, keep)) if target_kind(keep) is None else None))
    except ValidationInterrupted as err:
        _keep(err, keep, command_line(cli), bool(earlier))
        raise typer.Exit(stops.exit_code()) from None
    if report is None:  # nothing ran here: a rank other than 0 of an MPI job
        return
    data = report.to_json()
    if json_out:  # written before the tables: a Ctrl-C while they print loses no measurement
        with sigint_ignored():
            write_json_file(json_out, data)
    try:
        _report(report, ctx.compute.name, earlier)
    except KeyboardInterrupt:
        if not json_out:  # every plan measured: kept as a partial report the same command shows again
            _keep(ValidationInterrupted(replace(report, complete=False), None), keep, command_line(cli), found)
        else:
            fail_line(f"interrupted by {stops.name()} while the tables printed; the complete report is in {json_out}")
        raise typer.Exit(stops.exit_code()) from None
    if not json_out and os.path.exists(keep):
        os.unlink(keep)  # the report is complete: the partial one is spent
    if report_dir:
        written = report_files.write_report(report_dir, data, command_line(cli))
        render.console.print(f"report written: {written[0]} ({len(written) - 2} figure(s) beside it)")
    if check and report.check_failed:
        fail_line("a plan's distributed step does not match one process (see the check column)")
        raise typer.Exit(EXIT_CHECK_FAILED)


def _preset(cli: typer.Context, given: dict, quick: bool) -> tuple:
    """network, ranks, batch, steps, warmup, repeats: as given, with --quick's preset for what the
    command line left out; a missing network or --ranks without --quick is one clear line."""
    out = dict(given)
    if quick:
        for name, value in {**QUICK, "ranks": min(2, usable_cores())}.items():
            source = cli.get_parameter_source(name) if name in cli.params else None
            if out[name] is None or (source is not None and source.name in ("DEFAULT", "DEFAULT_MAP")):
                out[name] = value
    if out["network"] is None:
        raise DnnplanError("name the network to validate", hint="e.g. `dnnplan validate lenet5 --ranks 2`, or "
                                                                "pass --quick for a small preset")
    if out["ranks"] is None:
        raise DnnplanError("--ranks is required", hint="pass --ranks P (the MPI ranks to run on), or --quick")
    return tuple(out[k] for k in ("network", "ranks", "batch", "steps", "warmup", "repeats"))


def _shown(run: PlanRun, details: bool) -> None:
    """What the command line shows as each plan finishes."""
    for w in run.warnings:
        warn(w)
    render.validate_progress(run.row())
    if details:
        render.comparison_table(run.comparison, f"{run.name}: {strategy_summary(run.plan)}",
                                strategy_labels(run.plan))
        render.step_summary(run.comparison)


def _report(report: ValidationReport, compute: str, earlier: list[dict] | None) -> None:
    render.validate_table(report.plans, f"{report.network}, batch {report.batch}, {report.ranks} rank(s), machine "
                                       f"{report.machine}, compute model {compute}")
    if report.planner_vs_best_measured is not None:
        render.console.print(f"planner's plan measured {report.planner_vs_best_measured * 100:+.1f}% against "
                             f"the fastest measured ({report.fastest['name']})")
    render.validate_summary(report.summary)
    if report.in_run_note:
        render.console.print(f"in-run column empty: {report.in_run_note}")
    unused = len(earlier or []) - sum(1 for r in report.rows if r.get("resumed"))
    if unused > 0:
        warn(f"{unused} plan(s) measured by the interrupted run were not among this run's plans (the plans "
             "changed since) and were dropped")


def _partial(path: str, force: bool) -> dict | None:
    """The partial report in ``path`` (an interrupted validate's), else None once ``path`` passes
    the output checks (its folder exists; an existing file is replaced only with --force)."""
    data = None
    if target_kind(path) is None:  # a device or FIFO (--json /dev/stdout) holds no report to resume
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError, RecursionError):  # not a report (deep nesting, a number past 4,300 digits)
            data = None
    if validation.is_partial(data):
        check_output_folder(path)
        return data
    check_output(path, force)
    return None


def _resumable(earlier: dict, path: str, report: ValidationReport, force: bool) -> list[dict] | None:
    """The rows to resume from a partial report of this run's settings; one of other settings is
    refused (replaced with --force)."""
    differ = validation.conflicts(earlier, report)
    if not differ:
        return validation.earlier_runs(earlier)
    if force:
        return None
    raise DnnplanError(f"{path} holds an interrupted validate of other settings ({'; '.join(differ)})",
                       hint="run with its settings to resume it, or pass --force to start over and replace it")


def _kept(report: ValidationReport, path: str) -> None:
    """The rows so far written as a partial report after each plan: a run killed outright (`kill -9`,
    the machine's own end) keeps what it measured, and the same command resumes from it. Written
    atomically, so a Ctrl-C while it is written leaves the last one whole, and is not held off (an
    ignored Ctrl-C would be lost: the run would go on); the interrupt then writes the rows itself."""
    write_json_file(path, report.to_json())


def _keep(err: ValidationInterrupted, path: str, command: str, resumed: bool) -> None:
    """Write the rows of the plans that finished (atomically, a second Ctrl-C ignored meanwhile)
    and say how to resume. ``resumed``: ``path`` holds an earlier partial report (left as it is
    when this run stopped before it planned)."""
    report = err.report
    if report.rows:
        with sigint_ignored():
            write_json_file(path, report.to_json())
    kept = path if report.rows or resumed else None
    render.validate_interrupted(report.rows, report.planned, kept, err.cache, command, report.repeats)


def _in_ranks(err: DnnplanError, ranks: int) -> DnnplanError:
    """``err``, where it says the devices do not fit the machine, in validate's flag (--ranks, which
    it takes, not --devices); any other error as it is."""
    if "devices do not fit on machine" not in err.bare:
        return err
    return DnnplanError(f"--ranks {ranks}: {err.bare.replace('devices do not fit', 'ranks do not fit', 1)}",
                        hint="run on fewer --ranks, or pick a larger --machine")