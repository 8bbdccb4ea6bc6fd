"""`dnnplan validate`: plan, run and compare the planner's plan and the uniform baselines."""

from __future__ import annotations

import typer

from dnnplan.commands.execute import EXIT_CHECK_FAILED, guard_failure
from dnnplan.flags import at_least, refresh_warning
from dnnplan.options import (BatchOpt, CheckEachOpt, DetailsOpt, ForceOpt, FreshOpt, JsonFileOpt, LocalMachineOpt,
                             NetworkArg, ProfileOpt, RanksOpt, RefreshOpt, StepsOpt, ThreadsOpt, TimeoutOpt,
                             WarmupOpt)
from dnnplan.output import check_output, write_json_file
from dnnplan.render import execute as render
from dnnplan.render.messages import fail_line, warn
from executor import validation
from executor.session import strategy_labels
from executor.validation import PlanRun, RunSettings, strategy_summary


def validate(network: NetworkArg, ranks: RanksOpt, batch: BatchOpt = None, machine: LocalMachineOpt = "local",
             steps: StepsOpt = 5, warmup: WarmupOpt = 2, timeout: TimeoutOpt = 600.0, threads: ThreadsOpt = None,
             profile: ProfileOpt = None, fresh: FreshOpt = False, refresh: RefreshOpt = False,
             check: CheckEachOpt = True, json_out: JsonFileOpt = None, details: DetailsOpt = False,
             force: ForceOpt = False) -> None:
    """Plan a network, run the plan and the uniform baselines, and report each prediction's error.

    The loop in one command: plan, then run the plan and each uniform baseline that fits (data,
    filter, spatial) with --check, and compare measured with predicted step time and per-layer
    times; says whether the planner's plan was measured fastest.
    """
    at_least("steps", steps)
    check_output(json_out, force)
    ctx = validation.resolve(network, ranks, batch, machine, profile, refresh)
    if (line := refresh_warning(refresh, ctx.compute)) is not None:
        warn(line)

    def shown(run: PlanRun) -> None:
        for w in run.warnings:
            warn(w)
        if details:
            render.comparison_table(run.comparison, f"{run.name}: {strategy_summary(run.plan)}",
                                    strategy_labels(run.plan))
            render.step_summary(run.comparison)

    settings = RunSettings(steps, warmup, timeout, threads, profile, fresh, check)
    report = guard_failure(lambda: validation.validate(ctx, network, machine, settings, on_run=shown))
    if report is None:  # nothing ran here: a rank other than 0 of an MPI job
        return
    render.validate_table(report.rows, f"{ctx.network.name}, batch {ctx.batch}, {ranks} rank(s), machine "
                                       f"{machine}, compute model {ctx.compute.name}")
    if report.planner_vs_best_measured is not None:
        render.console.print(f"planner's plan measured {report.planner_vs_best_measured * 100:+.1f}% against "
                             f"the fastest measured ({report.fastest['name']})")
    if json_out:
        write_json_file(json_out, report.to_json())
    if check and report.check_failed:
        fail_line("a plan's distributed step does not match one process (see the check column)")
        raise typer.Exit(EXIT_CHECK_FAILED)
