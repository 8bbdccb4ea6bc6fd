"""What `dnnplan predict` does, as library calls (the command parses its flags, calls one, renders).

:func:`step` prices one training step of a network with its layers split one way (a uniform
strategy, or Megatron-Core's tensor, context, expert and data degrees: :class:`LayerSplits`), with
gradient accumulation over micro-batches; :func:`pipelined` the same splits inside each of a
pipeline's stages; :func:`deepspeed_step` DeepSpeed's ZeRO-3 step (costmodel.frameworks.deepspeed);
:func:`plan_step` a plan file as it is written.

A plan file's step is predicted as `dnnplan execute` predicts it before its run where that can be
done without the run (:func:`ahead_of_time`). On machine `local` without ``--profile``, `execute`
predicts from the plan's kernels (and, on several ranks, its collectives) timed again in its step's
order and context, the executor's own time between kernels, and the time the ranks wait for the
slowest (executor.session.execute). In the CPU validation (docs/VALIDATION.md) that prediction is
several times closer to the measured step than the profile's kernels timed alone: `predict` of a
plan file for this computer says what `execute` would.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from costmodel.calls.algorithms import attention_default, recompute_algorithms
from costmodel.comm.overlap import overlap_with_bucket, resolve_overlap
from costmodel.compute.model import OnDemand
from costmodel.machine.loading import load_machine
from costmodel.machine.model import Machine
from costmodel.parallel.axes import PIPELINE
from costmodel.frameworks.as_run import framework_overlap, pipeline_as_run, step_as_run
from costmodel.frameworks.deepspeed import Zero3Step, zero3_step
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.frameworks.uniform import Fallback, uniform_strategies
from costmodel.choices.precision import get_precision
from costmodel.step.pipeline import PipelinePrediction, predict_pipeline
from costmodel.step.prediction import StepPrediction, micro_batch, model_flops_utilization, predict_step
from executor.session.execute import cannot_run, in_step_context, predict, prepare, step_context_entries
from networks.errors import DnnplanError, short
from networks.ir import Network
from planner.pipeline.to_plan import predict_pipelined
from planner.plan.plan import Plan
from planner.plan.plan_file import read_plan
from planner.problem.solve import plan_from_prediction
from profiler import context
from profiler.context import Context


@dataclass(frozen=True)
class LayerSplits:
    """How `dnnplan predict` splits the layers: one uniform strategy (``strategy``: data, filter,
    channel, spatial or degrees such as N=4,F=2), or Megatron-Core's layout of the tensor, context
    and expert degrees with data parallelism over the rest."""

    strategy: str = "data"
    tensor: int = 1
    sequence_parallel: bool = False
    context: int = 1
    expert: int = 1

    @property
    def megatron(self) -> bool:
        return self.tensor > 1 or self.sequence_parallel or self.context > 1 or self.expert > 1

    def strategies(self, net: Network, ranks: int, batch: int) -> tuple[dict, list[Fallback]]:
        """Each layer's strategy over ``ranks`` ranks at ``batch`` samples, and the layers that fell
        back to data parallelism."""
        if self.megatron:
            return megatron_strategies(net, ranks, batch, self.tensor, self.sequence_parallel, context=self.context,
                                       expert=self.expert)
        return uniform_strategies(net, ranks, batch, self.strategy)


@dataclass(frozen=True)
class Predicted:
    """A prediction, the layers that could not take their split, and the step's model FLOP
    utilisation; ``plain``: the same step without recomputation, where recomputation was asked for."""

    prediction: StepPrediction | PipelinePrediction
    fallbacks: tuple[Fallback, ...]
    mfu: float | None = None
    plain: StepPrediction | None = None


def algorithms(ctx: Context) -> dict[str, str]:
    """The layers' algorithms the choices ask for: recomputation (none, selective, full) and the
    attention kernels (one clear line for an unknown one)."""
    return recompute_algorithms(ctx.network, ctx.choices.recompute, ctx.choices.attention)


def mfu(ctx: Context, step_s: float) -> float:
    """The model FLOP utilisation of a step of ``ctx``'s network on its devices."""
    return model_flops_utilization(ctx.network, ctx.batch, step_s, ctx.devices, ctx.machine,
                                   get_precision(ctx.choices.precision).matmul)


