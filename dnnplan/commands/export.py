"""`dnnplan export`: a plan as a framework's launch command. Parse, one library call, render."""

from __future__ import annotations

import json

from dnnplan.options import ExportOutOpt, ExportToOpt, ForceOpt, JsonOpt, PlanArg
from dnnplan.output import check_outputs
from dnnplan.render import export as render
from networks.errors import DnnplanError, short
from networks.writing import write_file
from planner.export.megatron import MEGATRON_SOURCE, megatron_args
from planner.plan.plan_file import read_plan

#: the frameworks `--to` will name, and those it names now
PLANNED = ("torchtitan", "deepspeed")
FRAMEWORKS = ("megatron",)


def export(plan: PlanArg, to: ExportToOpt, out: ExportOutOpt = None, force: ForceOpt = False,
           as_json: JsonOpt = False) -> None:
    """Write a plan as the command that launches it in a framework you run: Megatron-LM's pretrain_gpt.py.

    The plan's layout becomes the framework's own flags, each named as Megatron-LM's argument parser
    names it: the tensor, pipeline (and interleaving, or the stage cut), context and expert degrees,
    sequence parallelism, the micro- and global batch, the model's shape, recomputation, precision,
    the optimiser and its ZeRO stage (distributed optimiser or Megatron-FSDP), overlap and the MoE
    dispatcher. It prints a shell command, torchrun then one flag a line, after a comment with the
    plan's predicted step, or writes it to --out; --json prints {"framework": ..., "args": [...]}.

    What Megatron-LM cannot run as planned is refused in one line naming the layer: a network that is
    not a transformer (a convolution), layers whose tensor, context or expert degree differs (a
    per-layer hybrid), a stage cut inside a transformer layer, the GPipe schedule, recomputation of
    part of a transformer layer. The data, tokenizer and checkpoint arguments are left to you
    (docs/export.md).

    Tiny-GQA on 4 GPUs, tensor 2 with sequence parallelism: dnnplan predict tiny-gqa -p 4 -b 8 --tensor 2
    --sequence-parallel --machine dgx-a100 --out plan.yaml, then dnnplan export plan.yaml --to megatron
    """
    if to not in FRAMEWORKS:
        raise DnnplanError(f"--to {short(to)}: not yet: megatron only" if to in PLANNED
                           else f"unknown --to {short(to)}", hint="use --to megatron")
    check_outputs({"--out": out}, force)
    made, net = read_plan(plan)
    try:
        args = megatron_args(made, net)
    except DnnplanError as err:
        raise err.located(file=plan) from None
    text = render.launch_script(made, plan, "pretrain_gpt.py", args, MEGATRON_SOURCE)
    if out:
        write_file(out, text)
    if as_json:
        print(json.dumps({"framework": to, "args": args, "out": out}))
    elif out:
        render.wrote_line(out, to, len(args))
    else:
        render.show(text)
