"""`dnnplan predict`: one uniform strategy, or a plan file, priced by the cost model."""

from __future__ import annotations

import dataclasses
import json

from costmodel.choices.batch_norm import check_batch_norm
from costmodel.choices.moe_dispatch import check_moe_dispatch
from costmodel.step.breakdown import comm_parts
from costmodel.calls.algorithms import recompute_algorithms
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.comm.overlap import overlap_with_bucket
from costmodel.step.pipeline import pipeline_json, predict_pipeline
from costmodel.machine.loading import load_machine
from costmodel.choices.precision import get_precision
from costmodel.step.prediction import micro_batch, model_flops_utilization, predict_step, prediction_json
from costmodel.frameworks.uniform import uniform_strategies
from dnnplan.options import (AttentionOpt, BatchNormOpt, BatchOpt, BucketOpt, ChunksOpt, ContextOpt, DevicesOpt,
                             ExpertOpt, ForceOpt, ForeignProfileOpt, JsonOpt, LayersOpt, MachineOpt, MicroBatchesOpt,
                             MoeDispatchOpt, NetworkArg, OptimizerOpt, OverlapOpt, PipelineOpt, PlanOutOpt,
                             PrecisionOpt, PredictStepContextOpt, ProfileOpt, RecomputeModeOpt, RuntimeOpt,
                             ScheduleOpt, SeqOpt, SequenceParallelOpt, StrategyOpt, TensorOpt, ZeroOpt)
from dnnplan.commands.predict_deepspeed import check_runtime, predict_deepspeed
from dnnplan.output import check_outputs
from dnnplan.render import fmt, tables
from dnnplan.render.plan import SMALL_NETWORK
from dnnplan.render.messages import warn
from executor.session.predict import ahead_of_time
from planner.problem.solve import plan_from_prediction
from planner.plan.plan_file import is_plan_file, read_plan, write_plan
from planner.pipeline.to_plan import predict_pipelined as predict_pipelined_plan
from profiler import context
from networks.errors import DnnplanError, short
from networks.ir import Network
from profiler.context import Context


#: The worked examples of `dnnplan predict --help`, after its docstring (dnnplan.cli.command_help)
EXAMPLES = """
Each of M micro-batches holds batch/M samples, split over a stage's data-parallel ranks.
GPT-3 175B as Narayanan et al. (SC21, Table 2) ran it on 1536 GPUs, tensor 8 x pipeline 12 x
data 16, micro-batches of one sample:
dnnplan predict gpt3-175b -p 1536 -b 1536 --precision fp16 --optimizer adam --tensor 8
--pipeline 12 --micro-batches 96 --recompute full --machine dgx-a100
Add --schedule interleaved --chunks 3 for Megatron-LM's interleaved 1F1B with 3 model chunks a device.

Llama 3 8B under FSDP on 64 H100s in FP8, 4 micro-batches of one sequence, the gradient
reduction and the gathers overlapped (--overlap data, the default on GPU machines):
dnnplan predict llama3-8b -p 64 -b 256 --machine dgx-h100 --precision fp8 --optimizer adam
--zero 3 --micro-batches 4

--context C splits the sequence over C devices, --expert E a mixture of experts' experts over E
data-parallel ones (Megatron-Core's context and expert parallelism). Mixtral 8x7B on 64 H100s:
dnnplan predict mixtral-8x7b -p 64 -b 256 --machine dgx-h100 --precision bf16 --optimizer adam
--expert 8 --pipeline 4 --micro-batches 16

DeepSpeed's ZeRO-3 as Narayanan et al. (Table 2) ran GPT-3 on 1536 GPUs, one sample each:
dnnplan predict gpt3-175b -p 1536 -b 1536 --precision fp16 --optimizer adam --zero 3
--recompute full --runtime deepspeed --machine dgx-a100. --out FILE writes the layers' strategies
as a plan (no pipeline) for `dnnplan execute`, e.g. tiny-moe -p 4 -b 8 --tensor 2 --expert 2.
"""


