"""Every rich table the CLI prints. Numbers arrive in SI units; this module formats them."""

from __future__ import annotations

import sys

from dnnplan.render.terminal.console import Console
from rich.markup import escape
from rich.table import Table

from costmodel.machine.model import EFFICIENCY_CLASSES
from costmodel.step.breakdown import comm_parts, pipeline_terms, step_terms
from dnnplan.render import fmt
from dnnplan.render.answer import comm_line, memory_mfu_line, mfu_note, step_line
from networks.analysis import NetworkSummary

#: every table and line fits this many columns (cells wrap at spaces, never cut): a terminal's
#: width up to it, and it when piped (logs, CI)
WIDTH = 120
#: piped, a sentence stays on one line (a log is searched line by line: a sentence broken at 120
#: columns, mid-phrase, with a trailing space, is missed); a table keeps the width
console = Console(highlight=False, width=min(WIDTH, Console().width) if sys.stdout.isatty() else WIDTH,
                  soft_wrap=not sys.stdout.isatty())


MEMORY_WORDS = {"weights": "weights", "grads": "gradients", "master": "master weights",
                "optimizer": "optimiser state", "fp8": "FP8 weight copies and scaling",
                "activations": "activations kept",
                "transient": "largest transient (workspace, gradients in flight)",
                "framework": "the framework's own (CUDA context, communicator buffers, allocator reserve)"}


def memory_line(parts: dict[str, int]) -> str:
    """The peak per device by what holds it, the parts that are zero left out."""
    return "memory per device: " + ", ".join(f"{MEMORY_WORDS[k]} {fmt.nbytes(v)}" for k, v in parts.items() if v)


def pipeline_table(pred, limit_bytes: float | None = None, mfu: float | None = None,
                   machine: str | None = None) -> None:
    """A pipelined prediction (costmodel.step.pipeline.PipelinePrediction): one row per stage; with
    ``limit_bytes`` (a device's memory) a peak over it said not to fit, with ``mfu`` the step's model
    FLOP utilisation, and with ``machine`` its name in the title (as an unpipelined step's says it)."""
    on = f"{pred.devices} x {machine}" if machine else f"{pred.devices} devices"
    t = Table(title=f"{pred.network}: batch {pred.batch} on {on}, {fmt.many(len(pred.stages), 'stage')}, "
                    f"{fmt.many(pred.micro_batches, 'micro-batch')}, {pred.schedule}"
                    + (f" ({pred.chunks} chunks a device)" if pred.chunks > 1 else ""), title_justify="left")
    for col in ("stage", "layers", "ranks", "fwd", "bwd", "sends", "per micro-batch", "sync+update",
                "micro-batches kept", "memory"):
        t.add_column(col, justify="left" if col in ("stage", "layers") else "right")
    for s in pred.stages:
        t.add_row(str(s.index), f"{s.layers[0]} .. {s.layers[1]}", str(s.ranks), fmt.seconds(s.micro.fwd_s),
                  fmt.seconds(s.micro.bwd_s), fmt.seconds(s.p2p_s), fmt.seconds(s.per_micro_s), fmt.seconds(s.once_s),
                  f"{s.kept_micro_batches:g}", fmt.nbytes(s.memory_peak_bytes))
    console.print(t)
    console.print(step_line(pred.step_s, pipeline_terms(pred)))
    if (line := comm_line(comm_parts(pred), pred.stages[0].micro.overlap)) is not None:
        console.print(line)
    over = limit_bytes is not None and pred.memory_peak_bytes > limit_bytes * (1 + 1e-9)
    console.print(f"the step: fill and drain plus the slowest stage per further micro-batch, then gradient sync and "
                  f"update; bubble {pred.bubble_fraction:.1%} of the pipelined part;  peak memory "
                  f"{fmt.nbytes(pred.memory_peak_bytes)} per device (stage "
                  f"{max(pred.stages, key=lambda s: s.memory_peak_bytes).index}"
                  + (f"; over the limit of {fmt.nbytes(limit_bytes)}: it does not fit" if over else "") + ")"
                  + ("" if mfu is None else f";  model FLOP utilisation {mfu:.1%}{mfu_note(mfu)}"))


