"""`dnnplan plan`: the main job. Check the flags, resolve the inputs, one library call, one render."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

import typer
from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click

from costmodel.calls.algorithms import attention_default, kernel_algorithm
from costmodel.machine.loading import DEFAULT_MACHINE
from costmodel.choices.optimizer import Optimizer
from costmodel.comm.overlap import overlap_with_bucket, resolve_overlap
from costmodel.step.pipeline import INTERLEAVED, SCHEDULES, pipeline_json
from costmodel.choices.precision import get_precision
from costmodel.step.prediction import model_flops_utilization
from dnnplan.options import (BatchNormOpt, BatchOpt, BucketOpt, DevicesOpt, ForceOpt, ForeignProfileOpt, GapOpt,
                             JsonOpt, LayersOpt, MachineOpt, MemoryOpt, MoeDispatchOpt, NetworkArg, OptimizerOpt,
                             OverlapOpt, PlanMicroBatchesOpt, PlanOutOpt, PlanPipelineOpt, PlanProveOpt,
                             PlanStepContextOpt, PlotOpt, PrecisionOpt, ProfileOpt, RecomputeOpt, refresh_warning,
                             RefreshOpt, ScheduleOpt, SeqOpt, SolverOpt, SweepOpt, TimeLimitOpt, ZeroOpt)
from dnnplan.output import check_outputs
from dnnplan.render import plan as render
from dnnplan.render.messages import fail_line, warn
from dnnplan.render.plot import plot_sweep
from dnnplan.render.progress import progress_line
from dnnplan.search_bound import end, search_budget, stop_on_ctrl_c
from executor.session import step_choice
from networks.errors import DnnplanError, short
from planner.first_plan import Answer, first_plan, refit_choice
from planner.fit_check import fitting
from planner.plan.layout_by_axis import axes, axes_line
from planner.problem.solve import Settings, make_plan
from planner.pipeline.triples import AUTO, DEFAULT
from planner.pipeline.search import PROVE_S, PipelineChoice, search_pipeline
from planner.plan.plan import Plan
from planner.plan.plan_file import plan_to_dict, write_plan
from planner.pipeline.to_plan import plan_of_choice
from planner.problem.full_profile import refreshed
from planner.sweep import parse_counts, sweep as run_sweep, with_speedups
from profiler import context
from lifecycle import stops
from profiler.context import Context

GIB = 2 ** 30


def profile_fingerprint(ctx: Context) -> str | None:
    """The identity of the profile table a plan was made with (its device, threads and backend:
    ``ProfileTable.short_id``), as `execute`, `predict` and `validate` record and compare it;
    None when a datasheet prices the plan."""
    table = getattr(ctx.compute, "table", None)
    return None if table is None else table.short_id


def check_flags(solver: str, sweep: str | None, plot: str | None, pipelined_sweep: bool = False) -> None:
    """What the flags' own ranges (dnnplan.options) cannot say: the solver's name, --plot without --sweep,
    a sweep of pipelined plans."""
    if solver not in ("auto", "reduced", "ilp"):
        raise DnnplanError(f"unknown --solver {short(solver)}", hint="use auto, reduced or ilp")
    if plot and not sweep:
        raise DnnplanError("--plot draws a sweep", hint="add --sweep 1,2,4,...")
    if pipelined_sweep:
        raise DnnplanError("--pipeline plans cannot be swept yet", hint="drop --sweep, or plan without --pipeline")


def plan(click: typer.Context, network: NetworkArg, devices: DevicesOpt = 1, batch: BatchOpt = None,
         machine: MachineOpt = None, profile: ProfileOpt = None, memory: MemoryOpt = None, out: PlanOutOpt = None,
         solver: SolverOpt = "auto", time_limit: TimeLimitOpt = None, gap: GapOpt = None, sweep: SweepOpt = None,
         plot: PlotOpt = None, refresh: RefreshOpt = False, precision: PrecisionOpt = "fp32",
         optimizer: OptimizerOpt = "momentum", zero: ZeroOpt = 0, recompute: RecomputeOpt = True,
         pipeline: PlanPipelineOpt = None, micro_batches: PlanMicroBatchesOpt = None, schedule: ScheduleOpt = "1f1b",
         prove: PlanProveOpt = PROVE_S, as_json: JsonOpt = False, step_context: PlanStepContextOpt = True,
         layers: LayersOpt = False, force: ForceOpt = False, foreign_profile: ForeignProfileOpt = False,
         seq: SeqOpt = None, batch_norm: BatchNormOpt = None, overlap: OverlapOpt = "", bucket_mb: BucketOpt = None,
         moe_dispatch: MoeDispatchOpt = None) -> None:
    """Choose how to split every layer across the devices so the predicted training step is shortest.

    For each layer the planner weighs every split of its dimensions (samples N: data; experts E;
    sequence H: context, or spatial H/W; channels C and filters F: tensor; replication R), every
    convolution and attention algorithm and recomputation, with per-device memory as a constraint,
    and solves exactly (graph reduction and dynamic programming, an ILP for what remains). It prints
    a summary first (the step, memory, MFU, the layout by axis, the gap proven to the optimum) and
    the plan beside pure data parallelism and the best uniform strategy; --layers adds the
    per-layer tables (docs/planner.md).

    The answer comes within --time-limit seconds (default 20): a longer search stops with the best
    plan it holds and says how far from the optimum it can still be; a progress line on stderr
    shows the best plan so far, and Ctrl-C prints it and exits 130.

    A transformer that fits no plan without pipelining gets the pipeline search: stages, micro-batches
    (gradient accumulation on one stage), the stage cut and interleaving, each stage solved as above
    (--pipeline auto asks for it; --pipeline off refuses it). GPT-3 175B on 1024 A100s:
    dnnplan plan gpt3-175b -p 1024 -b 1536 --precision bf16

    Default batch: 32 samples a device; a language model about 4M tokens, at most 16 sequences a device.
    On machine `local` the plan is checked against the uniform plans in its step's context.
    """
    check_flags(solver, sweep, plot, bool(sweep) and (pipeline not in (None, "off") or micro_batches is not None))
    check_outputs({"--out": out, "--plot": plot}, force)
    budget = search_budget(time_limit)
    with stop_on_ctrl_c(budget), progress_line(budget):
        try:
            ctx = context.resolve(network, devices, batch, machine, profile, refresh, precision, foreign_profile, seq,
                                  batch_norm, moe_dispatch)
            if (line := refresh_warning(refresh, ctx.compute)) is not None:
                warn(line)
            run = Run(ctx, network, machine or DEFAULT_MACHINE, profile_fingerprint(ctx),
                      _settings(ctx, solver, gap, Optimizer(optimizer, zero), recompute, budget, overlap, bucket_mb),
                      None if memory is None else memory * GIB, _defaults(click, ctx))
            if sweep:
                return plan_sweep(ctx, network, sweep, plot, run.limit, run.settings, as_json)
            answer = _answer(run, pipeline, micro_batches, schedule, prove, click, step_context)
            budget.settled = True
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.stops): the best plan so far
            budget.request_stop()
            if budget.best is None:
                fail_line(f"interrupted by {stops.name()} after {budget.elapsed():.1f} s, before any plan was found")
                end(stops.exit_code())
            answer = budget.best.finish()
    show(run, answer, out, as_json, layers)
    if budget.stop_requested:
        fail_line(f"interrupted by {stops.name()} after {budget.elapsed():.1f} s: the best plan found so far is shown")
        end(stops.exit_code())
    end(0)


@dataclass(frozen=True)
class Run:
    """What one `dnnplan plan` works on, as resolved."""

    ctx: Context
    network: str
    machine_ref: str
    fingerprint: str | None
    settings: Settings
    limit: float | None
    defaults: tuple[str, ...]


def _defaults(click: typer.Context, ctx: Context) -> tuple[str, ...]:
    """What the command assumed because the flag was not given (said in the summary)."""
    out = []
    for name, flag, value in (("machine", "--machine", ctx.machine.name), ("precision", "--precision", ctx.precision),
                              ("optimizer", "--optimizer", None), ("batch", "--batch", ctx.batch_rule)):
        if click.get_parameter_source(name) == ParameterSource.DEFAULT:
            out.append(f"{flag} {value or click.params.get(name)}" if name != "batch" else f"--batch {ctx.batch} "
                       f"({value})")
    return tuple(out)


def _answer(run: Run, pipeline: str | None, micro_batches: int | None, schedule: str, prove: float,
            click: typer.Context, step_context: bool):
    """The plan (planner.first_plan) or the pipeline search's choice (with --pipeline / --micro-batches)."""
    ctx, settings = run.ctx, run.settings
    if schedule not in SCHEDULES + (INTERLEAVED, AUTO):
        raise DnnplanError(f"unknown --schedule {short(schedule)}", hint="use 1f1b, gpipe, interleaved or auto")
    if click.get_parameter_source("schedule") == ParameterSource.DEFAULT:
        schedule = DEFAULT  # every pair under 1F1B, then the best pair interleaved too
    limit = run.limit if run.limit is not None else ctx.machine.device.mem_capacity_bytes
    if pipeline not in (None, "off") or micro_batches is not None:
        choice, note = fitting(lambda under: _pipelined(run, pipeline, micro_batches, schedule, prove, under),
                               lambda c: c.prediction.memory_peak_bytes, limit,
                               lambda c, under: refit_choice(c, ctx.network, ctx.batch, ctx.devices, ctx.machine,
                                                             ctx.compute, under, settings, schedule))
        return Answer(settings, pipeline=choice, memory_note=note)
    if pipeline == "off":
        result, note = fitting(lambda under: refreshed(
            ctx.compute, lambda: make_plan(ctx.network, run.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute,
                                           under, settings, machine_ref=run.machine_ref,
                                           profile_fingerprint=run.fingerprint),
            settings.budget.forget), lambda r: r.memory_peak_bytes, limit)
        answer = Answer(settings, plan=result, memory_note=note)
    else:
        answer = refreshed(ctx.compute, lambda: first_plan(
            ctx.network, run.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute, run.limit, settings,
            machine_ref=run.machine_ref, fingerprint=run.fingerprint,
            zero_given=click.get_parameter_source("zero") != ParameterSource.DEFAULT, schedule=schedule,
            prove_s=prove, batch_given=click.get_parameter_source("batch") != ParameterSource.DEFAULT),
            settings.budget.forget)
    if answer.plan is None or not step_context:
        return answer
    result = answer.plan  # machine `local`: checked in its step's context against the uniform plans
    settings.budget.settle(result.step_s, lambda: result)
    checked, timed = step_choice.checked(result, ctx, run.network, run.machine_ref)
    return dataclasses.replace(answer, plan=checked, timed=tuple(timed))


