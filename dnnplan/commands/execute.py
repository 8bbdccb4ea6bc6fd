"""`dnnplan execute`: run a plan across MPI ranks and compare it with its prediction."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, TypeVar

import typer

from costmodel.choices.precision import get_precision
from costmodel.step.prediction import model_flops_utilization
from dnnplan.rerun import command_line
from dnnplan.options import (CheckOpt, DeviceOpt, ForceOpt, ForeignProfileOpt, FreshOpt, GraphsOpt, JsonFileOpt,
                             PlanArg, ProfileOpt, RanksOpt, StepContextOpt, StepsOpt, ThreadsOpt, TimeoutOpt,
                             TraceOpt, WarmupOpt)
from dnnplan.output import check_outputs, is_stdout, tables_to_stderr, write_json_file
from dnnplan.render.measured import execute as render
from dnnplan.render.terminal.messages import err_console, fail_line, warn
from executor.report.compare import comparison_json
from executor.launch.mpiexec import RunFailed
from lifecycle import stops
from executor.report.job_view import non_finite_loss_warning, strategy_labels, trace_dict
from executor.session.execute import in_step_context, measure_both, prepare, step_context_entries

T = TypeVar("T")

#: Exit code when the distributed step does not match one process (``--check``).
EXIT_CHECK_FAILED = 3


def guard_failure(fn: Callable[[], T]) -> T:
    """Turn a failed run into one red line and its exit code (2 user, 1 internal, 124 timeout)."""
    try:
        return fn()
    except RunFailed as err:
        fail_line(str(err))
        raise typer.Exit(err.exit_code) from None


def execute(cli: typer.Context, plan: PlanArg, ranks: RanksOpt, steps: StepsOpt = 5, warmup: WarmupOpt = 2,
            check: CheckOpt = False, json_out: JsonFileOpt = None, trace: TraceOpt = None, timeout: TimeoutOpt = 600.0,
            threads: ThreadsOpt = None, profile: ProfileOpt = None, fresh: FreshOpt = False,
            step_context: StepContextOpt = True, force: ForceOpt = False, device: DeviceOpt = "auto",
            foreign_profile: ForeignProfileOpt = False, graphs: GraphsOpt = None) -> None:
    """Run a plan across MPI ranks and compare measured with predicted time per layer and phase.

    Launches `mpiexec -n RANKS` itself, or runs on the ranks of the MPI job it is started in.
    Each rank builds its shard of every layer, runs warm-up and timed training steps, and times
    each layer's forward and backward compute and communication, gradient allreduce and update.
    On machine `local` the prediction is made before the run from the profile, the plan's
    kernels (and, on several ranks, its collectives) first timed again in its step's order and
    context (--step-context). A plan profiled on a GPU (--backend cupy) runs on GPUs, one per
    local rank, with the cuDNN engines its profile recorded, collectives over NCCL (--device).

    LeNet-5 on this computer's 2 cores: dnnplan plan lenet5 -p 2 -b 16 --machine local --out p.yaml,
    then dnnplan execute p.yaml --ranks 2 (--json r.json keeps the comparison; --check compares
    the numerics with one process).
    """
    check_outputs({"--json": json_out, "--trace": trace}, force, reads=(plan,))
    if is_stdout(json_out):  # --json /dev/stdout: the JSON alone on stdout, the tables on stderr
        tables_to_stderr(render.console)
    try:
        prep = replace(prepare(plan, ranks, threads, profile, fresh, device, foreign_profile), graphs=graphs)
        for line in prep.warnings:
            warn(line)
        if step_context:
            prep = in_step_context(prep, step_context_entries(prep))
        job, ahead, in_run = guard_failure(lambda: measure_both(
            prep, steps=steps, warmup=warmup, check=check, trace=trace is not None, timeout_s=timeout, in_run=fresh))
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP (lifecycle.stops): the job's ranks were ended
        fail_line(f"interrupted by {stops.name()}: the run was stopped and every rank ended; an unfinished run "
                  "writes no result, JSON or trace (kernels timed on demand stay in the profile cache)")
        err_console.print(f"run it again with: {command_line(cli)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(stops.exit_code()) from None
    if job is None:  # a rank other than 0 of an MPI job
        return
    cmp = ahead if in_run is None else in_run  # --fresh-profile: the table is the in-run prediction's
    title = (f"{prep.plan.network_name}, batch {prep.plan.batch}, {ranks} rank(s) x {job.threads} thread(s), "
             f"machine {prep.plan.machine}, compute model {prep.compute.name}")
    render.comparison_table(cmp, title, strategy_labels(prep.plan))
    plan_ = prep.plan
    render.step_summary(cmp, lambda step_s: model_flops_utilization(
        prep.net, plan_.batch, step_s, plan_.devices, prep.machine, get_precision(plan_.choices.precision).matmul))
    render.stage_table(cmp)
    if in_run is not None:
        render.ahead_of_time_line(ahead)
    render.profile_alone_line(prep.profile_step_s, ahead.measured.step_s)
    render.memory_line(cmp)
    render.check_line(job.check, plan_.choices.batch_norm)
    if (line := non_finite_loss_warning(job, warmup)) is not None:
        warn(line)
    render.device_line(job.device)
    # how the timed steps ran: on a GPU always said, on the host only when graphs were asked for
    mode = job.steps_mode if job.device or (job.steps_mode or {}).get("reason") else None
    render.steps_mode_line(mode)
    if json_out:
        write_json_file(json_out, {**comparison_json(plan, cmp, job.check),
                                   "profile_predicted_step_s": prep.profile_step_s,
                                   **({"device": job.device} if job.device else {}),
                                   **({"steps_mode": mode} if mode else {})})
    if trace:
        write_json_file(trace, trace_dict(job, steps))
    if job.check is not None and not job.check.passed:
        fail_line(f"the distributed step does not match one process: {job.check.worst_tensor} differs by "
                  f"{job.check.worst_rel_error:.2e} (tolerance {job.check.tolerance:.0e})")
        raise typer.Exit(EXIT_CHECK_FAILED)
