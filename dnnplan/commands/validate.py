"""`dnnplan validate`: plan, run and compare the planner's plan and the uniform baselines.

Ctrl-C keeps the rows of the plans that finished in a partial report (``"complete": false``):
the ``--json`` file, else ``validate-NETWORK-Pr.partial.json`` in the current folder. The same
command then resumes: the plans measured there are not run again (executor.validation).
"""

from __future__ import annotations

import json
import os
import shlex

import typer

from dnnplan.commands.execute import EXIT_CHECK_FAILED, guard_failure
from dnnplan.flags import refresh_warning
from dnnplan.options import (BatchOpt, CheckEachOpt, DetailsOpt, ForceOpt, FreshOpt, JsonFileOpt, LocalMachineOpt,
                             NetworkArg, ProfileOpt, RanksOpt, RefreshOpt, StepsOpt, ThreadsOpt, TimeoutOpt,
                             WarmupOpt)
from dnnplan.output import check_output, check_output_folder, write_json_file
from dnnplan.render import execute as render
from dnnplan.render.messages import fail_line, warn
from executor import validation
from executor.session import strategy_labels
from executor.validation import PlanRun, RunSettings, ValidationInterrupted, ValidationReport, strategy_summary
from networks.errors import DnnplanError

#: Exit code of a validate stopped by Ctrl-C (the plans that finished kept), as a shell's for SIGINT.
EXIT_INTERRUPTED = 130


def validate(cli: typer.Context, network: NetworkArg, ranks: RanksOpt, batch: BatchOpt = None,
             machine: LocalMachineOpt = "local", steps: StepsOpt = 5, warmup: WarmupOpt = 2,
             timeout: TimeoutOpt = 600.0, threads: ThreadsOpt = None, profile: ProfileOpt = None,
             fresh: FreshOpt = False, refresh: RefreshOpt = False, check: CheckEachOpt = True,
             json_out: JsonFileOpt = None, details: DetailsOpt = False, force: ForceOpt = False) -> None:
    """Plan a network, run the plan and the uniform baselines, and report each prediction's error.

    The loop in one command: plan, then run the plan and each uniform baseline that fits (data,
    filter, spatial) with --check, and compare measured with predicted step time and per-layer
    times; says whether the planner's plan was measured fastest. Ctrl-C keeps the plans that
    finished (in the --json file, else in validate-NETWORK-Pr.partial.json here); the same
    command then runs only the others.
    """
    earlier = _partial(json_out, force) if json_out else None
    ctx = validation.resolve(network, ranks, batch, machine, profile, refresh)
    if (line := refresh_warning(refresh, ctx.compute)) is not None:
        warn(line)
    settings = RunSettings(steps, warmup, timeout, threads, profile, fresh, check)
    keep = json_out or f"validate-{ctx.network.name}-{ranks}r.partial.json"
    if not json_out:
        earlier = _partial(keep, force)
    found = earlier is not None  # a partial report: resumed, or replaced (--force)
    if found:
        earlier = _resumable(earlier, keep, validation.new_report(ctx, machine, settings), force)
    try:
        report = guard_failure(lambda: validation.validate(
            ctx, network, machine, settings, on_run=lambda run: _shown(run, details), earlier=earlier,
            on_reused=lambda row: render.validate_reused(row, keep)))
    except ValidationInterrupted as err:
        _keep(err, keep, command_line(cli), bool(earlier))
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if report is None:  # nothing ran here: a rank other than 0 of an MPI job
        return
    _report(report, ctx.compute.name, earlier)
    if json_out:
        write_json_file(json_out, report.to_json())
    elif found and os.path.exists(keep):
        os.unlink(keep)  # the report is complete: the partial one is spent
    if check and report.check_failed:
        fail_line("a plan's distributed step does not match one process (see the check column)")
        raise typer.Exit(EXIT_CHECK_FAILED)


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
    render.validate_table(report.rows, f"{report.network}, batch {report.batch}, {report.ranks} rank(s), machine "
                                       f"{report.machine}, compute model {compute}")
    if report.planner_vs_best_measured is not None:
        render.console.print(f"planner's plan measured {report.planner_vs_best_measured * 100:+.1f}% against "
                             f"the fastest measured ({report.fastest['name']})")
    unused = len(earlier or []) - sum(1 for r in report.rows if r.get("resumed"))
    if unused > 0:
        warn(f"{unused} plan(s) measured by the interrupted run were not among this run's plans (the plans "
             "changed since) and were dropped")


def _partial(path: str, force: bool) -> dict | None:
    """The partial report in ``path`` (an interrupted validate's), else None once ``path`` passes
    the output checks (its folder exists; an existing file is replaced only with --force)."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
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
        return earlier["plans"]
    if force:
        return None
    raise DnnplanError(f"{path} holds an interrupted validate of other settings ({'; '.join(differ)})",
                       hint="run with its settings to resume it, or pass --force to start over and replace it")


def _keep(err: ValidationInterrupted, path: str, command: str, resumed: bool) -> None:
    """Write the rows of the plans that finished (atomically, a second Ctrl-C ignored meanwhile)
    and say how to resume. ``resumed``: ``path`` holds an earlier partial report (left as it is
    when this run stopped before it planned)."""
    report = err.report
    if report.rows:
        with validation.sigint_ignored():
            write_json_file(path, report.to_json())
    kept = path if report.rows or resumed else None
    render.validate_interrupted(report.rows, report.planned, kept, err.cache, command)


def command_line(cli: typer.Context) -> str:
    """This command as a shell line: ``dnnplan validate``, its arguments and the options that differ
    from their defaults (run again, it resumes)."""
    words = ["dnnplan", cli.info_name or "validate"]
    for param in cli.command.params:
        value = cli.params.get(param.name)
        if param.param_type_name == "argument":
            words.append(str(value))
        elif value is None or value == param.default:
            continue
        elif getattr(param, "is_flag", False):
            words.append(param.opts[0] if value else (param.secondary_opts or param.opts)[0])
        else:
            words += [param.opts[0], str(value)]
    return shlex.join(words)
