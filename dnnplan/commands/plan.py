"""`dnnplan plan`: the main job. Check the flags, resolve the inputs, one library call, one render."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from costmodel.files import DEFAULT_MACHINE
from costmodel.optimizer import Optimizer
from dnnplan.flags import refresh_warning
from dnnplan.options import (BatchOpt, DevicesOpt, ForceOpt, ForeignProfileOpt, GapOpt, JsonOpt, MachineOpt, MemoryOpt, NetworkArg,
                             OptimizerOpt, PlanMicroBatchesOpt, PlanOutOpt, PlanPipelineOpt, PlanProveOpt, PlotOpt,
                             PrecisionOpt, PlanStepContextOpt, ProfileOpt, RecomputeOpt, RefreshOpt, ScheduleOpt,
                             SolverOpt, SweepOpt, TimeLimitOpt, ZeroOpt)
from dnnplan.output import check_outputs
from dnnplan.render import plan as render
from dnnplan.render.messages import warn
from dnnplan.render.plot import plot_sweep
from executor.session import step_choice
from networks.errors import DnnplanError, short
from costmodel.pipeline import INTERLEAVED, SCHEDULES, pipeline_json
from costmodel.precision import get_precision
from costmodel.step import model_flops_utilization
from planner.optimize import Settings, make_plan
from planner.pipeline_search import PROVE_S, search_pipeline
from planner.plan_file import plan_to_dict, write_plan
from planner.plan_pipeline import plan_of_choice
from planner.refreshed import refreshed
from planner.sweep import parse_counts
from planner.sweep import sweep as run_sweep
from profiler import context
from profiler.context import Context

GIB = 2 ** 30


def profile_fingerprint(path: str | None) -> str | None:
    """A short content hash of the profile table a plan was made with."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as err:
        raise DnnplanError(f"cannot read the profile table: {err}", file=path) from None


def check_flags(solver: str, sweep: str | None, plot: str | None) -> None:
    """What the flags' own ranges (dnnplan.options) cannot say: the solver's name, --plot without --sweep."""
    if solver not in ("auto", "reduced", "ilp"):
        raise DnnplanError(f"unknown --solver {short(solver)}", hint="use auto, reduced or ilp")
    if plot and not sweep:
        raise DnnplanError("--plot draws a sweep", hint="add --sweep 1,2,4,...")


def plan(network: NetworkArg, devices: DevicesOpt = 1, batch: BatchOpt = None, machine: MachineOpt = None,
         profile: ProfileOpt = None, memory: MemoryOpt = None, out: PlanOutOpt = None, solver: SolverOpt = "auto",
         time_limit: TimeLimitOpt = None, gap: GapOpt = None, sweep: SweepOpt = None, plot: PlotOpt = None,
         refresh: RefreshOpt = False, precision: PrecisionOpt = "fp32", optimizer: OptimizerOpt = "momentum",
         zero: ZeroOpt = 0, recompute: RecomputeOpt = True, pipeline: PlanPipelineOpt = None,
         micro_batches: PlanMicroBatchesOpt = None, schedule: ScheduleOpt = "1f1b", prove: PlanProveOpt = PROVE_S,
         as_json: JsonOpt = False, step_context: PlanStepContextOpt = True, force: ForceOpt = False,
         foreign_profile: ForeignProfileOpt = False) -> None:
    """Choose how to split every layer across the devices so the predicted training step is shortest.

    For each layer the planner weighs every split of its dimensions (sample N, spatial H/W, channels
    C, filters F, replication R) and every convolution algorithm, with per-device memory as a
    constraint, and solves exactly (graph reduction and dynamic programming, an ILP for what
    remains). It prints the plan beside pure data parallelism and the best uniform strategy
    (docs/planner.md).

    With --pipeline auto a transformer is also cut into pipeline stages: the degree, the
    micro-batches and the stage cut are searched, each stage solved as above. GPT-3 175B on 1024
    A100s: dnnplan plan gpt3-175b -p 1024 -b 1536 --machine dgx-a100 --precision fp16 --optimizer adam
    --pipeline auto

    A pipelined plan written with --out runs with `dnnplan execute` (GPipe or 1F1B, --schedule).

    On machine `local` the plan is then checked against the uniform plans with every plan's
    kernels (and collectives) timed again in its step's order and context (a few seconds a plan; --no-step-context
    leaves it out): a uniform plan predicted faster there is the plan.
    """
    check_flags(solver, sweep, plot)
    check_outputs({"--out": out, "--plot": plot}, force)
    ctx = context.resolve(network, devices, batch, machine, profile, refresh, precision, foreign_profile)
    opt = Optimizer(optimizer, zero)
    settings = Settings(solver, time_limit, gap, optimizer=opt.name, precision=ctx.precision, zero=opt.zero,
                        recompute=recompute)
    if (line := refresh_warning(refresh, ctx.compute)) is not None:
        warn(line)
    limit = None if memory is None else memory * GIB
    if pipeline is not None or micro_batches is not None:
        if sweep:
            raise DnnplanError("--pipeline plans cannot be swept yet", hint="drop --sweep, or plan without --pipeline")
        if schedule not in SCHEDULES:
            raise DnnplanError(f"the planner does not search the {short(schedule)} schedule" if schedule == INTERLEAVED
                               else f"unknown --schedule {short(schedule)}",
                               hint="use 1f1b or gpipe" + (" (`dnnplan predict --schedule interleaved --chunks V` "
                                                           "prices interleaving)" if schedule == INTERLEAVED else ""))
        return plan_pipeline(ctx, network, pipeline, micro_batches, limit, settings, out, schedule, as_json,
                             prove_s=prove, machine_ref=machine or DEFAULT_MACHINE, fingerprint=profile_fingerprint(profile))
    if sweep:
        return plan_sweep(ctx, network, sweep, plot, limit, settings, as_json)
    result = refreshed(ctx.compute, lambda: make_plan(ctx.network, network, ctx.batch, devices, ctx.machine,
                                                      ctx.compute, limit, settings,
                                                      machine_ref=machine or DEFAULT_MACHINE,
                                                      profile_fingerprint=profile_fingerprint(profile)))
    timed = []
    if step_context:  # machine `local`: checked in its step's context against the uniform plans
        result, timed = step_choice.checked(result, ctx, network, machine or DEFAULT_MACHINE)
    _show(result, timed, out, as_json)


