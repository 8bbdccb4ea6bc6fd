"""A plan written as a framework's file, for `dnnplan export` and `dnnplan plan --emit`: one
exporter call (planner.export) and its rendering (dnnplan.render.export)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from costmodel.machine.loading import load_machine
from dnnplan.render import export as render
from networks.errors import DnnplanError, short
from planner.export import deepspeed as deepspeed_export, megatron as megatron_export, torchtitan as torchtitan_export
from planner.export.deepspeed import CONFIG, DEEPSPEED_SOURCE, SCRIPT, deepspeed_config
from planner.export.megatron import MEGATRON_SOURCE, environment, megatron_args
from planner.export.nearest import choices_weighed, nearest_plan
from planner.export.torchtitan import TORCHTITAN_SOURCE, flavor_note, torchtitan_config
from planner.plan.plan import Plan

if TYPE_CHECKING:  # the executor's session modules are loaded by the commands that run them
    from executor.session.export_nearest import NearestExport

#: the frameworks `--to` and `--emit` name
FRAMEWORKS = ("megatron", "torchtitan", "deepspeed")


#: the ZeRO stages each framework runs (its exporter's ``ZERO_RUN``)
ZERO_RUN = {"megatron": megatron_export.ZERO_RUN, "torchtitan": torchtitan_export.ZERO_RUN,
            "deepspeed": deepspeed_export.ZERO_RUN}


def weighed_for(to: str) -> tuple[tuple[int, ...], str] | None:
    """The ZeRO stages `dnnplan plan --emit TO` weighs where `--zero` is not given, and why, when the
    framework runs fewer than all four (torchtitan has no ZeRO-1); None: every stage."""
    runs = ZERO_RUN[to]
    if set(runs) >= {0, 1, 2, 3}:
        return None
    out = [z for z in (0, 1, 2, 3) if z not in runs]
    it = "it" if len(out) == 1 else "them"
    return runs, (f"ZeRO-{', ZeRO-'.join(map(str, out))} not weighed: {to} does not run {it} (--emit {to}; "
                  f"--zero to plan {it} anyway)")


def check_framework(name: str, flag: str) -> None:
    """One line for a framework no exporter writes."""
    if name not in FRAMEWORKS:
        raise DnnplanError(f"unknown {flag} {short(name)}", hint=f"use {', '.join(FRAMEWORKS)}")


def exported(to: str, made: Plan, net, plan: str, out: str | None) -> tuple[str, dict, str, str | None]:
    """``made`` of ``net`` for framework ``to`` (``plan``: where it came from, for the file's comment;
    ``out``: where it is written): (the file's text, its JSON, what it holds, a launcher line to
    print after writing it); the exporter's refusal as it is."""
    # the plan named from the written file's folder: found again wherever the two are read from
    named = plan if out is None or not os.path.isfile(plan) else \
        os.path.relpath(os.path.abspath(plan), os.path.dirname(os.path.abspath(out)))
    return {"megatron": megatron, "torchtitan": torchtitan, "deepspeed": deepspeed}[to](made, net, named, out)


def nearest_runs(to: str, made: Plan, net) -> bool:
    """Whether ``--nearest`` may write ``made`` for framework ``to``: one of its nearest plans
    (unpriced, one a layout weighed) is one the exporter writes, so a refusal may point to it."""
    machine = load_machine(made.machine)
    for weighed, whole in choices_weighed(made, net, to):
        try:
            got = nearest_plan(made, net, to, machine, weighed, whole)
            exported(to, got.plan, net, "", None)
        except DnnplanError:
            continue
        if got.changes:
            return True
    return False


def megatron(made: Plan, net, plan: str, out: str | None) -> tuple[str, dict, str, str | None]:
    """(the file's text, its JSON, what it holds, a launcher line to print after writing it)."""
    args = megatron_args(made, net)
    env = environment(args)
    return (render.launch_script(made, plan, "pretrain_gpt.py", args, MEGATRON_SOURCE, tuple(env)),
            {"args": args, "environment": env}, f"{len(args)} arguments", None)


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


def nearest_json(near: "NearestExport") -> dict:
    """What --nearest changed, and both plans' predicted step and memory (none when nothing changed)."""
    if not near.changes:
        return {"changes": []}
    return {"changes": list(near.changes),
            "original": {"step_s": near.original.step_s, "memory_peak_bytes": near.original.memory_peak_bytes},
            "nearest": {"step_s": near.nearest.step_s, "memory_peak_bytes": near.nearest.memory_peak_bytes}}