def _pipelined(run: Run, pipeline: str | None, micro_batches: int | None, schedule: str, prove: float,
               limit: float | None = None):
    """`dnnplan plan --pipeline auto|S [--micro-batches M]`: the pipeline search (planner.pipeline.search)."""
    stages = None
    if pipeline not in (None, "auto"):
        if not str(pipeline).isdigit() or int(pipeline) < 1:
            raise DnnplanError(f"--pipeline takes 'auto', 'off' or a number of stages, not {short(str(pipeline))}",
                               hint="e.g. --pipeline auto or --pipeline 8")
        stages = (int(pipeline),)
    micro = (micro_batches,) if micro_batches else None
    ctx = run.ctx
    return refreshed(ctx.compute, lambda: search_pipeline(
        ctx.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute, limit, run.settings, stages, micro,
        schedule=schedule, prove_s=prove), run.settings.budget.forget)


def show(run: Run, answer, out: str | None, as_json: bool, layers: bool) -> None:
    """Write the plan (``--out``) and print it: the summary first (dnnplan.render.answer)."""
    if isinstance(answer, Plan):  # a plan finished after Ctrl-C
        answer = Answer(run.settings, plan=answer)
    elif isinstance(answer, PipelineChoice):
        answer = Answer(run.settings, pipeline=answer)
    ctx = run.ctx
    if answer.pipeline is not None:
        got = answer.pipeline
        mfu = model_flops_utilization(ctx.network, ctx.batch, got.prediction.step_s, ctx.devices, ctx.machine,
                                      get_precision(answer.settings.precision).matmul)
        plan = plan_of_choice(got, run.network, run.machine_ref, run.fingerprint, answer.settings.training,
                              ctx.precision, mfu)
    else:
        got, plan = None, answer.plan
    plan = dataclasses.replace(plan, seq=ctx.seq)  # the plan file names the network with its --seq
    if out:
        write_plan(plan, out)
    if as_json:
        out = _json(plan, got, answer, _axes(run, answer, plan, got))
        print(json.dumps({**out, "answered_in_s": round(run.settings.budget.elapsed(), 3)}))
        return
    render.answer(plan, got, _facts(run, answer, plan, got), layers)
    if out:
        how = f"run it with `dnnplan execute {out} --ranks {ctx.devices}`" if got is not None else \
            f"evaluate it, or an edited copy, with `dnnplan predict {out}`"
        render.console.print(f"wrote {out} ({how})")


