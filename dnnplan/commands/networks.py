"""`dnnplan networks`: the shipped zoo."""

from __future__ import annotations

import json

from dnnplan.options import ListJsonOpt
from dnnplan.render import tables
from networks.analysis import summarize
from networks.loader import load_network, zoo_names


def zoo_rows() -> list[dict]:
    """One row per shipped network: name, layers, parameters, input shape, MACs per sample."""
    rows = []
    for name in zoo_names():
        net = load_network(name)
        rows.append({"name": name, "layers": len(net.layers), "params": net.num_params,
                     "input": [*net.inputs[0].shape], "macs_per_sample": summarize(net, 1).macs_per_sample})
    return rows


def networks(as_json: ListJsonOpt = False) -> None:
    """List the shipped networks (the zoo) with their parameter counts.

    Each name is a NETWORK the other commands take (dnnplan info gpt2, dnnplan plan llama3-8b -p 64
    --machine dgx-h100); a spec of your own (YAML), a Hugging Face config.json or an ONNX file is
    named by its path instead. --json prints the rows as one JSON array.
    """
    rows = zoo_rows()
    if as_json:
        print(json.dumps(rows))
    else:
        tables.networks_table(rows)