def _show(result, timed: list, out: str | None, as_json: bool) -> None:
    """Write the plan (``--out``) and print it, with the candidates weighed in step context."""
    if out:
        write_plan(result, out)
    if as_json:
        print(json.dumps({**plan_to_dict(result), "step_context": render.step_context_dict(timed)}))
    else:
        render.plan_table(result)
        render.step_context_line(timed)
        if out:
            render.console.print(f"wrote {out} (evaluate it, or an edited copy, with `dnnplan predict {out}`)")


def plan_sweep(ctx: Context, network: str, counts: str, plot: str | None, limit: float | None,
               settings: Settings, as_json: bool) -> None:
    """`dnnplan plan --sweep`: the plan and data parallelism over several device counts."""
    device_counts = parse_counts(counts)
    rows = refreshed(ctx.compute, lambda: run_sweep(ctx.network, network, ctx.batch, device_counts, ctx.machine,
                                                    ctx.compute, limit, settings))
    if plot:
        plot_sweep(rows, plot, f"{ctx.network.name}, batch {ctx.batch}, {ctx.machine.name}")
    if as_json:
        print(json.dumps({"network": ctx.network.name, "batch": ctx.batch, "machine": ctx.machine.name,
                          "rows": rows}))
    else:
        render.sweep_table(rows, ctx.network.name, ctx.batch, ctx.machine.name)
        if plot:
            render.console.print(f"wrote {plot}")


def plan_pipeline(ctx: Context, network: str, pipeline: str | None, micro_batches: int | None,
                  limit: float | None, settings: Settings, out: str | None, schedule: str, as_json: bool, *,
                  prove_s: float = PROVE_S, machine_ref: str, fingerprint: str | None) -> None:
    """`dnnplan plan --pipeline auto|S [--micro-batches M] [--out PLAN]`: the pipeline search
    (planner.pipeline_search), written as a pipelined plan with --out."""
    stages = None
    if pipeline not in (None, "auto"):
        if not str(pipeline).isdigit() or int(pipeline) < 1:
            raise DnnplanError(f"--pipeline takes 'auto' or a number of stages, not {short(str(pipeline))}",
                               hint="e.g. --pipeline auto or --pipeline 8")
        stages = (int(pipeline),)
    micro = (micro_batches,) if micro_batches else None
    with render.search_progress("pipeline search", disable=as_json) as tick:
        got = refreshed(ctx.compute, lambda: search_pipeline(
            ctx.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute, limit, settings, stages, micro,
            progress=tick, schedule=schedule, prove_s=prove_s))
    mfu = model_flops_utilization(ctx.network, ctx.batch, got.prediction.step_s, ctx.devices, ctx.machine,
                                  get_precision(settings.precision).matmul)
    if out:
        write_plan(plan_of_choice(got, network, machine_ref, fingerprint, settings.training, ctx.precision, mfu), out)
    if as_json:
        print(json.dumps({**pipeline_json(got.prediction), "cut_blocks": list(got.cut), "mfu": mfu,
                          "micro_batch": got.micro_batch, "search": got.stats,
                          "tried": [_finite(c.__dict__) for c in got.candidates]}))
        return
    render.pipeline_choice(got, mfu)
    if out:
        render.console.print(f"wrote {out} (run it with `dnnplan execute {out} --ranks {ctx.devices}`)")


def _finite(row: dict) -> dict:
    """A candidate's fields for JSON: an infinite bound (nothing fits) as null, so the output
    stays strict JSON."""
    return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in row.items()}