def _settings(ctx: Context, solver: str, gap: float | None, opt: Optimizer, recompute: bool, budget,
              overlap: str, bucket_mb: float | None) -> Settings:
    """The planner's settings from the command line: the overlap recorded with its bucket
    (``data@76``; a bad mode or bucket: one line)."""
    mode = overlap_with_bucket(overlap or None, ctx.machine, bucket_mb).spec
    return Settings(solver, None, gap, optimizer=opt.name, precision=ctx.precision, zero=opt.zero,
                    recompute=recompute, budget=budget, overlap=mode)


def _facts(run: Run, answer, plan: Plan, got) -> render.Facts:
    ctx = run.ctx
    ops = {layer.name: layer.op for layer in ctx.network.layers}
    attention = tuple(sorted({kernel_algorithm(lp.algorithm) or attention_default(ctx.machine)  # recompute: its own
                              for lp in plan.layers if ops.get(lp.name) == "attention"}))
    found = _axes(run, answer, plan, got)
    return render.Facts(ctx.network.name, ctx.devices, ctx.machine.name, ctx.machine.device.name, ctx.precision,
                        answer.settings.training.label, ctx.batch, run.defaults, answer.why, tuple(answer.timed),
                        len(ctx.network.layers), "batchnorm2d" in ops.values(), attention,
                        resolve_overlap(answer.settings.overlap, ctx.machine).label, ctx.batch_norm,
                        ctx.moe_dispatch if "moe" in ops.values() else "",
                        axes_line(found, _pipeline_axis(got, plan), answer.settings.zero),
                        "; ".join(x for x in (answer.zero_why, answer.memory_note) if x),
                        run.limit if run.limit is not None else ctx.machine.device.mem_capacity_bytes)


