"""Output of `dnnplan predict --from FILE`: a launch configuration's prediction, as a summary for
people or one JSON object for scripts: what was read, the step by term, memory a device, MFU, what
dominates, and the options that do not change the prediction."""

from __future__ import annotations

import json

from rich.markup import escape

from costmodel.choices.training import DEFAULT_FRAMEWORK
from costmodel.step.breakdown import comm_parts, pipeline_terms, step_terms
from costmodel.step.pipeline import PipelinePrediction
from dnnplan.render import tables
from dnnplan.render.answer import comm_line, memory_json, memory_mfu_line, step_line, train_line
from executor.session.predict_launch import LaunchStep
from networks import durations
from planner.launch_import.formats import DESCRIPTIONS

#: what a predicted memory is: the bytes the framework allocates at the peak, not what its caching
#: allocator reserves on top (fragmentation, cached blocks), which the cost model does not price
ALLOCATED = "allocated at the peak (the caching allocator's reserve on top is not modelled)"


def launch(got: LaunchStep, as_json: bool, train=None, layers: bool = False) -> None:
    pred, config, plan = got.prediction, got.config, got.plan
    terms = pipeline_terms(pred) if isinstance(pred, PipelinePrediction) else step_terms(pred)
    dominant, share = max(terms, key=lambda t: t[1])
    if as_json:
        comm = dict(comm_parts(pred))  # as `dnnplan predict` names them
        print(json.dumps({
            "file": config.path, "framework": config.framework, "script": config.script, "network": got.network_ref,
            "network_from": got.named_by, "devices": plan.devices, "devices_from": config.devices_from,
            "machine": plan.machine, "machine_from": got.machine_from, "batch": plan.batch, "layout": layout_json(got),
            "step_s": pred.step_s, "step_breakdown_s": dict(terms), "dominant": dominant,
            "comm_exposed_s": comm["exposed"], "comm_overlapped_s": comm["overlapped"],
            "memory_peak_bytes": pred.memory_peak_bytes,
            "memory_allocated_bytes": pred.memory_allocated_bytes, "memory_reserved_bytes": pred.memory_reserved_bytes,
            **memory_json(pred.memory_peak_bytes, got.memory_limit_bytes), "mfu": got.mfu,
            "priced_under": plan.choices.framework, "written_step_s": got.written_step_s,
            "ignored": [{"option": i.option, "reason": i.reason} for i in config.ignored],
            **({"train": train.json()} if train is not None else {})}))
        return
    c = tables.console
    devices_from = "--devices" if config.devices is None else config.devices_from
    script = f" of {escape(config.script)}" if config.script and "read as" in config.script else ""
    c.print(f"[bold]{escape(config.path)}[/bold]: {DESCRIPTIONS[config.framework]}{script}; "
            f"{escape(got.network_ref)} ({escape(got.named_by)}) on {plan.devices} devices ({escape(devices_from)}) "
            f"of {escape(plan.machine)}" + ("" if got.machine_from == "--machine" else f" ({escape(got.machine_from)})"))
    c.print("layout: " + escape(layout_line(got)))
    c.print(step_line(pred.step_s, terms))
    if got.written_step_s is not None:
        c.print(escape(written_note(got)))
    line = comm_line(comm_parts(pred), plan.choices.overlap)
    if line:
        c.print(line)
    memory = memory_mfu_line(pred.memory_peak_bytes, got.memory_limit_bytes, got.mfu, pred.memory_allocated_bytes)
    # under a framework the line says reserved and allocated itself; the default prices the tensors alone
    c.print(memory.replace(" a device", " a device " + ALLOCATED, 1) if plan.choices.framework == DEFAULT_FRAMEWORK
            else memory)
    c.print(f"dominated by {dominant}: {share / pred.step_s:.0%} of the step" if pred.step_s > 0 else "")
    if train is not None:
        c.print(train_line(train, memory_json(pred.memory_peak_bytes, got.memory_limit_bytes)["memory_fits"]))
    by_reason: dict[str, list[str]] = {}
    for item in config.ignored:
        by_reason.setdefault(item.reason, []).append(item.option)
    if by_reason:
        c.print(f"ignored, not changing the prediction ({len(config.ignored)}): " + escape("; ".join(
            f"{', '.join(options)} ({reason})" for reason, options in by_reason.items())))
    if layers:  # a pipeline's: each stage's layers at one micro-batch
        stages = pred.stages if isinstance(pred, PipelinePrediction) else ()
        for stage in stages:
            tables.layer_table(stage.micro, f"stage {stage.index}: per layer, one micro-batch")
        if not stages:
            tables.layer_table(pred, "per layer" + (", one micro-batch" if pred.micro_batches > 1 else ""))


