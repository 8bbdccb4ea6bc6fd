"""`dnnplan export`: a plan as a framework's launch command or configuration. Parse, one library call, render."""

from __future__ import annotations

import json

from costmodel.machine.loading import load_machine
from dnnplan.options import ExportOutOpt, ExportToOpt, ForceOpt, JsonOpt, PlanArg
from dnnplan.output import check_outputs
from dnnplan.render import export as render
from networks.errors import DnnplanError, short
from networks.writing import write_file
from planner.export.deepspeed import CONFIG, DEEPSPEED_SOURCE, SCRIPT, deepspeed_config
from planner.export.megatron import MEGATRON_SOURCE, megatron_args
from planner.export.torchtitan import TORCHTITAN_SOURCE, flavor_note, torchtitan_config
from planner.plan.plan import Plan
from planner.plan.plan_file import read_plan

#: the frameworks `--to` names
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


def export(plan: PlanArg, to: ExportToOpt, out: ExportOutOpt = None, force: ForceOpt = False,
           as_json: JsonOpt = False) -> None:
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
    pipeline parallelism are set in the training script, not its JSON (docs/export.md).

    Tiny-GQA on 4 GPUs, tensor 2 with sequence parallelism: dnnplan predict tiny-gqa -p 4 -b 8 --tensor 2
    --sequence-parallel --machine dgx-a100 --out plan.yaml, then dnnplan export plan.yaml --to megatron.
    Tiny-Llama under FSDP on 16 H100s: dnnplan predict tiny-llama -p 16 -b 32 --machine dgx-h100
    --precision bf16 --optimizer adam --zero 3 --out fsdp.yaml, then dnnplan export fsdp.yaml --to
    torchtitan (or --to deepspeed --out ds_config.json).
    """
    if to not in FRAMEWORKS:
        raise DnnplanError(f"unknown --to {short(to)}", hint=f"use {', '.join(FRAMEWORKS)}")
    check_outputs({"--out": out}, force)
    made, net = read_plan(plan)
    try:
        written = {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}[to](made, net, plan, out)
    except DnnplanError as err:
        raise err.located(file=plan) from None
    text, data, count, launch = written
    if out:
        write_file(out, text)
    if as_json:
        print(json.dumps({"framework": to, **data, "out": out}))
    elif out:
        render.wrote_line(out, to, count, launch)
    else:
        render.show(text)


def megatron(made: Plan, net, plan: str, out: str | None) -> tuple[str, dict, str, str | None]:
    """(the file's text, its JSON, what it holds, a launcher line to print after writing it)."""
    args = megatron_args(made, net)
    return (render.launch_script(made, plan, "pretrain_gpt.py", args, MEGATRON_SOURCE), {"args": args},
            f"{len(args)} arguments", None)


def torchtitan(made: Plan, net, plan: str, out: str | None) -> tuple[str, dict, str, str | None]:
    sections = torchtitan_config(made, net)
    text = render.torchtitan_toml(made, plan, sections, TORCHTITAN_SOURCE, flavor_note(net))
    return text, {"config": sections}, f"{sum(map(len, sections.values()))} keys", None


def deepspeed(made: Plan, net, plan: str, out: str | None) -> tuple[str, dict, str, str | None]:
    config = deepspeed_config(made, net)
    launcher = render.deepspeed_launcher(made.devices, devices_per_node(made.machine), out or CONFIG, SCRIPT)
    text = render.deepspeed_json(config) if out else render.deepspeed_script(made, plan, config, DEEPSPEED_SOURCE,
                                                                              launcher, CONFIG)
    return text, {"config": config, "launch": launcher}, f"{len(config)} keys", launcher


def devices_per_node(machine: str) -> int | None:
    """The plan's machine's devices a node, or None when its file is not at hand."""
    try:
        return load_machine(machine).devices_per_node
    except DnnplanError:
        return None