def _axes(run: Run, answer, plan: Plan, got) -> dict:
    """The plan's layout by parallel axis (planner.plan.layout_by_axis): each stage's layers under a pipeline."""
    ops = {layer.name: layer.op for layer in run.ctx.network.layers}
    if got is not None:
        layers = [(layer.op, sol.strategies[layer.name], sol.algorithms.get(layer.name, ""))
                  for sol in got.solutions for layer in sol.network.layers]
    else:
        layers = [(ops[lp.name], lp.strategy, lp.algorithm) for lp in plan.layers]
    return axes(layers, "attention" in ops.values())


def _pipeline_axis(got, plan: Plan) -> str:
    if got is None:
        return "no pipeline, the whole batch at once"
    if got.stages == 1:
        return (f"no pipeline, {got.micro_batches} micro-batches of {got.micro_batch} (gradient accumulation)"
                if got.micro_batches > 1 else "no pipeline, the whole batch at once")
    how = "interleaved 1F1B, " + f"{got.chunks} chunks a device" if got.chunks > 1 else plan.pipeline.schedule.upper()
    return f"pipeline {got.stages} ({how}), {got.micro_batches} micro-batches of {got.micro_batch}"


def _json(plan: Plan, got, answer, axes_found: dict) -> dict:
    out = {**plan_to_dict(plan), "step_context": render.step_context_dict(list(answer.timed))}
    out["axes"] = {**axes_found, "zero": answer.settings.zero}
    if got is not None:
        out.update({**pipeline_json(got.prediction), "cut_blocks": list(got.cut), "mfu": plan.mfu,
                    "micro_batch": got.micro_batch, "search": got.stats,
                    "tried": [_finite(c.__dict__) for c in got.candidates]})
    if answer.why:
        out["why_pipelined"] = answer.why
    if answer.memory_note:
        out["memory_note"] = answer.memory_note
    if answer.zero_why:
        out["zero_choice"] = {"why": answer.zero_why, "weighed": [_finite(dataclasses.asdict(w)) for w in answer.weighed]}
    return out


def plan_sweep(ctx: Context, network: str, counts: str, plot: str | None, limit: float | None,
               settings: Settings, as_json: bool) -> None:
    """`dnnplan plan --sweep`: the plan and data parallelism over several device counts; Ctrl-C
    prints the rows made so far and exits 130."""
    device_counts = parse_counts(counts)
    rows: list[dict] = []
    interrupted = False
    try:
        refreshed(ctx.compute, lambda: run_sweep(ctx.network, network, ctx.batch, device_counts, ctx.machine,
                                                 ctx.compute, limit, settings, rows.clear() or rows))
    except KeyboardInterrupt:
        interrupted = True
        with_speedups(rows)
    if plot and rows:
        plot_sweep(rows, plot, f"{ctx.network.name}, batch {ctx.batch}, {ctx.machine.name}")
    if as_json:
        print(json.dumps({"network": ctx.network.name, "batch": ctx.batch, "machine": ctx.machine.name,
                          "rows": rows, "complete": not interrupted}))
    else:
        render.sweep_table(rows, ctx.network.name, ctx.batch, ctx.machine.name)
        if plot and rows:
            render.console.print(f"wrote {plot}")
    if interrupted:
        fail_line(f"interrupted: {len(rows)} of {len(device_counts)} device counts planned, shown above")
        raise typer.Exit(130)


def _finite(row: dict) -> dict:
    """A candidate's fields for JSON: an infinite bound (nothing fits) as null, so the output
    stays strict JSON."""
    return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in row.items()}
