"""`dnnplan plan`: the main job. Check the flags, resolve the inputs, one library call, one render."""

from __future__ import annotations

import dataclasses
import json
from typing import Callable

import typer
from typer._click.core import ParameterSource  # typer >= 0.29 (pyproject) carries its own click

from costmodel.choices.training import TrainingChoices
from costmodel.machine.loading import DEFAULT_MACHINE
from costmodel.step.train_time import tokens_per_step, train_time
from dnnplan.choice_flags import takes_choices
from dnnplan.options import (BatchOpt, DevicesOpt, EmitNearestOpt, EmitOpt, ForceOpt, ForeignProfileOpt, GapOpt,
                             JobsOpt, JsonOpt, LayersOpt, MemoryOpt, NetworkArg, PlanMachineOpt, PlanMicroBatchesOpt,
                             PlanOutOpt,
                             PlanPipelineOpt, PlanPriceOpt, PlanProveOpt, PlanStepContextOpt, PlotOpt, ProfileOpt,
                             RecomputeOpt, RefreshOpt, ScheduleOpt, SolverOpt, SweepJobsOpt, SweepOpt, TimeLimitOpt,
                             TokensOpt, foreign_warning, refresh_warning, step_context_warning,
                             token_budget)
from dnnplan.assumed import assumed_flags
from dnnplan.export_file import check_framework, exported, nearest_json, nearest_runs, weighed_for
from dnnplan.output import check_outputs, json_beside
from dnnplan.render import export as export_render
from dnnplan.render import plan as render
from dnnplan.render.terminal.messages import fail_line, warn
from dnnplan.render import sweep as sweep_render
from dnnplan.render.plot import plot_machines, plot_sweep
from dnnplan.render.plot import check_figure_path
from dnnplan.render.terminal.progress import progress_line
from dnnplan.search_bound import DEFAULT_TIME_LIMIT_S, end, finish_reserve_s, search_budget, stop_on_ctrl_c
from executor.session import plan as planning
from executor.session import sweep as sweeping
from executor.session.plan import PlanRequest
from executor.session.sweep import SweepRequest
from lifecycle import stops
from lifecycle.process_pool import ProcessPool, default_jobs
from networks.default_batch import sequence_length
from networks.writing import SystemFailure, shell_word, standard_stream
from networks.errors import DnnplanError, short
from networks.ir import Network
from planner.pipeline.search import PROVE_S
from planner.pipeline.stack import uniform_stack
from planner.plan.plan_file import write_plan
from planner.problem.solve import Settings
from planner.sweep import parse_counts, parse_machines, parse_prices
from profiler import context
from profiler.context import Context

GIB = 2 ** 30
#: what the workers import once, before the first task (lifecycle.process_pool)
WORKER_MODULES = ("planner.pipeline.workers.pair_bounds", "planner.pipeline.pair_closing")
#: seconds a sweep's points share when --time-limit (then each point's) is not given
DEFAULT_SWEEP_LIMIT_S = 30.0


def profile_fingerprint(ctx: Context) -> str | None:
    """The identity of the profile table a plan was made with (its device, threads and backend:
    ``ProfileTable.short_id``), as `execute`, `predict` and `validate` record and compare it;
    None when a datasheet prices the plan."""
    table = getattr(ctx.compute, "table", None)
    return None if table is None else table.short_id


def check_flags(solver: str, sweep: str | None, plot: str | None, pipelined_sweep: bool = False,
                machines: int = 1, profile: str | None = None) -> None:
    """What the flags' own ranges (dnnplan.options) cannot say: the solver's name, --plot without a
    sweep, a sweep of pipelined plans, one --profile for several machines."""
    if solver not in ("auto", "reduced", "ilp"):
        raise DnnplanError(f"unknown --solver {short(solver)}", hint="use auto, reduced or ilp")
    if plot and not sweep and machines == 1:
        raise DnnplanError("--plot draws a sweep", hint="add --sweep 1,2,4,...")
    if pipelined_sweep:
        what = "--sweep" if sweep else "several --machine"
        raise DnnplanError(f"{what} plans each point without pipelining, or with --pipeline auto as `dnnplan plan` "
                           "plans it; a fixed --pipeline or --micro-batches cannot be swept",
                           hint="use --pipeline auto, or drop --sweep and plan one point")
    if machines > 1 and profile:
        raise DnnplanError("--profile times one machine's kernels, and --machine names several",
                           hint="drop --profile to price each machine from its own")