def info_table(s: NetworkSummary) -> None:
    t = Table(title=f"{s.network}, batch {s.batch}", title_justify="left")
    for col in ("layer", "op", "output", "params", "fwd FLOPs", "bwd FLOPs", "W", "D", "activations"):
        t.add_column(col, justify="left" if col in ("layer", "op", "output") else "right")
    for (layer, c), kept in zip(s.layers, s.kept):
        t.add_row(layer.name, layer.op, fmt.shape((s.batch, *layer.out_shape)), fmt.count(layer.num_params),
                  fmt.count(c.flops_fwd), fmt.count(c.flops_bwd), fmt.count(c.step_work), str(c.step_depth),
                  fmt.nbytes(kept))
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


def machine_row(m, default: bool) -> dict:
    dev = m.device
    memory = dev.mem_capacity_bytes
    return {"name": m.name, "default": default, "devices_per_node": m.devices_per_node,
            "devices_per_nvlink_domain": m.domain_size, "nodes": m.nodes,
            "device": dev.name, "peak_flops": dict(dev.peak_flops),
            "memory_bytes": int(memory) if float(memory).is_integer() else memory,  # whole bytes as an integer
            "memory_bandwidth_bytes_per_s": dev.mem_bandwidth_bytes_per_s,
            "efficiency": {k: dev.efficiency_of(k) for k in EFFICIENCY_CLASSES},
            "intra": {"alpha_s": m.intra.alpha_s, "bandwidth_bytes_per_s": 1 / m.intra.beta_s_per_byte},
            "inter": {"alpha_s": m.inter.alpha_s, "bandwidth_bytes_per_s": 1 / m.inter.beta_s_per_byte},
            "source": m.source}


def _rate(bytes_per_s: float) -> str:
    """A bandwidth in GB/s (decimal, as datasheets and the machine files give it)."""
    gb = bytes_per_s / 1e9
    return f"{gb:,.0f} GB/s" if gb >= 10 else f"{gb:.3g} GB/s"


def _tflops(flops: float) -> str:
    return f"{flops / 1e12:,.4g}"


def _per_node(r: dict) -> str:
    domain = r["devices_per_nvlink_domain"]
    return str(r["devices_per_node"]) + (f" (NVLink domain {domain})" if domain != r["devices_per_node"] else "")


def machines_table(rows: list[dict]) -> None:
    """The machines side by side; `dnnplan machines NAME` details one (:func:`machine_details`)."""
    t = Table(title="machines (--machine NAME, or a YAML path; `dnnplan machines NAME` details one)",
              title_justify="left")
    for col in ("name", "device", "per node", "nodes", "TFLOP/s fp32, 16-bit", "memory", "intra link", "inter link"):
        t.add_column(col)
    for r in rows:
        peaks = r["peak_flops"]
        half = peaks.get("bfloat16", peaks.get("float16"))
        t.add_row(r["name"] + (" (default)" if r["default"] else ""), r["device"], _per_node(r),
                  "unlimited" if r["nodes"] is None else str(r["nodes"]),
                  _tflops(peaks.get("float32", 0)) + ("" if half is None else f", {_tflops(half)}"),
                  f"{fmt.nbytes(r['memory_bytes'])}, {_rate(r['memory_bandwidth_bytes_per_s'])}",
                  f"{fmt.seconds(r['intra']['alpha_s'])}, {_rate(r['intra']['bandwidth_bytes_per_s'])}",
                  f"{fmt.seconds(r['inter']['alpha_s'])}, {_rate(r['inter']['bandwidth_bytes_per_s'])}")
    console.print(t)


