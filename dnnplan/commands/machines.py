"""`dnnplan machines`: the shipped machine models."""

from __future__ import annotations

import json

from costmodel.machine.loading import DEFAULT_MACHINE, list_machines
from dnnplan.options import JsonOpt
from dnnplan.render import tables


def machines(as_json: JsonOpt = False) -> None:
    """List the shipped machines: devices per node, peak FLOP/s, memory, link latency and bandwidth.

    Pass one by name with --machine anywhere, or a path to your own machine YAML (docs/machines.md).
    """
    rows = [tables.machine_row(m, m.name == DEFAULT_MACHINE) for m in list_machines()]
    if as_json:
        print(json.dumps(rows))
    else:
        tables.machines_table(rows)
