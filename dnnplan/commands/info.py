"""`dnnplan info`: a network layer by layer."""

from __future__ import annotations

import json

from dnnplan.options import JsonOpt, NetworkArg, SamplesOpt, SeqOpt
from dnnplan.render import tables
from networks.analysis import summarize, summary_json
from networks.loader import load_network


def info(network: NetworkArg, batch: SamplesOpt = 1, seq: SeqOpt = None, as_json: JsonOpt = False) -> None:
    """Show a network layer by layer: shapes, parameters, FLOPs, work and depth, activation memory.

    Work (W) and depth (D) follow the work-depth model of Ben-Nun & Hoefler, "Demystifying
    Parallel and Distributed Deep Learning" (2019), Tables 4 and 6, summed over forward,
    backward-data and backward-weights; FLOPs count a multiply-accumulate as two.

    --seq sets a language model's tokens per sequence (a zoo spec's, or an imported config's):
    dnnplan info llama3-8b --seq 4096
    """
    summary = summarize(load_network(network, seq), batch)
    if as_json:
        print(json.dumps(summary_json(summary)))
    else:
        tables.info_table(summary)