def predict(network: NetworkArg, devices: DevicesOpt = 1, strategy: StrategyOpt = "data",
            batch: BatchOpt = None, machine: MachineOpt = None, profile: ProfileOpt = None,
            precision: PrecisionOpt = "fp32", optimizer: OptimizerOpt = "momentum", zero: ZeroOpt = 0,
            tensor: TensorOpt = 1, sequence_parallel: SequenceParallelOpt = False, context_: ContextOpt = 1,
            expert: ExpertOpt = 1, attention: AttentionOpt = "",
            pipeline: PipelineOpt = 1, micro_batches: MicroBatchesOpt = 1, schedule: ScheduleOpt = "1f1b",
            chunks: ChunksOpt = 1, recompute: RecomputeModeOpt = "none", overlap: OverlapOpt = "",
            bucket_mb: BucketOpt = None, runtime: RuntimeOpt = "dnnplan",
            step_context: PredictStepContextOpt = True, layers: LayersOpt = False, as_json: JsonOpt = False,
            foreign_profile: ForeignProfileOpt = False, seq: SeqOpt = None, out: PlanOutOpt = None,
            force: ForceOpt = False, batch_norm: BatchNormOpt = None, moe_dispatch: MoeDispatchOpt = None) -> None:
    """Predict one training step under one strategy applied to every layer, or evaluate a plan file.

    Given a plan file (from `dnnplan plan --out`, possibly edited by hand) instead of a network,
    predicts that plan on the network, batch, devices, machine, precision and optimiser it names
    (for machine `local`, as `dnnplan execute` predicts it before its run: --step-context).

    Layers that cannot take the strategy fall back to data parallelism, and the output says which.
    The step is forward + backward + gradient synchronisation + update, each collective at the time
    it is not hidden under compute (--overlap; docs/costmodel.md). With --tensor T each layer takes
    its Megatron split over groups of T devices and the data split over the rest. With --pipeline S
    the layers are cut into S stages run as a pipeline of --micro-batches, --strategy or --tensor
    applying inside each stage; without it (or with --pipeline 1), --micro-batches M accumulates
    gradients: M micro-batches one after another, the activations of one held, the gradients
    reduced and the weights updated once a step.
    """
    if is_plan_file(network):
        return predict_plan(network, profile, as_json, step_context, layers, foreign_profile, seq, batch_norm,
                            moe_dispatch)
    megatron = tensor > 1 or sequence_parallel or context_ > 1 or expert > 1
    _check_options(megatron, strategy, out, force, runtime, pipeline, micro_batches)
    check_runtime(runtime, opt := Optimizer(optimizer, zero), tensor, pipeline, sequence_parallel, strategy)
    ctx = context.resolve(network, devices, batch, machine, profile, precision=precision, foreign_ok=foreign_profile,
                          seq=seq, batch_norm=batch_norm, moe_dispatch=moe_dispatch)
    algorithms = recompute_algorithms(ctx.network, recompute, attention)
    if runtime == "deepspeed":
        return predict_deepspeed(ctx, algorithms, opt, micro_batches, recompute, as_json)
    strategies_of = _strategies(megatron, strategy, tensor, sequence_parallel, context_, expert)
    ov = overlap_with_bucket(overlap or None, ctx.machine, bucket_mb)
    if pipeline > 1 or (schedule != "1f1b" and micro_batches > 1):  # one 1F1B stage: accumulation
        return predict_pipelined(ctx, strategies_of, algorithms, opt, pipeline, micro_batches, schedule, as_json,
                                 chunks, full=recompute == "full", overlap=ov)
    strategies, fallbacks = strategies_of(ctx.network, devices, micro_batch(ctx.batch, micro_batches))
    pred = predict_step(ctx.network, ctx.batch, strategies, algorithms, ctx.machine, ctx.compute, opt,
                        checkpoints=recompute == "full", micro_batches=micro_batches, overlap=ov)
    _check_recompute(ctx, strategies, opt, recompute, pred)
    _show(ctx, pred, fallbacks, layers, as_json)
    _write_out(out, ctx, pred, network, machine, opt, as_json, seq)


def _write_out(out: str | None, ctx: Context, pred, network: str, machine: str | None, opt: Optimizer,
               as_json: bool, seq: int | None = None) -> None:
    """--out: the prediction's strategies and algorithms as a plan file (planner.plan.plan_file)."""
    if not out:
        return
    table = ctx.compute.table
    plan = plan_from_prediction(pred, ctx.network, network, machine or ctx.machine.name,
                                None if table is None else table.short_id, solver={"name": "predict"},
                                precision=ctx.precision, optimizer=opt)
    write_plan(dataclasses.replace(plan, seq=seq), out)
    if not as_json:
        tables.console.print(f"wrote {out} (run it with `dnnplan execute {out} --ranks {ctx.devices}`)")