def step(ctx: Context, splits: LayerSplits, micro_batches: int = 1) -> Predicted:
    """One step of ``ctx``'s network under ``splits`` over all its devices, ``micro_batches``
    micro-batches accumulating the gradients; with the same step without recomputation beside it
    when the choices recompute."""
    choices = ctx.choices
    overlap = overlap_of(ctx)
    strategies, fallbacks = splits.strategies(ctx.network, ctx.devices, micro_batch(ctx.batch, micro_batches))
    pred = as_run(ctx, predict_step(ctx.network, ctx.batch, strategies, algorithms(ctx), ctx.machine, ctx.compute,
                                    choices.sharded_optimizer, checkpoints=choices.recompute == "full",
                                    micro_batches=micro_batches, overlap=overlap))
    plain = None
    if choices.recompute != "none":
        plain = as_run(ctx, predict_step(ctx.network, ctx.batch, strategies, recompute_algorithms(ctx.network, "none"),
                                         ctx.machine, ctx.compute, choices.sharded_optimizer,
                                         micro_batches=pred.micro_batches, overlap=overlap))
    return Predicted(pred, tuple(fallbacks), mfu(ctx, pred.step_s), plain)


def overlap_of(ctx: Context):
    """The overlap the choices name (the machine's default where none), at the framework's efficiencies."""
    got = overlap_with_bucket(ctx.choices.overlap or None, ctx.machine, ctx.choices.bucket_mb)
    return got if ctx.framework is None else framework_overlap(got, ctx.framework)


def as_run(ctx: Context, pred: StepPrediction) -> StepPrediction:
    """``pred`` as ``ctx``'s framework runs it: its host time and the memory it adds
    (costmodel.frameworks.as_run)."""
    return pred if ctx.framework is None else step_as_run(pred, ctx.network, ctx.framework, ctx.machine)


def pipelined(ctx: Context, splits: LayerSplits, stages: int, micro_batches: int, chunks: int = 1) -> Predicted:
    """`dnnplan predict NET --pipeline S --micro-batches M`: each stage on its ranks under ``splits``
    (costmodel.step.pipeline), in the choices' schedule; full recomputation from each block's input
    (costmodel.memory.recompute)."""
    choices = ctx.choices
    overlap = overlap_of(ctx)
    algos = algorithms(ctx)
    fallbacks: list[Fallback] = []

    def stage(net: Network, ranks: int, micro: int, view: Machine):
        try:
            strategies, fell = splits.strategies(net, ranks, micro)
        except DnnplanError as err:  # a stage's ranks, not the devices: the pipeline's share said
            raise DnnplanError(f"{ctx.devices} devices over {stages} pipeline stages leave {ranks} a stage: {err.bare}",
                               layer=err.layer,
                               hint=err.hint.replace("--devices", f"--devices / {PIPELINE.flag}") if err.hint
                               else None) from None
        fallbacks.extend(fell)
        return predict_step(net, micro, strategies, algos, view, ctx.compute, choices.sharded_optimizer,
                            checkpoints=choices.recompute == "full", overlap=overlap)

    pred = predict_pipeline(ctx.network, ctx.batch, ctx.devices, stages, micro_batches, choices.schedule, ctx.machine,
                            stage, chunks=chunks)
    pred = pipeline_as_run(pred, ctx.framework, ctx.machine) if ctx.framework else pred
    return Predicted(pred, tuple(fallbacks), mfu(ctx, pred.step_s))


def deepspeed_step(ctx: Context, micro_batches: int) -> tuple[Zero3Step, tuple[Fallback, ...], int]:
    """DeepSpeed's ZeRO-3 step of ``ctx``'s network: every layer split over the samples of each of
    ``micro_batches`` micro-batches, priced by costmodel.frameworks.deepspeed; with the layers that
    could not split a micro-batch over every device, and the micro-batch's samples."""
    if ctx.batch % micro_batches:
        raise DnnplanError(f"--micro-batches {micro_batches} do not divide the batch {ctx.batch}",
                           hint="give a divisor of the batch")
    micro = ctx.batch // micro_batches
    strategies, fallbacks = uniform_strategies(ctx.network, ctx.devices, micro, "data")
    recompute = ctx.choices.recompute
    compute = predict_step(ctx.network, micro, strategies, algorithms(ctx), ctx.machine, ctx.compute,
                           ctx.choices.sharded_optimizer, checkpoints=recompute == "full")
    return zero3_step(ctx.network, ctx.devices, micro_batches, compute, ctx.machine, recompute != "none"), \
        tuple(fallbacks), micro


