"""The dnnplan command line: thin commands, each one library call and one render.

Rendering lives in :mod:`planner.report`; the work lives in the packages.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from networks.analysis import summarize, summary_json
from networks.errors import DnnplanError
from networks.loader import load_network, zoo_names
from planner import context, report
from planner.app import app, run

NetworkArg = Annotated[str, typer.Argument(help="A zoo network name (see `dnnplan networks`) or a path to a "
                                                "network spec YAML (docs/network-spec.md).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def positive(name: str, value: int) -> int:
    if value < 1:
        raise DnnplanError(f"--{name} must be a positive integer, got {value}")
    return value


@app.command()
def info(network: NetworkArg,
         batch: Annotated[int, typer.Option("--batch", "-b", help="Samples per training step.")] = 1,
         as_json: JsonOpt = False) -> None:
    """Show a network layer by layer: shapes, parameters, FLOPs, work and depth, activation memory.

    Work (W) and depth (D) follow the work-depth model of Ben-Nun & Hoefler (reference/004,
    Tables 4 and 6), summed over forward, backward-data and backward-weights; FLOPs count a
    multiply-accumulate as two.
    """
    summary = summarize(load_network(network), positive("batch", batch))
    if as_json:
        print(json.dumps(summary_json(summary)))
    else:
        report.info_table(summary)


@app.command()
def networks(as_json: JsonOpt = False) -> None:
    """List the shipped networks (the zoo) with their parameter counts."""
    rows = []
    for name in zoo_names():
        net = load_network(name)
        first = net.inputs[0]
        rows.append({"name": name, "layers": len(net.layers), "params": net.num_params,
                     "input": [*first.shape], "macs_per_sample": summarize(net, 1).macs_per_sample})
    if as_json:
        print(json.dumps(rows))
    else:
        report.networks_table(rows)


DevicesOpt = Annotated[int, typer.Option("--devices", "-p", help="Number of devices (ranks) to split over.")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Global batch per training step "
                                                 "\\[default: 32 per device].")]
MachineOpt = Annotated[Optional[str], typer.Option("--machine", "-m", help="A shipped machine (see `dnnplan "
                                                   "machines`) or a machine YAML path \\[default: dgx-a100].")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", help="A profile table (from `dnnplan profile`) "
                                                   "to time kernels with instead of the datasheet roofline.")]


@app.command()
def machines(as_json: JsonOpt = False) -> None:
    """List the shipped machines: devices per node, peak FLOP/s, memory, link latency and bandwidth.

    Pass one by name with --machine anywhere, or a path to your own machine YAML (docs/machines.md).
    """
    from costmodel.files import DEFAULT_MACHINE, list_machines
    rows = [report.machine_row(m, m.name == DEFAULT_MACHINE) for m in list_machines()]
    if as_json:
        print(json.dumps(rows))
    else:
        report.machines_table(rows)


@app.command()
def predict(network: NetworkArg,
            devices: DevicesOpt = 1,
            strategy: Annotated[str, typer.Option("--strategy", "-s", help="Uniform strategy for every layer: "
                                                  "data, filter, channel, spatial, or degrees like N=4,F=2.")] = "data",
            batch: BatchOpt = None, machine: MachineOpt = None, profile: ProfileOpt = None,
            as_json: JsonOpt = False) -> None:
    """Predict one training step under one strategy applied to every layer, or evaluate a plan file.

    Given a plan file (from `dnnplan plan --out`, possibly edited by hand) instead of a network,
    predicts that plan on the network, batch, devices and machine it names.

    Layers that cannot take the strategy fall back to data parallelism, and the output says which.
    The step is forward + backward + gradient synchronisation + update with no overlap
    (docs/costmodel.md).
    """
    from costmodel.step import predict_step, prediction_json
    from costmodel.uniform import uniform_strategies
    from planner.plan_file import is_plan_file
    if is_plan_file(network):
        return predict_plan(network, profile, as_json)
    ctx = context.resolve(network, devices, batch, machine, profile)
    strategies, fallbacks = uniform_strategies(ctx.network, devices, ctx.batch, strategy)
    algorithms = {l.name: "im2col" for l in ctx.network.layers if l.op == "conv2d"}
    pred = predict_step(ctx.network, ctx.batch, strategies, algorithms, ctx.machine, ctx.compute)
    if as_json:
        out = prediction_json(pred)
        out["fallbacks"] = [f.__dict__ for f in fallbacks]
        print(json.dumps(out))
    else:
        report.prediction_table(pred, fallbacks)


def predict_plan(path: str, profile: str | None, as_json: bool) -> None:
    """`dnnplan predict plan.yaml`: the plan's own strategies and algorithms, predicted now."""
    from costmodel.step import predict_step, prediction_json
    from planner.plan_file import read_plan
    plan, net = read_plan(path)
    ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, profile)
    pred = predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute)
    if as_json:
        out = prediction_json(pred)
        out["plan"] = {"file": path, "recorded_step_s": plan.step_s}
        print(json.dumps(out))
    else:
        report.prediction_table(pred)
        if plan.step_s and abs(plan.step_s - pred.step_s) > 1e-9 * plan.step_s:
            report.console.print(f"the plan file recorded {plan.step_s:.6g} s; as written it predicts "
                                 f"{pred.step_s:.6g} s ({pred.step_s / plan.step_s:.4f}x)")


import planner.cli_plan  # noqa: F401,E402 - registers `dnnplan plan`
import planner.cli_profile  # noqa: E402,F401  (registers profile, profile-comm)
import planner.cli_execute  # noqa: E402,F401  - registers `execute` and `validate`


def main() -> None:
    run()
