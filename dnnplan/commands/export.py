"""`dnnplan export`: a plan as a framework's launch command or configuration. Parse, one library call, render."""

from __future__ import annotations

import json

from costmodel.choices.training import DEFAULT_FRAMEWORK
from costmodel.machine.loading import load_machine
from dnnplan.export_file import check_framework, exported, nearest_json
from dnnplan.options import ExportJsonOpt, ExportOutOpt, ExportToOpt, ForceOpt, NearestOpt, PlanArg
from dnnplan.output import check_outputs
from dnnplan.render import export as render
from dnnplan.render.terminal.messages import warn
from executor.session.export_nearest import as_priced_now, nearest_export
from networks.errors import DnnplanError
from networks.loader import zoo_names
from networks.writing import write_file
from planner.export.megatron import MEGATRON_ROTARY_BASE
from planner.export.megatron_model import rotary_base_unstated
from planner.export.torchtitan import default_rotary_base
from planner.plan.plan_file import read_plan


def export(plan: PlanArg, to: ExportToOpt, out: ExportOutOpt = None, force: ForceOpt = False,
           as_json: ExportJsonOpt = False, nearest: NearestOpt = False) -> None:
    """Write a plan for the framework you run: Megatron-LM's arguments, torchtitan's TOML or DeepSpeed's JSON.

    Each option is named as that framework's release names it (docs/export.md cites the versions).
    megatron: torchrun then pretrain_gpt.py, one flag a line: the tensor, pipeline (and interleaving,
    or the stage cut), context and expert degrees, sequence parallelism, the micro- and global
    batch, the model's shape, recomputation, precision, the optimiser and its ZeRO stage
    (distributed optimiser or Megatron-FSDP), overlap and the MoE dispatcher. torchtitan: the
    model, training, parallelism (FSDP or DDP, tensor, pipeline with its cut, context and expert
    degrees), activation_checkpoint, compile and quantize.linear.float8 sections as torchtitan 0.2
    reads them. deepspeed: ds_config.json (batch, accumulation, ZeRO stage, overlap,
    precision, optimiser) and the deepspeed launcher line; --out writes the JSON itself.

    It prints the file after a comment with the plan's predicted step, or writes it to --out;
    --json prints {"framework": ..., "args" or "config": ...}. What the framework cannot run as
    planned is refused in one line naming the layer: a network that is not a transformer (a
    convolution; DeepSpeed takes a CNN's data-parallel plan), layers whose tensor, context or expert
    degree differs (a per-layer hybrid), a stage cut inside a transformer layer, a schedule,
    recomputation, precision, optimiser or ZeRO stage the framework lacks; DeepSpeed's tensor and
    pipeline parallelism are set in the training script, not its JSON (docs/export.md). With
    --nearest, such a plan is made into the closest one the framework runs (one layout on every
    layer: the one most transformer layers take, or another their layers take in part where it is
    faster and fits; the framework's recomputation, schedule and ZeRO), each change said on stderr
    with both plans' predicted step and memory; what no change reaches is still refused.

    Tiny-GQA on 4 GPUs, tensor 2 with sequence parallelism: dnnplan predict tiny-gqa -p 4 -b 8 --tensor 2
    --sequence-parallel --machine dgx-a100 --out plan.yaml, then dnnplan export plan.yaml --to megatron.
    Tiny-Llama under FSDP on 16 H100s: dnnplan predict tiny-llama -p 16 -b 32 --machine dgx-h100
    --precision bf16 --optimizer adam --zero 3 --out fsdp.yaml, then dnnplan export fsdp.yaml --to
    torchtitan (or --to deepspeed --out ds_config.json). A plan the planner made, on the layout
    Megatron-LM runs nearest to it: dnnplan plan llama3-70b -p 64 --machine dgx-h100 --out plan.yaml,
    then dnnplan export plan.yaml --to megatron --nearest --out train.sh.
    """
    check_framework(to, "--to")
    check_outputs({"--out": out}, force, reads=(plan,))
    made, net = read_plan(plan)
    near = None
    try:
        if nearest:
            near = nearest_export(made, net, to, lambda made: exported(to, made, net, plan, out))
            made = near.plan if near.changes else as_priced_now(made, net)
        else:
            made = as_priced_now(made, net)  # the header's step as the plan is priced now (an edited file's)
        text, data, count, launch = exported(to, made, net, plan, out)
    except DnnplanError as err:
        raise err.located(file=plan) from None
    if out:
        write_file(out, text, replace=force)
    if near is not None and near.changes and not as_json:
        render.nearest_lines(near)
    elif near is not None and not near.changes:  # the plan runs as it is: the flag is said to change nothing
        warn(f"--nearest changes nothing: {to} runs {plan} as it is")
    limit = over_memory(made)
    if limit is not None and not as_json:
        render.over_memory_line(made, limit)
    if as_json:
        print(json.dumps({"framework": to, **data, "out": out, "memory_peak_bytes": made.memory_peak_bytes,
                          "memory_fits": limit is None,
                          **({"nearest": nearest_json(near)} if near is not None else {})}))
    elif out:
        render.wrote_line(out, to, count, launch)
    else:
        render.show(text)
    if to != "deepspeed" and rotary_base_unstated(net) and made.network not in zoo_names():
        base = default_rotary_base(net) if to == "torchtitan" else MEGATRON_ROTARY_BASE
        warn(f"{net.name} states no rotary_base: the launch trains at {to}'s default base, {base} (give its "
             "attention rotary_base, RoPE's theta, or import its config again, where the model's differs)")
    if to == "deepspeed" and not as_json and any(layer.op == "batchnorm2d" for layer in net.layers):
        render.batch_norm_line(made.choices.batch_norm, out)
    if to == "deepspeed" and out and not as_json and made.choices.framework != DEFAULT_FRAMEWORK:
        render.framework_line(made.choices.framework, out)  # the JSON has no dnnplan line to name it


def over_memory(plan) -> float | None:
    """The device memory of the plan's machine where the plan's predicted peak is over it, else None
    (a layout predicted as given, `dnnplan predict --out`, may not fit: the framework would run out
    of memory)."""
    try:
        limit = load_machine(plan.machine).device.mem_capacity_bytes
    except DnnplanError:
        return None  # a machine file that no longer reads: reading the plan names it elsewhere
    return limit if plan.memory_peak_bytes > limit * (1 + 1e-9) else None
