"""`dnnplan predict NET --zero 3 --runtime deepspeed`: DeepSpeed's ZeRO-3 step (costmodel.frameworks.deepspeed)."""

from __future__ import annotations

import json

from costmodel.frameworks.deepspeed import zero3_step
from costmodel.choices.optimizer import Optimizer
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from dnnplan.render import tables
from networks.errors import DnnplanError, short
from profiler.context import Context

RUNTIMES = ("dnnplan", "deepspeed")


def check_runtime(runtime: str, opt: Optimizer, tensor: int, pipeline: int, sequence_parallel: bool,
                  strategy: str) -> None:
    """One line for a runtime the options cannot run under."""
    if runtime not in RUNTIMES:
        raise DnnplanError(f"unknown --runtime {short(runtime)}", hint="use dnnplan or deepspeed")
    if runtime == "deepspeed" and (opt.zero != 3 or tensor > 1 or pipeline > 1 or sequence_parallel
                                   or strategy != "data"):
        raise DnnplanError("--runtime deepspeed prices DeepSpeed's ZeRO-3 over every device, without model parallelism",
                           hint="give --zero 3, and no --tensor, --pipeline, --sequence-parallel or --strategy")


def predict_deepspeed(ctx: Context, algorithms: dict[str, str], opt: Optimizer, micro_batches: int,
                      recompute: str, as_json: bool) -> None:
    """DeepSpeed's ZeRO-3 step of ``ctx``'s network: every layer split over the samples of each of
    ``micro_batches`` micro-batches, priced by costmodel.frameworks.deepspeed."""
    if ctx.batch % micro_batches:
        raise DnnplanError(f"--micro-batches {micro_batches} do not divide the batch {ctx.batch}",
                           hint="give a divisor of the batch")
    micro = ctx.batch // micro_batches
    strategies, fallbacks = uniform_strategies(ctx.network, ctx.devices, micro, "data")
    compute = predict_step(ctx.network, micro, strategies, algorithms, ctx.machine, ctx.compute, opt,
                           checkpoints=recompute == "full")
    step = zero3_step(ctx.network, ctx.devices, micro_batches, compute, ctx.machine, recompute != "none")
    out = {"runtime": "deepspeed", "network": ctx.network.name, "devices": ctx.devices, "batch": ctx.batch,
           "micro_batches": micro_batches, "step_s": step.step_s, "per_micro_s": step.per_micro_s,
           "fwd_compute_s": step.fwd_compute_s, "bwd_compute_s": step.bwd_compute_s,
           "gather_s": step.gather_s, "gathers_in_backward": step.gathers_in_backward,
           "reduce_scatter_s": step.reduce_scatter_s, "update_s": step.update_s,
           "exposed_comm_s": step.exposed_comm_s, "memory_peak_bytes": step.memory_peak_bytes,
           "fallbacks": [f.__dict__ for f in fallbacks]}
    if as_json:
        print(json.dumps(out))
        return
    c = tables.console
    c.print(f"{ctx.network.name}: batch {ctx.batch} on {ctx.devices} devices of {ctx.machine.name}, DeepSpeed ZeRO-3, "
            f"{micro_batches} micro-batch(es) of {micro}")
    c.print(f"step {step.step_s:.4g} s = {micro_batches} x (max(forward {step.fwd_compute_s:.4g} s, gathers "
            f"{step.gather_s:.4g} s) + max(backward {step.bwd_compute_s:.4g} s, {step.gathers_in_backward} x gathers) "
            f"+ reduce-scatters {step.reduce_scatter_s:.4g} s) + update {step.update_s:.4g} s")
    c.print(f"communication not hidden by compute {step.exposed_comm_s:.4g} s; peak memory "
            f"{step.memory_peak_bytes / 2 ** 30:.2f} GiB per device (docs/costmodel.md, DeepSpeed ZeRO-3)")
    if fallbacks:
        c.print(f"{len(fallbacks)} layer(s) could not split the micro-batch over every device and run "
                f"data parallel on fewer, first {fallbacks[0].layer}")
