"""Every rich table the CLI prints. Numbers arrive in SI units; this module formats them."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from networks.analysis import NetworkSummary
from planner import fmt

# wide tables when piped (logs, CI); the terminal width otherwise
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def info_table(s: NetworkSummary) -> None:
    t = Table(title=f"{s.network}, batch {s.batch}", title_justify="left")
    for col in ("layer", "op", "output", "params", "fwd FLOPs", "bwd FLOPs", "W", "D", "activations"):
        t.add_column(col, justify="left" if col in ("layer", "op", "output") else "right")
    for layer, c in s.layers:
        t.add_row(layer.name, layer.op, fmt.shape((s.batch, *layer.out_shape)), fmt.count(layer.num_params),
                  fmt.count(c.flops_fwd), fmt.count(c.flops_bwd), fmt.count(c.step_work), str(c.step_depth),
                  fmt.nbytes(c.activation_bytes))
    console.print(t)
    console.print(f"[bold]{len(s.layers)} layers[/bold]  parameters {s.params:,}  "
                  f"MACs/sample {fmt.count(s.macs_per_sample)}  FLOPs/step {fmt.count(s.flops_fwd + s.flops_bwd)} "
                  f"(fwd {fmt.count(s.flops_fwd)}, bwd {fmt.count(s.flops_bwd)})  "
                  f"activations {fmt.nbytes(s.activation_bytes)}")


def networks_table(rows: list[dict]) -> None:
    t = Table(title="shipped networks (dnnplan info NAME)", title_justify="left")
    for col in ("name", "input", "layers", "parameters", "MACs/sample"):
        t.add_column(col, justify="left" if col in ("name", "input") else "right")
    for r in rows:
        t.add_row(r["name"], fmt.shape(r["input"]), str(r["layers"]), f"{r['params']:,}",
                  fmt.count(r["macs_per_sample"]))
    console.print(t)
