"""The dnnplan command line: thin commands, each one library call and one render.

Rendering lives in :mod:`planner.report`; the work lives in the packages.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from networks.analysis import summarize, summary_json
from networks.errors import DnnplanError
from networks.loader import load_network, zoo_names
from planner import report
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


def main() -> None:
    run()
