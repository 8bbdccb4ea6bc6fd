"""Plan files for the executor tests: a uniform strategy on a zoo network, written to a folder."""

from __future__ import annotations

import os


def write_uniform_plan(folder, network: str, devices: int, batch: int, spec: str, machine: str = "local") -> str:
    from costmodel.uniform import uniform_strategies
    from planner import context
    from planner.cli_execute import _plan_from
    from planner.plan_file import write_plan
    ctx = context.resolve(network, devices, batch, machine)
    strategies, _ = uniform_strategies(ctx.network, devices, batch, spec)
    convs = {l.name: "im2col" for l in ctx.network.layers if l.op == "conv2d"}
    plan = _plan_from(ctx, network, machine, strategies, convs, spec)
    path = os.path.join(str(folder), f"{network}-{devices}-{spec}.yaml")
    write_plan(plan, path)
    return path