def check_accumulation(pipeline: str | None, micro_batches: int | None) -> None:
    """One line for micro-batches asked of a plan --pipeline off keeps to the whole batch at once."""
    if pipeline == "off" and micro_batches is not None:
        raise DnnplanError(f"--micro-batches {micro_batches} accumulates micro-batches, and --pipeline off plans the "
                           "whole batch at once", hint="drop --pipeline off (--micro-batches alone is gradient "
                           "accumulation on one stage), or drop --micro-batches")


def idle_pipeline_flags(net: Network, given: Callable[[str], bool], schedule: str, prove: float) -> list[str]:
    """The pipeline search's flags given for a network it never pipelines (not a stack of identical
    blocks), each in one line: they change nothing."""
    if uniform_stack(net) is not None:
        return []
    why = f"{net.name} is not a stack of identical blocks, so it is never pipelined"
    return [f"--{name} {value:g} changes nothing: {why}" if isinstance(value, float) else
            f"--{name} {value} changes nothing: {why}"
            for name, value in (("schedule", schedule), ("prove", prove)) if given(name)]


@takes_choices("precision", "optimizer", "zero", "overlap", "bucket_mb", "batch_norm", "moe_dispatch", "seq",
               "framework", "fp8_params", "grad_fp32")
def plan(click: typer.Context, network: NetworkArg, devices: DevicesOpt = 1, batch: BatchOpt = None,
         machine: PlanMachineOpt = None, profile: ProfileOpt = None, memory: MemoryOpt = None, out: PlanOutOpt = None,
         solver: SolverOpt = "auto", time_limit: TimeLimitOpt = None, gap: GapOpt = None, sweep: SweepOpt = None,
         plot: PlotOpt = None, refresh: RefreshOpt = False, choices: TrainingChoices = TrainingChoices(),
         recompute: RecomputeOpt = True, pipeline: PlanPipelineOpt = None, micro_batches: PlanMicroBatchesOpt = None,
         schedule: ScheduleOpt = "1f1b", prove: PlanProveOpt = PROVE_S, as_json: JsonOpt = False,
         step_context: PlanStepContextOpt = True, layers: LayersOpt = False, force: ForceOpt = False,
         foreign_profile: ForeignProfileOpt = False, tokens: TokensOpt = None, price: PlanPriceOpt = None,
         sweep_jobs: SweepJobsOpt = 1, jobs: JobsOpt = None, emit: EmitOpt = None,
         nearest: EmitNearestOpt = False) -> None:
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

    A transformer gets the pipeline search too: stages, micro-batches (gradient accumulation on one
    stage), the stage cut and interleaving, each stage solved as above; where the whole batch fits,
    under its step (a pipeline is the answer only when faster; --pipeline off refuses it). GPT-3 175B on 1024 A100s:
    dnnplan plan gpt3-175b -p 1024 -b 1536 --precision bf16

    --sweep plans at several device counts; with several machines (-m dgx-a100,dgx-h100) and a token
    budget it compares them: time and cost to train at each, the fastest and the cheapest marked
    (rows print on stderr as they finish; Ctrl-C keeps the rows made):
    dnnplan plan llama3-70b -m dgx-a100,dgx-h100 --sweep 256,512,1024 -b 512 --precision bf16
    --pipeline auto --tokens 15T --gpu-hour-price dgx-a100=1.6,dgx-h100=2.5

    Default batch: 32 samples a device; a language model about 4M tokens, at most 16 sequences a device
    (a sweep: one batch at every point, that of --devices, else of the sweep's most devices).
    On machine `local` the plan is checked against the uniform plans in its step's context.

    --emit megatron|torchtitan|deepspeed prints the plan as that framework's launch file after it
    (as `dnnplan export PLAN --to`; a plan the framework cannot run is one line after the summary,
    or with --nearest the fastest plan the framework runs within memory, its changes on stderr).
    """
    machines = parse_machines(machine) if machine is not None else [DEFAULT_MACHINE]
    swept = bool(sweep) or len(machines) > 1
    check_flags(solver, sweep, plot, swept and (pipeline not in (None, "off", "auto") or micro_batches is not None),
                len(machines), profile)
    check_accumulation(pipeline, micro_batches)
    what = "--sweep plans several" if sweep else "several machines are compared"
    if nearest and emit is None:
        raise DnnplanError("--nearest is the nearest plan a framework runs, printed by --emit",
                           hint="add --emit megatron, torchtitan or deepspeed, or drop --nearest")
    if emit is not None:
        check_framework(emit, "--emit")
        if swept:
            raise DnnplanError(f"--emit prints one plan's launch file, and {what}",
                               hint="drop --emit, or plan one device count and machine")
    if layers and swept:
        raise DnnplanError(f"--layers prints one plan's per-layer tables, and {what}",
                           hint="drop --layers, or plan one device count and machine")
    if out is not None and swept:
        raise DnnplanError(f"--out writes one plan's file, and {what}",
                           hint="drop --out (the table as JSON: --json > FILE; as a figure: --plot FILE), "
                           "or plan one device count and machine")
    if sweep_jobs > 1 and not swept:
        raise DnnplanError("--sweep-jobs plans a sweep's points at once", hint="add --sweep 1,2,4,... or drop it")
    check_figure_path("--plot", plot)
    json_beside(as_json, out)
    json_beside(as_json, plot, "--plot")
    check_outputs({"--out": out, "--plot": plot}, force,
                  reads=(network, *(machine or "").split(","), profile, choices.framework))
    train_tokens = token_budget(tokens, price)
    prices = parse_prices(price, machines)
    if swept:
        counts = tuple(parse_counts(sweep) if sweep else [devices])
        # one batch at every point: the default at --devices, else at the sweep's most devices (at one
        # device a language model's default is 16 sequences, not the 4M tokens it trains on)
        request = SweepRequest(
            network, tuple(machines), counts, devices=devices if _given(click, "devices") else max(counts),
            batch=batch, profile=profile, refresh=refresh,
            choices=choices.but(recompute="auto" if recompute else "none"),
            foreign_profile=foreign_profile, memory_limit_bytes=None if memory is None else memory * GIB,
            solver=solver, gap=gap, with_data=len(machines) == 1 and train_tokens is None and pipeline != "auto",
            pipelines=pipeline == "auto", tokens=train_tokens, prices=prices,
            point_s=None if time_limit is None else time_limit - finish_reserve_s(time_limit),
            total_s=DEFAULT_SWEEP_LIMIT_S, most_s=DEFAULT_TIME_LIMIT_S - finish_reserve_s(DEFAULT_TIME_LIMIT_S),
            jobs=sweep_jobs)
        zero = () if not request.with_data or _given(click, "zero") else (
            "--zero 0 (each point; --pipeline auto weighs the stages as a single plan does)",)
        plan_sweep(click, request, plot, as_json, refresh, lambda *ctxs: _defaults(click, *ctxs) + zero)
        return
    price = None if prices is None else prices[machines[0]]
    machine = machines[0] if machine is not None else None
    budget = search_budget(time_limit)
    with stop_on_ctrl_c(budget), progress_line(budget):
        try:
            ctx = context.resolve(network, devices, batch, machine, profile, refresh,
                                  choices.but(recompute="auto" if recompute else "none"), foreign_profile,
                                  network_defaults=True)
            for line in [refresh_warning(refresh, ctx.compute), foreign_warning(foreign_profile, profile),
                         step_context_warning(_given(click, "step_context"), ctx.compute),
                         memory_warning(memory, ctx.machine), *ctx.choices.idle(ctx.network),
                         *idle_pipeline_flags(ctx.network, lambda name: _given(click, name), schedule, prove)]:
                if line is not None:
                    warn(line)
            per_step = None if train_tokens is None else tokens_per_step(ctx.network, ctx.batch)
            limit = None if memory is None else memory * GIB
            pool = ProcessPool(_jobs(jobs), WORKER_MODULES)
            click.call_on_close(pool.close)  # in-process (tests) too; a console command's exit closes it anyway
            settings = dataclasses.replace(planning.settings_for(ctx, solver, gap, budget), parallel=pool)
            request = PlanRequest(network, machine or DEFAULT_MACHINE, profile_fingerprint(ctx), limit, pipeline,
                                  micro_batches, planning.check_schedule(schedule, _given(click, "schedule")), prove,
                                  step_context, _given(click, "batch"),
                                  None if emit is None or _given(click, "zero") else weighed_for(emit))
            answer = planning.plan(ctx, request, settings)
            hold = _hold(click)
            if budget.stop_requested and budget.best is not None:
                # a stop the search took as its time running out (between two ZeRO stages): the
                # answer a stop gives, the best plan so far as interrupted, not as the time limit's
                answer = budget.best.finish()
            budget.settled = True
        except (KeyboardInterrupt, ImportError) as err:  # Ctrl-C, SIGTERM or SIGHUP (lifecycle.stops): the best plan so far
            if not stops.stopped_by(err):
                raise  # an import that failed by itself
            budget.request_stop()
            if budget.best is None:
                fail_line(f"interrupted by {stops.name()} after {budget.elapsed():.1f} s, before any plan was found")
                end(stops.exit_code())
            answer = budget.best.finish()
            hold = _hold(click)
    budgeted = None if train_tokens is None else (train_tokens, per_step, price)
    # the pipeline search alone answers (--pipeline S or auto, --micro-batches M): at the stage given
    # or ZeRO-0, the stages not weighed (a plan without these flags weighs them)
    unweighed = ("--zero 0 (not weighed with --pipeline or --micro-batches: `dnnplan plan` without them weighs "
                 "the ZeRO stages and pipelines, --zero N plans another stage)",) \
        if request.searches_pipelines and not _given(click, "zero") and ctx.devices > 1 else ()
    emitted = show(ctx, request, settings, answer, out, as_json, layers, _defaults(click, ctx) + unweighed, budgeted,
                   emit, force, nearest)
    elapsed = f"after {budget.elapsed():.1f} s"
    _end(hold, budget, f"{elapsed}, once the search had ended: its answer is shown whole",
         f" {elapsed}: the best plan found so far is shown", 0 if emitted else 2)


def _end(hold: stops.Hold, budget, after: str, during: str, code: int) -> None:
    """The command's end once its answer is shown: a stop that arrived while it was shown (``hold``:
    ``after`` says so), one that cut the work short (``during``), else ``code``."""
    if hold.stopped:
        fail_line(f"{stops.name()} {after}")
        end(stops.exit_code())
    if budget.stop_requested:
        fail_line(f"interrupted by {stops.name()}{during}")
        end(stops.exit_code())
    end(code)


def _jobs(jobs: int | None) -> int:
    """The search's processes: ``--jobs``, at most the cores this process may run on (more only
    share them, and each worker holds its pricing and two pipes to every other: on a 2-core VM
    --jobs 16 and more left ZeRO-0 to the time limit, 4.25 s against 1.99 s; --jobs 600 ran out of
    file descriptors), said in one line; the cores without the flag."""
    cores = default_jobs()
    if jobs is not None and jobs > cores:
        warn(f"--jobs {jobs} is more than the {cores} cores this process may run on: {cores} used")
    return cores if jobs is None else min(jobs, cores)


def _hold(click: typer.Context) -> stops.Hold:
    """Once the search has answered, until the command ends, a stop signal is noted and not raised:
    the answer is shown whole and its --out written, then the command ends with the signal's code
    (lifecycle.stops.holding; a stop landing while the answer was shown lost it all)."""
    held = stops.holding()
    hold = held.__enter__()
    click.call_on_close(lambda: held.__exit__(None, None, None))
    return hold


def _given(click: typer.Context, name: str) -> bool:
    return click.get_parameter_source(name) != ParameterSource.DEFAULT


def _defaults(click: typer.Context, ctx: Context, *others: Context) -> tuple[str, ...]:
    """What the command assumed because the flag was not given (said in the summary)."""
    return assumed_flags(lambda name: _given(click, name), ctx, *others)


def show(ctx: Context, request: PlanRequest, settings: Settings, answer, out: str | None, as_json: bool,
         layers: bool, defaults: tuple[str, ...], budgeted: tuple | None = None, emit: str | None = None,
         force: bool = False, nearest: bool = False) -> bool:
    """Write the plan (``--out``; a file another process made there meanwhile replaced only with
    ``force``) and print it: the summary first (dnnplan.render.answer); with
    ``budgeted`` (tokens, tokens a step, price), the time and cost to train them; with ``emit``, the
    plan as that framework's file after it (its JSON under ``export``), with ``nearest`` the fastest
    plan the framework runs within memory where it cannot run the plan (its changes on stderr, or
    under ``export.nearest``). False when the framework cannot run the plan (said in one line after it)."""
    answer, made = planning.finished(ctx, request, settings, answer)
    launch, refused, near = None, None, None
    if emit is not None:
        source = out or "`dnnplan plan`"
        try:
            if nearest:
                from executor.session.export_nearest import nearest_export  # noqa: PLC0415 - its pricing: asked only
                near = nearest_export(made, ctx.network, emit, lambda m: exported(emit, m, ctx.network, source, None))
            launch = exported(emit, near.plan if near is not None else made, ctx.network, source, None)
        except DnnplanError as err:
            refused = err
    got = answer.pipeline
    train = None if budgeted is None else train_time(made.step_s, budgeted[1], ctx.devices, budgeted[0], budgeted[2])
    failed = None  # the plan file not written (a full disk): said after the plan is shown, so the search is not lost
    streamed = bool(out) and standard_stream(out)  # --out -: the plan after what the command prints there
    if out and not streamed:
        try:
            write_plan(made, out, replace=force)
        except (SystemFailure, DnnplanError) as err:  # a full disk; a file made there meanwhile
            failed, out = err, None
    if as_json:
        # "interrupted": the best plan a stop (Ctrl-C, SIGTERM, SIGHUP) found so far; else "done"
        print(json.dumps({"status": "interrupted" if settings.budget.stop_requested else "done",
                          **render.plan_json(ctx, answer, made, got, train),
                          "answered_in_s": round(settings.budget.elapsed(), 3), "assumed": list(defaults),
                          **({} if emit is None else {"export": {"framework": emit, **launch[1],
                                                                 **({"nearest": nearest_json(near)} if near else {})}
                                                      if launch else {"framework": emit, "refused": str(refused)}})}))
    else:
        render.answer(made, got, render.facts(ctx, answer, made, got, defaults, request.limit, train), layers)
        if out and not streamed:
            render.console.print(render.wrote_line(made, out, ctx.machine.device.kind, ctx.devices))
        if launch is not None:
            export_render.show(launch[0])
            if near is not None and near.changes:
                export_render.nearest_lines(near)
    if streamed:
        try:
            write_plan(made, out)
        except SystemFailure as err:
            failed = err
    if failed is not None:
        raise failed
    if refused is not None:  # the plan is printed (and written); the refusal is the one line on stderr
        runs = not nearest and nearest_runs(emit, made, ctx.network)  # with --nearest, none runs
        plan_file = out or "PLAN.yaml"
        keep = "" if out else f"keep the plan with --out {plan_file}, then "  # no plan file to export yet
        what = DnnplanError(refused.bare, layer=refused.layer, field=refused.field)  # its own fix said below
        fail_line(f"--emit {emit}: {what}" + (f" ({keep}`dnnplan export {shell_word(plan_file)} --to {emit} --nearest` "
                                                       f"writes the closest plan it runs, as `--emit {emit} --nearest` "
                                                       "prints it after the plan)" if runs else
                                                       f" ({refused.hint})" if refused.hint else ""))
    return refused is None


def memory_warning(memory_gib: float | None, machine) -> str | None:
    """The line saying --memory is more than the machine's device holds (a plan within it may not
    run there), None where it is not."""
    capacity = machine.device.mem_capacity_bytes
    if memory_gib is None or not capacity or memory_gib * GIB <= capacity * (1 + 1e-9):
        return None
    return (f"--memory {memory_gib:g} GiB is more than a {machine.name} device holds ({capacity / GIB:.2f} GiB): a "
            "plan within it may not run there")


def plan_sweep(click: typer.Context, request: SweepRequest, plot: str | None, as_json: bool, refresh: bool,
               assumed: Callable[..., tuple[str, ...]] = lambda *ctxs: ()) -> None:
    """`dnnplan plan --sweep` (or several --machine): every machine and device count planned
    (executor.session.sweep), a line on stderr as each point finishes, then the table (strong
    scaling on one machine, else the comparison) or the JSON, with what the command ``assumed``
    because a flag was not given (``assumed(*contexts)``, the first machine's first); Ctrl-C (or SIGTERM, SIGHUP) shows the points planned so far and
    exits 130."""
    budget = search_budget(None)
    rows: list[dict] = []
    with stop_on_ctrl_c(budget):
        ctxs = sweeping.contexts(request)
        first = next(iter(ctxs.values()))
        for line in [refresh_warning(refresh, first.compute), foreign_warning(request.foreign_profile, request.profile),
                     *first.choices.idle(first.network)]:
            if line is not None:
                warn(line)
        if request.tokens is not None:
            tokens_per_step(first.network, first.batch)  # a network without tokens: one line, before planning

        def made(row: dict) -> None:
            rows.append(row)
            sweeping.ordered(request, rows)
            sweep_render.progress(sweep_render.point_line(row, len(rows), request.size, rows))

        try:
            sweeping.run(request, ctxs, budget, made)
            hold = _hold(click)  # the points planned: a stop now shows the table whole
        except (KeyboardInterrupt, ImportError) as err:
            if not stops.stopped_by(err):
                raise  # an import that failed by itself
            budget.request_stop()
            hold = _hold(click)  # a second stop now shows the points planned so far whole
    rows = sweeping.ordered(request, rows)
    _show_sweep(request, first, rows, plot, as_json, not budget.stop_requested, assumed(*ctxs.values()))
    _end(hold, budget, f"once the sweep had ended: its {len(rows)} points are shown whole",
         f": {len(rows)} of {request.size} points planned, shown above", 0)


def _show_sweep(request: SweepRequest, ctx: Context, rows: list[dict], plot: str | None, as_json: bool,
                complete: bool, assumed: tuple[str, ...] = ()) -> None:
    """The sweep's table or JSON, and its plot; ``assumed``: the flags not given and what they
    were taken as (as a single plan's summary says them)."""
    name, comparing = ctx.network.name, not request.with_data
    if plot and any("error" not in r for r in rows):
        if comparing:
            plot_machines(rows, plot, f"{name}, batch {ctx.batch}")
        else:
            plot_sweep(rows, plot, f"{name}, batch {ctx.batch}, {ctx.machine.name}")
    elif plot:  # nothing to draw: said, as the file the flag names is not written
        warn(f"--plot {plot}: no figure written, no point of the sweep has a plan")
    if as_json:
        head = {"network": name, "batch": ctx.batch, "assumed": list(assumed),
                **({"batch_assumed": ctx.batch_rule} if ctx.batch_rule else {})}
        if comparing:
            best = {k: next(({"machine": r["machine"], "devices": r["devices"]} for r in rows if r.get(k)), None)
                    for k in ("fastest", "cheapest")}
            head.update({"machines": list(request.machines), "tokens": request.tokens, "prices": request.prices,
                         **best})
        else:
            head["machine"] = ctx.machine.name
        print(json.dumps({**head, "rows": rows, "complete": complete}))
        return
    if comparing:
        sweep_render.compare_table(rows, name, ctx.batch, request.tokens, request.pipelines,
                                   priced=bool(request.prices), reads_tokens=sequence_length(ctx.network) is not None)
    else:
        sweep_render.sweep_table(rows, name, ctx.batch, ctx.machine.name, request.pipelines)
    if assumed:
        render.console.print(f"[dim]assumed, the flag not given: {'; '.join(assumed)}[/dim]")
    if plot and any("error" not in r for r in rows):
        if not standard_stream(plot):
            render.console.print(f"wrote {plot}")
