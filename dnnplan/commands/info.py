"""`dnnplan info`: a network layer by layer."""

from __future__ import annotations

import json

from dnnplan.options import JsonOpt, NetworkArg, SamplesOpt
from dnnplan.render import tables
from networks.analysis import summarize, summary_json
from networks.loader import load_network


def info(network: NetworkArg, batch: SamplesOpt = 1, as_json: JsonOpt = False) -> None:
    """Show a network layer by layer: shapes, parameters, FLOPs, work and depth, activation memory.

    Work (W) and depth (D) follow the work-depth model of Ben-Nun & Hoefler, "Demystifying
    Parallel and Distributed Deep Learning" (2019), Tables 4 and 6, summed over forward,
    backward-data and backward-weights; FLOPs count a multiply-accumulate as two.
    """
    summary = summarize(load_network(network), batch)
    if as_json:
        print(json.dumps(summary_json(summary)))
    else:
        tables.info_table(summary)
