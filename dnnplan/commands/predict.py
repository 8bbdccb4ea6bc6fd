"""`dnnplan predict`: one uniform strategy, or a plan file, priced by the cost model."""

from __future__ import annotations

import json

from costmodel.compute import default_algorithms
from costmodel.optimizer import Optimizer
from costmodel.pipeline import pipeline_json, predict_pipeline
from costmodel.step import predict_step, prediction_json
from costmodel.uniform import uniform_strategies
from dnnplan.options import (BatchOpt, DevicesOpt, JsonOpt, MachineOpt, MicroBatchesOpt, NetworkArg, OptimizerOpt,
                             PipelineOpt, PrecisionOpt, ProfileOpt, ScheduleOpt, StrategyOpt, ZeroOpt)
from dnnplan.render import tables
from planner.plan_file import is_plan_file, read_plan
from profiler import context
from profiler.context import Context


def predict(network: NetworkArg, devices: DevicesOpt = 1, strategy: StrategyOpt = "data",
            batch: BatchOpt = None, machine: MachineOpt = None, profile: ProfileOpt = None,
            precision: PrecisionOpt = "fp32", optimizer: OptimizerOpt = "momentum", zero: ZeroOpt = 0,
            pipeline: PipelineOpt = 1, micro_batches: MicroBatchesOpt = 1, schedule: ScheduleOpt = "1f1b",
            as_json: JsonOpt = False) -> None:
    """Predict one training step under one strategy applied to every layer, or evaluate a plan file.

    Given a plan file (from `dnnplan plan --out`, possibly edited by hand) instead of a network,
    predicts that plan on the network, batch, devices, machine, precision and optimiser it names.

    Layers that cannot take the strategy fall back to data parallelism, and the output says which.
    The step is forward + backward + gradient synchronisation + update with no overlap
    (docs/costmodel.md). With --pipeline S the layers are cut into S stages run as a pipeline of
    --micro-batches, --strategy applying inside each stage.
    """
    if is_plan_file(network):
        return predict_plan(network, profile, as_json)
    opt = Optimizer(optimizer, zero)
    ctx = context.resolve(network, devices, batch, machine, profile, precision=precision)
    if pipeline > 1 or micro_batches > 1:
        return predict_pipelined(ctx, strategy, opt, pipeline, micro_batches, schedule, as_json)
    strategies, fallbacks = uniform_strategies(ctx.network, devices, ctx.batch, strategy)
    pred = predict_step(ctx.network, ctx.batch, strategies, default_algorithms(ctx.network), ctx.machine,
                        ctx.compute, opt)
    if as_json:
        out = prediction_json(pred)
        out["fallbacks"] = [f.__dict__ for f in fallbacks]
        print(json.dumps(out))
    else:
        tables.prediction_table(pred, fallbacks)


def predict_pipelined(ctx: Context, strategy: str, opt: Optimizer, stages: int, micro_batches: int, schedule: str,
                      as_json: bool) -> None:
    """`dnnplan predict NET --pipeline S --micro-batches M`: each stage on its ranks with the
    uniform strategy (costmodel.pipeline)."""
    def stage(net, ranks: int, micro: int):
        strategies, _ = uniform_strategies(net, ranks, micro, strategy)
        return predict_step(net, micro, strategies, default_algorithms(net), ctx.machine, ctx.compute, opt)

    pred = predict_pipeline(ctx.network, ctx.batch, ctx.devices, stages, micro_batches, schedule, ctx.machine, stage)
    if as_json:
        print(json.dumps(pipeline_json(pred)))
    else:
        tables.pipeline_table(pred)


def predict_plan(path: str, profile: str | None, as_json: bool) -> None:
    """`dnnplan predict plan.yaml`: the plan's own strategies and algorithms, predicted now."""
    plan, net = read_plan(path)
    ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, profile, precision=plan.precision)
    pred = predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute,
                        Optimizer(plan.optimizer, plan.zero))
    if as_json:
        out = prediction_json(pred)
        out["plan"] = {"file": path, "recorded_step_s": plan.step_s}
        print(json.dumps(out))
    else:
        tables.prediction_table(pred)
        if plan.step_s and abs(plan.step_s - pred.step_s) > 1e-9 * plan.step_s:
            tables.console.print(f"the plan file recorded {plan.step_s:.6g} s; as written it predicts "
                                 f"{pred.step_s:.6g} s ({pred.step_s / plan.step_s:.4f}x)")
