"""Plan files for the executor tests: a uniform strategy on a zoo network, or the plan `dnnplan predict --out`
writes, in a folder."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from typer.testing import CliRunner

from costmodel.frameworks.megatron import megatron_strategies
from costmodel.frameworks.uniform import uniform_strategies
from costmodel.step.pipeline import cut_at
from dnnplan.cli import app
from executor.session.step_choice import uniform_plan
from planner.plan.plan import PipelineSpec
from planner.plan.plan_file import write_plan
from profiler import context


def write_uniform_plan(folder, network: str, devices: int, batch: int, spec: str, machine: str = "local") -> str:
    ctx = context.resolve(network, devices, batch, machine)
    strategies, _ = uniform_strategies(ctx.network, devices, batch, spec)
    plan = uniform_plan(ctx, network, machine, strategies, spec)
    path = os.path.join(str(folder), f"{network}-{devices}-{spec}.yaml")
    write_plan(plan, path)
    return path


def predicted_plan(folder, net: str, ranks: int, tensor: int = 1, expert: int = 1) -> str:
    """The plan ``dnnplan predict NET -p RANKS -b 8 --machine dgx-a100 --optimizer momentum --precision fp32
    [--tensor] [--expert] --out`` writes (momentum and fp32: what the executor runs on the host; a network
    with attention on a GPU would default to Adam in bf16)."""
    path = folder / f"{Path(net).stem}-{ranks}-t{tensor}-e{expert}.yaml"
    args = ["predict", net, "-p", str(ranks), "-b", "8", "--machine", "dgx-a100", "--optimizer", "momentum",
            "--precision", "fp32", "--out", str(path)]
    args += ["--tensor", str(tensor)] if tensor > 1 else []
    args += ["--expert", str(expert)] if expert > 1 else []
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return str(path)


def pipelined_plan(folder: Path, ranks: int, stages: int, micro: int, schedule: str, tensor: int = 1,
                   firsts: tuple[str, ...] | None = None, batch: int = 8) -> str:
    """gpt-tiny at ``batch`` (``micro`` micro-batches, ``schedule``) cut into ``stages``, Megatron's layout of ``tensor`` inside each stage."""
    d = ranks // stages
    ctx = context.resolve("gpt-tiny", d, batch // micro, "dgx-a100")
    strategies, fallbacks = megatron_strategies(ctx.network, d, batch // micro, tensor)
    assert not fallbacks
    if firsts is None:
        firsts = tuple(layers[0].name for layers in
                       (cut_at(ctx.network, ("embed", "h1.ln1")) if stages == 2 else [ctx.network.layers]))
    plan = dataclasses.replace(uniform_plan(ctx, "gpt-tiny", "dgx-a100", strategies, "megatron"), devices=ranks,
                               batch=batch, pipeline=PipelineSpec(stages, micro, schedule, firsts))
    path = folder / f"pp-{ranks}-{stages}-{micro}-{schedule}-t{tensor}-b{batch}.yaml"
    write_plan(plan, str(path))
    return str(path)