def _check_options(megatron: bool, strategy: str, out: str | None, force: bool, runtime: str, pipeline: int,
                   micro_batches: int) -> None:
    """Options that exclude each other (one line each); --out writes a plan without pipeline, of
    dnnplan's own runtime."""
    if megatron and strategy != "data":
        raise DnnplanError("--tensor (--context, --expert) and --strategy both give the layers' splits",
                           hint="give one: --tensor T splits the batch over the devices it leaves")
    if not out:
        return
    if pipeline > 1 or micro_batches > 1 or runtime != "dnnplan":
        raise DnnplanError("--out writes a plan without pipeline or micro-batches, for dnnplan's runtime",
                           hint="drop --pipeline, --micro-batches and --runtime, or plan a pipeline with "
                                "`dnnplan plan --pipeline S --out FILE`")
    check_outputs({"--out": out}, force)


def _show(ctx: Context, pred, fallbacks, layers: bool, as_json: bool) -> None:
    """`dnnplan predict NET`'s answer: JSON, or the step by term, memory and MFU first (dnnplan.render.tables)."""
    mfu = _mfu(ctx, pred.step_s)
    if as_json:
        print(json.dumps({**prediction_json(pred), "fallbacks": [f.__dict__ for f in fallbacks], "mfu": mfu}))
        return
    tables.prediction_table(pred, fallbacks, mfu, layers or len(pred.layers) <= SMALL_NETWORK,
                            ctx.machine.device.mem_capacity_bytes)


def _mfu(ctx: Context, step_s: float) -> float:
    return model_flops_utilization(ctx.network, ctx.batch, step_s, ctx.devices, ctx.machine,
                                   get_precision(ctx.precision).matmul)


def _check_recompute(ctx: Context, strategies: dict, opt: Optimizer, mode: str, pred) -> None:
    """Warn when ``--recompute MODE`` saves no memory against no recomputation (recompute_warning)."""
    if mode == "none":
        return
    plain = predict_step(ctx.network, ctx.batch, strategies, recompute_algorithms(ctx.network, "none"),
                         ctx.machine, ctx.compute, opt, micro_batches=pred.micro_batches, overlap=pred.overlap)
    if (line := recompute_warning(ctx.network, mode, pred, plain)) is not None:
        warn(line)


def recompute_warning(net: Network, mode: str, pred, plain) -> str | None:
    """Why ``--recompute MODE`` buys nothing here (None when it lowers the peak memory)."""
    if pred.memory_peak_bytes < plain.memory_peak_bytes:
        return None
    if mode == "selective" and not any(layer.op == "attention" for layer in net.layers):
        return f"--recompute selective reruns attention only, and {net.name} has none: nothing is recomputed"
    return (f"--recompute {mode} saves no memory for {net.name}: the peak rises from "
            f"{fmt.nbytes(plain.memory_peak_bytes)} to {fmt.nbytes(pred.memory_peak_bytes)} a device and the step from "
            f"{fmt.seconds(plain.step_s)} to {fmt.seconds(pred.step_s)} (convolutions are not recomputed, so the "
            "inputs they keep stay, and a block's recomputation holds its activations again while its backward "
            "runs); leave it out")


def _strategies(megatron: bool, strategy: str, tensor: int, sequence_parallel: bool, context: int, expert: int):
    """(network, ranks, batch) -> the layers' strategies and fallbacks: Megatron-Core's layout of the
    tensor, context, expert and data degrees, or one uniform strategy."""
    def strategies_of(net: Network, ranks: int, batch: int):
        if megatron:
            return megatron_strategies(net, ranks, batch, tensor, sequence_parallel, context=context, expert=expert)
        return uniform_strategies(net, ranks, batch, strategy)
    return strategies_of


def predict_pipelined(ctx: Context, strategies_of, algorithms: dict[str, str], opt: Optimizer, stages: int,
                      micro_batches: int, schedule: str, as_json: bool, chunks: int = 1, full: bool = False,
                      overlap=None) -> None:
    """`dnnplan predict NET --pipeline S --micro-batches M`: each stage on its ranks with the
    uniform or Megatron strategies (costmodel.step.pipeline); ``full``: full recomputation from each
    block's input (costmodel.memory.recompute)."""
    fallbacks = []

    def stage(net, ranks: int, micro: int):
        strategies, fell = strategies_of(net, ranks, micro)
        fallbacks.extend(fell)
        return predict_step(net, micro, strategies, algorithms, ctx.machine, ctx.compute, opt,
                            checkpoints=full, overlap=overlap)

    pred = predict_pipeline(ctx.network, ctx.batch, ctx.devices, stages, micro_batches, schedule, ctx.machine, stage,
                            chunks=chunks)
    if as_json:
        comm = dict(comm_parts(pred))
        print(json.dumps({**pipeline_json(pred), "overlap": pred.stages[0].micro.overlap,
                          "comm_exposed_s": comm["exposed"], "comm_overlapped_s": comm["overlapped"],
                          "fallbacks": [f.__dict__ for f in fallbacks]}))
        return
    tables.pipeline_table(pred)
    if fallbacks:
        f = fallbacks[0]
        tables.console.print(f"{len(fallbacks)} layer(s) could not take their split and run data parallel instead, "
                             f"first {f.layer} ({f.wanted}: {f.reason})")