def machine_details(r: dict) -> None:
    """One machine's every figure the cost model prices with (`dnnplan machines NAME`)."""
    console.print(f"[bold]{escape(r['name'])}[/bold]{' (default)' if r['default'] else ''}: {escape(r['device'])}, "
                  f"{_per_node(r)} a node, {'unlimited' if r['nodes'] is None else r['nodes']} nodes "
                  f"({escape(r['source'])})")
    console.print("peak TFLOP/s: " + ", ".join(f"{k} {_tflops(v)}" for k, v in r["peak_flops"].items()))
    console.print(f"memory {fmt.nbytes(r['memory_bytes'])} at {_rate(r['memory_bandwidth_bytes_per_s'])}")
    console.print("efficiency (the share of the peak kernels reach): "
                  + ", ".join(f"{k} {v:g}" for k, v in r["efficiency"].items()))
    for level, words in (("intra", "inside a link domain (a node, or its NVLink domain)"),
                         ("inter", "between link domains")):
        link = r[level]
        console.print(f"links {words}: {fmt.seconds(link['alpha_s'])} latency, {_rate(link['bandwidth_bytes_per_s'])} "
                      "a device each way")


def ahead_of_time_line(pred, alone_s: float | None) -> None:
    """`predict PLAN` on machine `local`: the step is what `dnnplan execute` predicts before its
    run; beside it, the step from the profile's kernels timed alone (with --step-context)."""
    how = ("from its kernels timed again in its step's order and context" if alone_s else
           "from the profile's kernels timed alone (--no-step-context)")
    console.print(f"as `dnnplan execute` predicts this plan before its run, {how}"
                  + (f"; from the profile alone {fmt.seconds(alone_s)}" if alone_s else ""))


def prediction_table(pred, fallbacks=(), mfu: float | None = None, layers: bool = True,
                     limit_bytes: float | None = None) -> None:
    """`dnnplan predict`: the step by term (the names `plan` and `execute` use, costmodel.step.breakdown),
    memory and model FLOP utilisation first; then, with ``layers``, the per-layer table."""
    micro = (f" as {pred.micro_batches} micro-batches of {pred.micro_batch} (gradient accumulation; per-layer "
             "times are one micro-batch's)" if pred.micro_batches > 1 else "")
    console.print(f"{pred.network}: batch {pred.batch}{micro} on {pred.p} x {pred.machine} ({pred.compute})")
    console.print(step_line(pred.step_s, step_terms(pred)))
    if (line := comm_line(comm_parts(pred), pred.overlap)) is not None:
        console.print(line)
    console.print(memory_mfu_line(pred.memory_peak_bytes, limit_bytes, mfu, pred.memory_allocated_bytes))
    console.print(memory_line(pred.memory_parts))
    if fallbacks:
        names = ", ".join(f.layer for f in fallbacks[:6]) + (" ..." if len(fallbacks) > 6 else "")
        console.print(f"[yellow]{len(fallbacks)} layer(s) could not take {fallbacks[0].wanted} and run "
                      f"{fallbacks[0].used} instead[/yellow] ({names}; e.g. {fallbacks[0].reason})")
    if not layers:
        console.print(f"[dim]per-layer table: --layers ({len(pred.layers)} layers)[/dim]")
        return
    layer_table(pred)


def layer_table(pred, title: str = "per layer") -> None:
    """A step's per-layer table: each layer's strategy, pass times, communication, reshards, memory."""
    t = Table(title=title, title_justify="left")
    for col in ("layer", "strategy", "fwd", "bwd", "comm", "reshard", "memory"):
        t.add_column(col, justify="left" if col in ("layer", "strategy") else "right", overflow="fold")
    for x in pred.layers:
        e = x.layer
        t.add_row(e.name, e.strategy.label + (f" {e.algorithm}" if e.algorithm else ""),
                  fmt.seconds(e.fwd_compute_s), fmt.seconds(e.bwd_compute_s),
                  fmt.seconds(e.fwd_comm_s + e.bwd_comm_s + e.grad_sync_s),
                  fmt.seconds(x.reshard_s) + (" halo" if x.halo else ""), fmt.nbytes(e.memory.total))
    console.print(t)