def as_plan(ctx: Context, pred: StepPrediction, network: str, machine: str | None) -> Plan:
    """A prediction's strategies and algorithms as a plan file holds them (`dnnplan predict --out`)."""
    table = ctx.compute.table
    plan = plan_from_prediction(pred, ctx.network, network, machine or ctx.machine.name,
                                None if table is None else table.short_id, solver={"name": "predict"},
                                choices=ctx.choices)
    return replace(plan, mfu=mfu(ctx, pred.step_s), memory_parts=pred.memory_parts)


@dataclass(frozen=True)
class PlanStep:
    """A plan file's step: predicted now as written (``ahead`` None), or as `dnnplan execute`
    predicts it before its run (:class:`AheadOfTime`)."""

    plan: Plan
    network: Network  # as the plan names it
    machine: Machine  # the plan's machine, as its step is priced on it
    prediction: StepPrediction | PipelinePrediction
    mfu: float | None = None
    ahead: "AheadOfTime | None" = None
    lacks: str | None = None  # the table given (--profile) lacked some of its kernels (:func:`table_lacks`)


def table_lacks(compute, profile: str | None) -> str | None:
    """The line saying how many of the kernel shapes a prediction priced the table ``profile``
    (``--profile``) lacked, each priced by its fallback model instead (the roofline or datasheet);
    None where it held every one, or none was given (a profile cache times what it lacks)."""
    misses = getattr(compute, "misses", None)
    if profile is None or not misses or isinstance(compute, OnDemand):
        return None
    kinds = sorted({call.kernel for call in misses})
    return (f"{len(misses)} kernel shape(s) of this prediction are not in {profile} ({', '.join(kinds[:4])}"
            f"{', ...' if len(kinds) > 4 else ''}): priced by {compute.fallback.name} instead (a table timed for "
            f"this network on the device, `dnnplan profile NETWORK --devices P --batch B --out FILE`, holds them)")


def _same_choice(name: str, given, planned, machine) -> bool:
    """Whether the flags' ``name`` is the plan's, as priced on ``machine``: the overlap and its
    bucket as the mode they give (``data`` with the default bucket is the plan's ``data@25``), an
    attention left to the machine as its default (flash where FlashAttention runs), the others as
    written."""
    if name in ("overlap", "bucket_mb"):
        return (overlap_with_bucket(given.overlap, machine, given.bucket_mb)
                == overlap_with_bucket(planned.overlap, machine, planned.bucket_mb))
    if name == "attention":
        default = attention_default(machine)
        return (given.attention or default) == (planned.attention or default)
    return getattr(given, name) == getattr(planned, name)


def _planned(name: str, planned, machine) -> str:
    """The plan's ``name`` in words, as :func:`_same_choice` reads it: ``overlap data with 25 MiB
    gradient buckets`` for its overlap and bucket, ``attention flash`` for the machine's default."""
    if name in ("overlap", "bucket_mb"):
        got = overlap_with_bucket(planned.overlap, machine, planned.bucket_mb)
        buckets = f" with {got.bucket_bytes / 2 ** 20:g} MiB gradient buckets" if got.data else ""
        return f"overlap {got.mode}{buckets}"
    if name == "attention" and not planned.attention:
        return f"attention {attention_default(machine)} (the machine's default)"
    return f"{name} {getattr(planned, name)}"