def predict_plan(path: str, profile: str | None, as_json: bool, step_context: bool = True,
                 layers: bool = False, foreign_ok: bool = False, seq: int | None = None,
                 batch_norm: str | None = None, moe_dispatch: str | None = None) -> None:
    """`dnnplan predict plan.yaml`: the plan's own strategies and algorithms, predicted now; for
    machine `local` without --profile, as `dnnplan execute` predicts it before its run. The plan
    names its network and sequence: a ``seq`` (--seq) is refused."""
    if seq is not None:
        raise DnnplanError(f"--seq applies to a network, and {path} is a plan file: its network's sequence "
                           "is the one it was planned for", hint="leave --seq out, or plan again with --seq")
    plan, net = read_plan(path)
    if batch_norm is not None and check_batch_norm(batch_norm) != plan.batch_norm:
        raise DnnplanError(f"--batch-norm {short(batch_norm)} differs from the plan's batch_norm {plan.batch_norm}",
                           file=path, field="batch_norm",
                           hint="leave --batch-norm out (a plan file's own choice holds), or plan again with it")
    if moe_dispatch is not None and check_moe_dispatch(moe_dispatch) != plan.moe_dispatch:
        raise DnnplanError(f"--moe-dispatch {short(moe_dispatch)} differs from the plan's moe_dispatch "
                           f"{plan.moe_dispatch}", file=path, field="moe_dispatch",
                           hint="leave --moe-dispatch out (a plan file's own choice holds), or plan again with it")
    ahead = ahead_of_time(path, step_context) if profile is None else None
    if ahead is None:
        ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, profile, precision=plan.precision,
                              foreign_ok=foreign_ok, seq=plan.seq, batch_norm=plan.batch_norm,
                              moe_dispatch=plan.moe_dispatch)
        if plan.pipeline is not None:
            return _predict_pipelined_plan(path, plan, net, ctx, as_json)
        pred = predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute,
                            Optimizer(plan.optimizer, plan.zero), overlap=plan.overlap or None)
    else:
        for line in ahead.warnings:
            warn(line)
        pred = ahead.prediction
    alone = ahead.profile_step_s if ahead else None
    machine = load_machine(plan.machine)
    mfu = model_flops_utilization(net, plan.batch, pred.step_s, plan.devices, machine,
                                  get_precision(plan.precision).matmul)
    if as_json:
        out = prediction_json(pred)
        out["mfu"] = mfu
        out["plan"] = {"file": path, "recorded_step_s": plan.step_s}
        out["as_execute_predicts"] = ahead is not None
        out["profile_predicted_step_s"] = alone
        print(json.dumps(out))
        return
    tables.prediction_table(pred, (), mfu, layers or len(pred.layers) <= SMALL_NETWORK,
                            plan.solver.get("memory_limit_bytes"))
    if ahead is None:
        _recorded_line(plan.step_s, pred.step_s)
        return
    tables.ahead_of_time_line(pred, alone)
    if plan.step_s:
        tables.console.print(f"the plan file recorded {plan.step_s:.6g} s, the planner's price: the profile's "
                             "kernels timed alone, no wait for other ranks")


def _predict_pipelined_plan(path: str, plan, net, ctx: Context, as_json: bool) -> None:
    """`dnnplan predict plan.yaml` of a pipelined plan: its stages as written, predicted now."""
    pred = predict_pipelined_plan(plan, net, plan.strategies(), ctx.machine, ctx.compute)
    if as_json:
        print(json.dumps({**pipeline_json(pred), "plan": {"file": path, "recorded_step_s": plan.step_s}}))
        return
    tables.pipeline_table(pred)
    _recorded_line(plan.step_s, pred.step_s)


def _recorded_line(recorded_s: float, now_s: float) -> None:
    """Where a plan file's recorded step differs from what it predicts as written now."""
    if recorded_s and abs(recorded_s - now_s) > 1e-9 * recorded_s:
        tables.console.print(f"the plan file recorded {recorded_s:.6g} s; as written it predicts "
                             f"{now_s:.6g} s ({now_s / recorded_s:.4f}x)")
