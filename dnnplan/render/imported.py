"""What `dnnplan import` says once it has written a spec."""

from __future__ import annotations

from dnnplan.render.terminal.console import Console

from networks.ir import Network
from networks.writing import standard_stream

console = Console(highlight=False, soft_wrap=True)


def imported_line(net: Network, source: str, out: str) -> None:
    """One line: the file written, the network's name, its layers and parameters, and its source
    (none after the output itself: ``--out /dev/stdout``)."""
    if standard_stream(out):
        return
    console.print(f"wrote {out}: {net.name}, {len(net.layers)} layers, {net.num_params:,} parameters "
                  f"(from {source})", markup=False, emoji=False)