def plan_step(path: str, profile: str | None, step_context: bool, foreign_ok: bool, given) -> PlanStep:
    """`dnnplan predict plan.yaml`: the plan's own strategies and algorithms, predicted now; for
    machine `local` without ``profile``, as `dnnplan execute` predicts it before its run. The plan
    names its network, sequence and choices: ``given``, the choices the flags name
    (TrainingChoices), must agree with them, and a sequence is refused."""
    if "seq" in given.given:
        raise DnnplanError(f"--seq applies to a network, and {path} is a plan file: its network's sequence "
                           "is the one it was planned for", hint="leave --seq out, or plan again with --seq")
    plan, net = read_plan(path)
    machine = load_machine(plan.machine)
    for name in sorted(given.given - {"seq"}):  # each choice the flags name, the plan's own
        if not _same_choice(name, given, plan.choices, machine):
            flag = "--" + name.replace("_", "-")
            value = getattr(given, name)
            if isinstance(value, bool):  # a switch: --fp8-params or --no-fp8-params
                flag = flag if value else "--no-" + flag[2:]
                raise DnnplanError(f"{flag} differs from the plan's {name} {str(not value).lower()}", file=path,
                                   field=name, hint=f"leave {flag} out (a plan file's own choice holds), or plan "
                                                    "again with it")
            raise DnnplanError(f"{flag} {short(value)} differs from the plan's "
                               f"{_planned(name, plan.choices, machine)}", file=path, field=name,
                               hint=f"leave {flag} out (a plan file's own choice holds), or plan again with it")
    ahead = ahead_of_time(path, step_context) if profile is None else None
    if ahead is not None:
        pred = ahead.prediction
    else:
        ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, profile, choices=plan.choices,
                              foreign_ok=foreign_ok)
        pred = predict_plan(plan, net, ctx)
    return PlanStep(plan, net, machine, pred, model_flops_utilization(net, plan.batch, pred.step_s, plan.devices, machine,
                                                        get_precision(plan.choices.precision).matmul), ahead,
                    None if ahead is not None else table_lacks(ctx.compute, profile))


def predict_plan(plan: Plan, net: Network, ctx: Context) -> StepPrediction | PipelinePrediction:
    """A plan's own strategies and algorithms on ``net`` (the network it names, as its choices mark
    it), priced on ``ctx``'s machine and compute model: its pipeline as cut, else one step. A
    transformer layer (a repeated block) recomputed whole is checkpointed at its input, as
    `dnnplan predict NET --recompute full` prices it (costmodel.memory.recompute)."""
    if ctx.framework is not None and ctx.framework.step == "zero3":  # its own step, of one layout
        raise DnnplanError(f"framework {ctx.framework.name} prices DeepSpeed's ZeRO-3 step of data parallelism over "
                           "every device, not a plan's layers", field="framework",
                           hint=f"predict the layout with `dnnplan predict NETWORK --framework {ctx.framework.name} "
                                "--zero 3`, or set the plan's framework to pytorch")
    overlap = resolve_overlap(plan.choices.overlap or None, ctx.machine)
    if ctx.framework is not None:  # the framework's overlap efficiencies, host time and memory
        overlap = framework_overlap(overlap, ctx.framework)
    if plan.pipeline is not None:
        got = predict_pipelined(plan, net, plan.strategies(), ctx.machine, ctx.compute, overlap)
        return got if ctx.framework is None else pipeline_as_run(got, ctx.framework, ctx.machine)
    return as_run(ctx, predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute,
                                    plan.choices.sharded_optimizer, checkpoints=True, overlap=overlap))


@dataclass(frozen=True)
class AheadOfTime:
    """The ahead-of-time prediction and what it was made from."""

    prediction: StepPrediction
    # the step from the profile's kernels timed alone, when the prediction is from the plan's
    # kernels timed in its step's context (None: it is not)
    profile_step_s: float | None
    warnings: tuple[str, ...]  # for the user (executor.session.execute.prepare)


def ahead_of_time(plan_path: str, step_context: bool = True) -> AheadOfTime | None:
    """``plan_path``'s step as `dnnplan execute PLAN --ranks P` predicts it before its run, with
    ``step_context`` (its --step-context); None where `execute` would not predict it from this
    computer's on-demand profile: a plan for another machine, a pipelined plan (its stages are
    priced as `predict` prices them), or one the executor cannot run (another optimiser or
    precision, recomputation)."""
    plan, _ = read_plan(plan_path)
    if plan.machine != "local" or plan.pipeline is not None or cannot_run(plan, plan_path) is not None:
        return None
    prep = prepare(plan_path, plan.devices, None, None)
    if not isinstance(prep.compute, OnDemand):
        return None
    if step_context:
        prep = in_step_context(prep, step_context_entries(prep))
    return AheadOfTime(predict(prep), prep.profile_step_s, prep.warnings)