def layout_line(got: LaunchStep) -> str:
    """The layout in Megatron-Core's words, with the batch and the training choices."""
    config, plan = got.config, got.plan
    spec, choices = plan.pipeline, plan.choices
    data = plan.stage_ranks // (config.tensor * config.context)
    parts = [f"tensor {config.tensor}" + (" (sequence-parallel)" if config.sequence_parallel else ""),
             f"context {config.context}", f"expert {config.expert}", f"data {data}"]
    if config.stages > 1:
        parts.append(f"pipeline {config.stages} stages" + (f" x {config.chunks} chunks (interleaved 1F1B)"
                                                           if config.chunks > 1 else f" ({config.schedule})"))
    micro = spec.micro_batches if spec else 1
    parts.append(f"{micro} micro-batch{'es' if micro > 1 else ''} of {config.micro_batch} a data-parallel rank, "
                 f"global batch {plan.batch}")
    recompute = config.recompute if config.recompute != "full" or config.recompute_layers is None else \
        f"full, the first {config.recompute_layers} transformer layers of each chunk"
    kept = [what for what, on in (("FP8 parameters", choices.fp8_params and choices.precision == "fp8"),
                                  ("float32 gradients", choices.sharded_optimizer.grad_bytes)) if on]
    kept_as = f" with {' and '.join(kept)}" if kept else ""
    parts.append(f"{choices.precision}{kept_as}, {choices.optimizer}, ZeRO-{choices.zero}, overlap {choices.overlap}, "
                 f"recomputation {recompute}" + ("" if choices.framework == DEFAULT_FRAMEWORK
                                                 else f", priced under {choices.framework}"))
    return "; ".join(parts)


def written_note(got: LaunchStep) -> str:
    """The line saying the file's dnnplan line states another step than this prediction, and why."""
    return (f"note: the file's dnnplan line states {durations.seconds(got.written_step_s, 4)} a step; as read here it predicts "
            f"{durations.seconds(got.prediction.step_s, 4)}: the plan was priced with what is not given here (a kernel profile: "
            f"give the plan's --profile again; a framework file), or an earlier dnnplan wrote the file, whose options "
            f"this one reads otherwise or prices anew (the layout line above says how it was read: export the plan "
            f"again to train it as planned)")


def layout_json(got: LaunchStep) -> dict:
    config, plan = got.config, got.plan
    return {"tensor": config.tensor, "context": config.context, "expert": config.expert,
            "sequence_parallel": config.sequence_parallel, "stages": config.stages, "chunks": config.chunks,
            "schedule": plan.pipeline.schedule if plan.pipeline else config.schedule,
            "micro_batches": plan.pipeline.micro_batches if plan.pipeline else 1,
            # samples a micro-batch over all data-parallel ranks (as plan and predict's JSON give it),
            # and on one rank (the framework's own: Megatron-LM's --micro-batch-size)
            "micro_batch": plan.batch // (plan.pipeline.micro_batches if plan.pipeline else 1),
            "micro_batch_per_rank": config.micro_batch,
            "first_layers": list(plan.pipeline.first_layers) if plan.pipeline else [],
            "precision": plan.choices.precision, "fp8_params": plan.choices.fp8_params,
            "grad_fp32": plan.choices.grad_fp32, "optimizer": plan.choices.optimizer, "zero": plan.choices.zero,
            "overlap": plan.choices.overlap, "recompute": config.recompute,
            "recompute_layers": config.recompute_layers, "attention": plan.choices.attention or None}
