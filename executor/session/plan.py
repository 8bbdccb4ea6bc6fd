"""What `dnnplan plan` does, as library calls (the command parses its flags, calls one, renders).

:func:`plan` answers for one network on one device count: the planner's first plan
(planner.first_plan: the ZeRO stages weighed, the pipeline search run when nothing fits without
it), or with ``--pipeline`` / ``--micro-batches`` the pipeline search alone, or with ``--pipeline
off`` the ZeRO stages weighed on plans over all the devices only; each planned again under a lowered limit until its
predicted peak fits (planner.fit_check). On machine `local` the plan is then checked in its step's
context against the uniform plans (executor.session.step_choice). :func:`finished` turns an answer
into the plan a file holds; :func:`sweep` plans over several device counts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.choices.precision import get_precision
from costmodel.comm.overlap import overlap_with_bucket
from costmodel.frameworks.as_run import pipeline_as_run
from costmodel.step.pipeline import INTERLEAVED, SCHEDULES
from costmodel.step.prediction import model_flops_utilization
from executor.session import step_choice
from networks.errors import DnnplanError, short
from planner.answer import Answer
from planner.first_plan import first_plan, refit_choice
from planner.fit_check import fitting
from planner.pipeline.search import PROVE_S, PipelineChoice, search_pipeline
from planner.pipeline.to_plan import plan_of_choice
from planner.pipeline.triples import AUTO, DEFAULT
from planner.plan.plan import Plan
from planner.problem.full_profile import refreshed
from planner.problem.solve import Settings
from planner.sweep import sweep as sweep_counts
from profiler.context import Context

GIB = 2.0 ** 30


@dataclass(frozen=True)
class PlanRequest:
    """What `dnnplan plan` is asked beyond the network, batch, devices, machine and training choices."""

    network: str  # as the user named it: the plan file names it so
    machine_ref: str
    fingerprint: str | None  # the profile table's identity (ProfileTable.short_id); None: a datasheet
    limit: float | None = None  # bytes a device (--memory); None: the device's memory
    pipeline: str | None = None  # --pipeline: auto, off, a number of stages, or None (the planner decides)
    micro_batches: int | None = None
    schedule: str = DEFAULT  # DEFAULT: every pair under 1F1B, then the best pair interleaved too
    prove_s: float = PROVE_S
    step_context: bool = True  # machine `local`: the plan checked in its step's context
    batch_given: bool = True  # else a refusal names a batch with the device count
    #: the ZeRO stages weighed where --zero is not given, and why the others are not (the framework
    #: --emit names runs only these: dnnplan.export_file.weighed_for); None: every stage
    zero_stages: tuple[tuple[int, ...], str] | None = None

    @property
    def searches_pipelines(self) -> bool:
        """Whether the pipeline search alone answers (--pipeline S or auto, --micro-batches M)."""
        return self.pipeline not in (None, "off") or self.micro_batches is not None


def check_schedule(schedule: str, given: bool) -> str:
    """The pipeline schedule asked for (one line for an unknown one); not given: :data:`DEFAULT`."""
    if schedule not in SCHEDULES + (INTERLEAVED, AUTO):
        raise DnnplanError(f"unknown --schedule {short(schedule)}", hint="use 1f1b, gpipe, interleaved or auto")
    return schedule if given else DEFAULT


def settings_for(ctx: Context, method: str, gap: float | None, budget) -> Settings:
    """The planner's settings: the solver, and the context's choices with the overlap resolved on its
    machine and recorded with its bucket (``data@76``; a bad mode or bucket: one line)."""
    choices = ctx.choices
    mode = overlap_with_bucket(choices.overlap or None, ctx.machine, choices.bucket_mb).spec
    return Settings(method, None, gap, choices.but(overlap=mode, bucket_mb=None), budget, framework=ctx.framework)


def tensors_limit(ctx: Context, limit: float | None) -> float | None:
    """The limit the planner holds the tensors' peak under, for the peak as the framework reserves it
    (its allocator's reserve, CUDA context and communicator buffers:
    costmodel.frameworks.framework.FrameworkMemory.reserved_bytes) to fit ``limit`` (None: the
    device's memory): what runs out of memory is the reserved peak. ``limit`` itself where the
    framework adds nothing (the default ``ideal``) or on a CPU."""
    memory = None if ctx.framework is None else ctx.framework.memory
    if memory is None or ctx.machine.device.kind != "gpu" or memory.added_bytes(0, 2) == 0 \
            and memory.allocator.value == 1.0:
        return limit
    whole = ctx.machine.device.mem_capacity_bytes if limit is None else limit
    return memory.tensors_limit(whole, ctx.devices)


def plan(ctx: Context, request: PlanRequest, settings: Settings) -> Answer:
    """The answer (module docstring); where the framework reserves memory beside the tensors, a
    refusal says the limit the tensors had."""
    check_plannable(ctx)
    given = tensors_limit(ctx, request.limit)
    if given == request.limit:
        return _plan(ctx, request, settings, given)
    try:
        return _plan(ctx, request, settings, given)
    except DnnplanError as err:
        whole = request.limit if request.limit is not None else ctx.machine.device.mem_capacity_bytes
        raise DnnplanError(f"{err.bare} (the tensors' share of the {whole / GIB:.3f} GiB a device: framework "
                           f"{ctx.framework.name} reserves {(whole - given) / GIB:.3f} GiB beside them)",
                           hint=None if err.hint is None else f"{err.hint}; add the framework's share (its CUDA "
                           "context, communicator buffers and allocator reserve) to a --memory named there") from None


def check_plannable(ctx: Context) -> None:
    """One line for a framework whose step is its own model of one layout (DeepSpeed's ZeRO-3 over
    every device, costmodel.frameworks.deepspeed), which the planner's per-layer search does not
    price: planned under it, the answer would be priced as ``ideal`` and disagree with `dnnplan
    predict` of the same layout."""
    if ctx.framework is not None and ctx.framework.step == "zero3":
        raise DnnplanError(f"--framework {ctx.framework.name} prices DeepSpeed's ZeRO-3 step of data parallelism over "
                           "every device, one layout the planner does not search",
                           hint=f"predict it: `dnnplan predict NETWORK --framework {ctx.framework.name} --zero 3` "
                                "(with --micro-batches M, --recompute full); or plan under --framework pytorch, "
                                "the eager kernels DeepSpeed's engine runs")


def _plan(ctx: Context, request: PlanRequest, settings: Settings, given: float | None) -> Answer:
    """:func:`plan` with the tensors' limit ``given`` (None: the device's memory)."""
    limit = given if given is not None else ctx.machine.device.mem_capacity_bytes
    if request.searches_pipelines:
        choice, note = fitting(lambda under: _pipelined(ctx, request, settings, under),
                               lambda c: c.prediction.memory_allocated_bytes, limit,
                               lambda c, under: refit_choice(c, ctx.network, ctx.batch, ctx.devices, ctx.machine,
                                                             ctx.compute, under, settings, request.schedule))
        return Answer(settings, pipeline=choice, memory_note=note)
    # --pipeline off: each ZeRO stage's plan of the whole batch at once, the fastest the answer
    answer = refreshed(ctx.compute, lambda: first_plan(
        ctx.network, request.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute, given, settings,
        machine_ref=request.machine_ref, fingerprint=request.fingerprint,
        zero_given="zero" in settings.choices.given, schedule=request.schedule, prove_s=request.prove_s,
        batch_given=request.batch_given, zero_stages=request.zero_stages, pipelines=request.pipeline != "off"),
        settings.budget.forget)
    if answer.plan is None or not request.step_context or settings.budget.stop_requested:
        return answer  # a stop the search took as its time running out: the command answers it
    result = answer.plan  # machine `local`: checked in its step's context against the uniform plans
    settings.budget.settle(result.step_s, lambda: answer)  # the whole answer: its ZeRO stage, its gaps
    checked, timed = step_choice.checked(result, ctx, request.network, request.machine_ref)
    return dataclasses.replace(answer, plan=checked, timed=tuple(timed))


def _pipelined(ctx: Context, request: PlanRequest, settings: Settings, limit: float | None = None) -> PipelineChoice:
    """`dnnplan plan --pipeline auto|S [--micro-batches M]`: the pipeline search (planner.pipeline.search)."""
    stages = None
    if request.pipeline not in (None, "auto"):
        if not str(request.pipeline).isdigit() or int(request.pipeline) < 1:
            raise DnnplanError(f"--pipeline takes 'auto', 'off' or a number of stages, not "
                               f"{short(str(request.pipeline))}", hint="e.g. --pipeline auto or --pipeline 8")
        stages = (int(request.pipeline),)
    micro = (request.micro_batches,) if request.micro_batches else None
    return refreshed(ctx.compute, lambda: search_pipeline(
        ctx.network, ctx.batch, ctx.devices, ctx.machine, ctx.compute, limit, settings, stages, micro,
        schedule=request.schedule, prove_s=request.prove_s), settings.budget.forget)


def finished(ctx: Context, request: PlanRequest, settings: Settings,
             answer: Answer | Plan | PipelineChoice) -> tuple[Answer, Plan]:
    """The answer (a plan or a pipeline choice finished after Ctrl-C counts as one, under
    ``settings``) and the plan a file holds of it: the pipeline search's choice made a plan, the
    network named with its ``--seq``."""
    if isinstance(answer, Plan):
        answer = Answer(settings, plan=answer)
    elif isinstance(answer, PipelineChoice):
        answer = Answer(settings, pipeline=answer)
    if answer.pipeline is None:
        made = answer.plan
    else:
        got = answer.pipeline
        if ctx.framework is not None and not got.prediction.framework_bytes:  # the memory it adds
            got = dataclasses.replace(got, prediction=pipeline_as_run(got.prediction, ctx.framework, ctx.machine))
            answer = dataclasses.replace(answer, pipeline=got)
        mfu = model_flops_utilization(ctx.network, ctx.batch, got.prediction.step_s, ctx.devices, ctx.machine,
                                      get_precision(answer.settings.choices.precision).matmul)
        made = plan_of_choice(got, request.network, request.machine_ref, request.fingerprint,
                              answer.settings.choices, mfu)
        if got.prediction.framework_bytes:
            made = dataclasses.replace(made, memory_parts={"framework": got.prediction.framework_bytes})
    return answer, dataclasses.replace(made, choices=made.choices.but(seq=ctx.choices.seq))


def sweep(ctx: Context, network: str, counts: list[int], limit: float | None, settings: Settings,
          rows: list[dict]) -> None:
    """`dnnplan plan --sweep`: the plan and data parallelism at each device count, appended to
    ``rows`` as each is planned (so an interruption keeps the rows made); the tensors held under
    what the framework leaves of ``limit`` on more than one device (:func:`tensors_limit`)."""
    under = tensors_limit(dataclasses.replace(ctx, devices=max(2, ctx.devices)), limit)
    refreshed(ctx.compute, lambda: sweep_counts(ctx.network, network, ctx.batch, counts, ctx.machine, ctx.compute,
                                                under, settings, rows.clear() or rows))
