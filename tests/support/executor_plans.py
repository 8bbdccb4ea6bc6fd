"""Plan files for the executor tests: a uniform strategy on a zoo network, written to a folder."""

from __future__ import annotations

import os

from costmodel.frameworks.uniform import uniform_strategies
from executor.session.step_choice import uniform_plan
from planner.plan.plan_file import write_plan
from profiler import context


def write_uniform_plan(folder, network: str, devices: int, batch: int, spec: str, machine: str = "local") -> str:
    ctx = context.resolve(network, devices, batch, machine)
    strategies, _ = uniform_strategies(ctx.network, devices, batch, spec)
    plan = uniform_plan(ctx, network, machine, strategies, spec)
    path = os.path.join(str(folder), f"{network}-{devices}-{spec}.yaml")
    write_plan(plan, path)
    return path
