"""`dnnplan machines`: the shipped machine models, or the figures of the ones named."""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer

from costmodel.machine.loading import DEFAULT_MACHINE, list_machines, load_machine
from dnnplan.options import ListJsonOpt
from dnnplan.render import tables
from networks.errors import DnnplanError

NamesArg = Annotated[Optional[list[str]], typer.Argument(
    help="Machines to detail (shipped names or machine YAML paths); none: list the shipped ones.",
    show_default=False)]


def machines(names: NamesArg = None, as_json: ListJsonOpt = False) -> None:
    """List the shipped machines, or every figure of the machines named.

    The list: devices per node, peak FLOP/s, memory, link latency and bandwidth. Named (shipped
    names or machine YAML paths): every figure the cost model prices with (peaks per number
    format, memory bandwidth, the efficiencies, the links).

    Pass one by name with --machine anywhere, or a path to your own machine YAML (docs/machines.md).
    """
    try:
        found = [load_machine(name) for name in names] if names else list_machines()
    except DnnplanError as err:  # a name given here is no file's field (a machine file's mistake keeps its file)
        if err.file is not None:
            raise
        raise DnnplanError(err.bare, hint=err.hint) from None
    rows = [tables.machine_row(m, m.name == DEFAULT_MACHINE) for m in found]
    if as_json:
        print(json.dumps(rows))
    elif names:
        for row in rows:
            tables.machine_details(row)
    else:
        tables.machines_table(rows)
