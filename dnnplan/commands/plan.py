"""`dnnplan plan`: the main job. Check the flags, resolve the inputs, one library call, one render."""

from __future__ import annotations

import dataclasses
import json

import typer
from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click

from costmodel.choices.training import TRANSFORMER_OPTIMIZER, TrainingChoices
from costmodel.machine.loading import DEFAULT_MACHINE
from costmodel.step.train_time import tokens_per_step, train_time
from dnnplan.options import (BatchOpt, DevicesOpt, ForceOpt, ForeignProfileOpt, GapOpt, JobsOpt, JsonOpt, LayersOpt,
                             MachineOpt, MemoryOpt, NetworkArg, PlanMicroBatchesOpt, PlanOutOpt, PlanPipelineOpt,
                             PlanProveOpt, PlanStepContextOpt, PlotOpt, ProfileOpt, RecomputeOpt, RefreshOpt,
                             PriceOpt, ScheduleOpt, SolverOpt, SweepOpt, TimeLimitOpt, TokensOpt, refresh_warning,
                             takes_choices, token_budget)
from dnnplan.output import check_outputs
from dnnplan.render import plan as render
from dnnplan.render.messages import fail_line, warn
from dnnplan.render.plot import plot_sweep
from dnnplan.render.progress import progress_line
from dnnplan.search_bound import end, search_budget, stop_on_ctrl_c
from executor.session import plan as planning
from executor.session.plan import PlanRequest
from lifecycle import stops
from lifecycle.process_pool import ProcessPool, default_jobs
from networks.errors import DnnplanError, short
from planner.pipeline.search import PROVE_S
from planner.plan.plan_file import write_plan
from planner.problem.solve import Settings
from planner.sweep import parse_counts, with_speedups
from profiler import context
from profiler.context import Context

GIB = 2 ** 30
#: what the workers import once, before the first task (lifecycle.process_pool)
WORKER_MODULES = ("planner.pipeline.pair_bounds",)


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


@takes_choices("precision", "optimizer", "zero", "overlap", "bucket_mb", "batch_norm", "moe_dispatch", "seq",
               "framework")
def plan(click: typer.Context, network: NetworkArg, devices: DevicesOpt = 1, batch: BatchOpt = None,
         machine: MachineOpt = None, profile: ProfileOpt = None, memory: MemoryOpt = None, out: PlanOutOpt = None,
         solver: SolverOpt = "auto", time_limit: TimeLimitOpt = None, gap: GapOpt = None, sweep: SweepOpt = None,
         plot: PlotOpt = None, refresh: RefreshOpt = False, choices: TrainingChoices = TrainingChoices(),
         recompute: RecomputeOpt = True, pipeline: PlanPipelineOpt = None, micro_batches: PlanMicroBatchesOpt = None,
         schedule: ScheduleOpt = "1f1b", prove: PlanProveOpt = PROVE_S, as_json: JsonOpt = False,
         step_context: PlanStepContextOpt = True, layers: LayersOpt = False, force: ForceOpt = False,
         foreign_profile: ForeignProfileOpt = False, tokens: TokensOpt = None, price: PriceOpt = None,
         jobs: JobsOpt = None) -> None:
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
    train_tokens = token_budget(tokens, price)
    budget = search_budget(time_limit)
    with stop_on_ctrl_c(budget), progress_line(budget):
        try:
            ctx = context.resolve(network, devices, batch, machine, profile, refresh,
                                  choices.but(recompute="auto" if recompute else "none"), foreign_profile,
                                  network_defaults=True)
            for line in [refresh_warning(refresh, ctx.compute), *ctx.choices.idle(ctx.network)]:
                if line is not None:
                    warn(line)
            per_step = None if train_tokens is None else tokens_per_step(ctx.network, ctx.batch)
            limit = None if memory is None else memory * GIB
            pool = ProcessPool(default_jobs() if jobs is None else jobs, WORKER_MODULES)
            click.call_on_close(pool.close)  # in-process (tests) too; a console command's exit closes it anyway
            settings = dataclasses.replace(planning.settings_for(ctx, solver, gap, budget), parallel=pool)
            if sweep:
                return plan_sweep(ctx, network, sweep, plot, limit, settings, as_json)
            request = PlanRequest(network, machine or DEFAULT_MACHINE, profile_fingerprint(ctx), limit, pipeline,
                                  micro_batches, planning.check_schedule(schedule, _given(click, "schedule")), prove,
                                  step_context, _given(click, "batch"))
            answer = planning.plan(ctx, request, settings)
            budget.settled = True
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.stops): the best plan so far
            budget.request_stop()
            if budget.best is None:
                fail_line(f"interrupted by {stops.name()} after {budget.elapsed():.1f} s, before any plan was found")
                end(stops.exit_code())
            answer = budget.best.finish()
    budgeted = None if train_tokens is None else (train_tokens, per_step, price)
    show(ctx, request, settings, answer, out, as_json, layers, _defaults(click, ctx), budgeted)
    if budget.stop_requested:
        fail_line(f"interrupted by {stops.name()} after {budget.elapsed():.1f} s: the best plan found so far is shown")
        end(stops.exit_code())
    end(0)


def _given(click: typer.Context, name: str) -> bool:
    return click.get_parameter_source(name) != ParameterSource.DEFAULT


def _defaults(click: typer.Context, ctx: Context) -> tuple[str, ...]:
    """What the command assumed because the flag was not given (said in the summary)."""
    out = []
    for name, flag, value in (("machine", "--machine", ctx.machine.name), ("precision", "--precision",
                              ctx.choices.precision), ("optimizer", "--optimizer", ctx.choices.optimizer),
                              ("batch", "--batch", ctx.batch_rule)):
        if not _given(click, name):
            out.append(f"{flag} {value}" if name != "batch" else f"--batch {ctx.batch} ({value})")
            if name == "optimizer" and value == TRANSFORMER_OPTIMIZER:
                out[-1] += " (a network with attention)"
    return tuple(out)


def show(ctx: Context, request: PlanRequest, settings: Settings, answer, out: str | None, as_json: bool,
         layers: bool, defaults: tuple[str, ...], budgeted: tuple | None = None) -> None:
    """Write the plan (``--out``) and print it: the summary first (dnnplan.render.answer); with
    ``budgeted`` (tokens, tokens a step, price), the time and cost to train them."""
    answer, made = planning.finished(ctx, request, settings, answer)
    got = answer.pipeline
    train = None if budgeted is None else train_time(made.step_s, budgeted[1], ctx.devices, budgeted[0], budgeted[2])
    if out:
        write_plan(made, out)
    if as_json:
        print(json.dumps({**render.plan_json(ctx, answer, made, got, train),
                          "answered_in_s": round(settings.budget.elapsed(), 3)}))
        return
    render.answer(made, got, render.facts(ctx, answer, made, got, defaults, request.limit, train), layers)
    if out:
        how = f"run it with `dnnplan execute {out} --ranks {ctx.devices}`" if got is not None else \
            f"evaluate it, or an edited copy, with `dnnplan predict {out}`"
        render.console.print(f"wrote {out} ({how})")


def plan_sweep(ctx: Context, network: str, counts: str, plot: str | None, limit: float | None,
               settings: Settings, as_json: bool) -> None:
    """`dnnplan plan --sweep`: the plan and data parallelism over several device counts; Ctrl-C
    prints the rows made so far and exits 130."""
    device_counts = parse_counts(counts)
    rows: list[dict] = []
    interrupted = False
    try:
        planning.sweep(ctx, network, device_counts, limit, settings, rows)
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
