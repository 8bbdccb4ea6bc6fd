"""Rich output of the profile commands: a progress bar with ETA and the summaries."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

import yaml
from dnnplan.render.terminal.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from dnnplan.render import fmt
from dnnplan.render.terminal.messages import err_console
from dnnplan.render.tables import console
from networks.writing import standard_stream


@contextmanager
def progress_bar(what: str):
    """Yields a callback ``(done, total, call)`` that advances a bar with ETA on stderr, or, when
    stderr is not a terminal (a log file, a batch job), prints a line after the first kernel
    and then every :data:`LINE_EVERY_S` seconds."""
    err = Console(stderr=True)
    if not err.is_terminal:
        yield _progress_lines(what, err)
        return
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("{task.fields[call]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                   console=err, transient=True)
    task = None
    with bar:
        def cb(done, total, call):
            nonlocal task
            if task is None:
                task = bar.add_task(what, total=total, call="")
            bar.update(task, completed=done, call=f"{call.kernel} {call.algo}".strip())
        yield cb


#: How often a profile whose stderr is not a terminal prints a progress line [s]
LINE_EVERY_S = 10.0


def _progress_lines(what: str, err: Console):
    last = [-LINE_EVERY_S]

    def cb(done, total, call):
        now = time.monotonic()
        if now - last[0] >= LINE_EVERY_S or done == total:
            last[0] = now
            err.print(f"{escape(what)}: {done} of {total} kernel shapes measured", markup=True, highlight=False)
    return cb


def profile_summary(s: dict) -> None:
    t = Table(title=f"profiled {s['device']} ({s['backend']}, {s['threads']} thread(s))", title_justify="left")
    for col in ("kernel", "algorithm", "shapes", "time", "FLOP/s"):
        t.add_column(col, justify="left" if col in ("kernel", "algorithm") else "right")
    for r in s["by_kernel"]:
        t.add_row(r["kernel"], r["algo"] or "-", str(r["count"]), fmt.seconds(r["seconds"]),
                  fmt.count(r["flops_per_s"]) if r["flops_per_s"] else "-")
    console.print(t)
    peak = s["peak_flops"]
    vs = f" = {s['achieved_flops'] / peak:.0%} of the {fmt.count(peak)}FLOP/s peak" if peak else ""
    best = f"; best kernel {fmt.count(s['best_flops'])}FLOP/s" + (f" ({s['best_flops'] / peak:.0%})" if peak else "")
    console.print(f"[bold]{s['measured']} kernel shapes measured[/bold] in {fmt.seconds(s['seconds'])}"
                  f" ({s['resumed']} already in the table, {s['entries']} in all)  "
                  f"achieved {fmt.count(s['achieved_flops'])}FLOP/s{vs}{best}")
    if s["left"] and s.get("too_long"):
        long = s["too_long"]
        console.print(f"[yellow]{s['left']} shapes not measured: timing {escape(long['kernel'])} takes at least "
                      f"{fmt.seconds(long['least_seconds'])} (its arithmetic at the peak, for its fewest runs), more "
                      f"than --max-seconds left; run again with --max-seconds "
                      f"{max(1, math.ceil(long['least_seconds'] * 2))} or more to time it[/yellow]")
    elif s["left"]:
        console.print(f"[yellow]{s['left']} shapes not measured: --max-seconds reached; run the same command "
                      f"again to resume[/yellow]")
    failed = list(s["failed"].items())
    for key, why in failed[:5]:
        console.print(f"[red]failed[/red] {key}: {why}")
    if len(failed) > 5:
        console.print(f"[red]and {len(failed) - 5} more failed[/red] (--json lists every one)")
    console.print(f"table: {s['table']}")


def interrupted_line(s: dict, command: str) -> None:
    """One line on stderr for a profile stopped by Ctrl-C: what was saved, and the command that resumes."""
    saved = f"saved to {s['table']}" if s["table"] else "not saved"
    text = (f"{s['measured']} kernel shapes measured and {saved} ({s['entries']} in the table, {s['left']} not "
            f"measured); resume with: {command}")
    err_console.print(f"[bold yellow]interrupted:[/bold yellow] {escape(text)}", markup=True, emoji=False)


def comm_summary(s: dict) -> None:
    t = Table(title=f"collectives over {s['ranks']} ranks: measured vs fitted (MPICH's algorithm); warm: "
                    "after another collective, cold: after a layer's kernels", title_justify="left")
    for col in ("collective", "bytes", "warm", "per-collective fit", "err", "joint fit", "err", "cold", "cold fit",
                "err"):
        t.add_column(col, justify="left" if col == "collective" else "right")
    joint = {(c, n): f for c, n, _, f in s["link"]["points"]}
    cold = {(c, n): (m, f) for fit in (s.get("cold") or {}).get("collectives", {}).values()
            for c, n, m, f in fit["points"]}
    for c, fit in s["collectives"].items():
        for _, n, m, f in fit["points"]:
            j = joint[(c, n)]
            cm, cf = cold.get((c, n), (None, None))
            t.add_row(c, fmt.nbytes(n), fmt.seconds(m), fmt.seconds(f), f"{abs(f - m) / m:.0%}",
                      fmt.seconds(j), f"{abs(j - m) / m:.0%}", *(("-", "-", "-") if cm is None else
                                                              (fmt.seconds(cm), fmt.seconds(cf),
                                                               f"{abs(cf - cm) / cm:.0%}")))
    console.print(t)
    t2 = Table(title="fitted alpha-beta-gamma, per message-size regime", title_justify="left")
    for col in ("collective", "sizes", "alpha", "bandwidth 1/beta", "reduce 1/gamma", "median err", "max err"):
        t2.add_column(col, justify="left" if col in ("collective", "sizes") else "right")
    inv = lambda v: f"{1 / v / 1e9:.2f} GB/s" if v > 0 else "-"  # noqa: E731
    cold_fits = [(f"{c}, cold", fit) for c, fit in (s.get("cold") or {}).get("collectives", {}).items()]
    for c, fit in [*s["collectives"].items(), *cold_fits, ("joint (for collectives not measured)", s["link"])]:
        regimes = fit.get("regimes") or [[None, fit["alpha_s"], fit["beta_s_per_byte"], fit["gamma_s_per_byte"]]]
        low = 0.0
        for k, (upto, a, b, g) in enumerate(regimes):
            span = "all" if len(regimes) == 1 else (f"> {fmt.nbytes(low)}" if upto is None
                                                    else f"<= {fmt.nbytes(upto)}")
            first = k == 0
            t2.add_row(c if first else "", span, fmt.seconds(a), inv(b), inv(g),
                       f"{fit['fit_error']:.1%}" if first else "", f"{fit['max_error']:.1%}" if first else "")
            low = upto or low
    console.print(t2)
    console.print(f"table: {s['table']}")


def fragment_yaml(fragment: dict) -> str:
    """A framework file fragment (costmodel.frameworks.host_fragment) as YAML to paste into a framework file."""
    head = "# the host: keys of a framework file (docs/costmodel.md, \"Frameworks and the host\")\n"
    return head + yaml.safe_dump(fragment, sort_keys=False, width=200)


def host_dispatch(got, fragment: dict, out: str | None) -> None:
    """`dnnplan profile --host`: each tiny op's host cost per call (mean and spread over the loops),
    their mean, and the fragment (or where it was written)."""
    console.print(f"{got.framework} {got.version} on {got.device}: host time per op ({got.calls:,} calls a loop, "
                  f"{got.ops[0].repeats} loops; spread: the loops' standard deviation)", markup=False)
    t = Table()
    for col in ("op", "mean", "spread"):
        t.add_column(col, justify="left" if col == "op" else "right")
    for o in got.ops:
        t.add_row(o.name, fmt.seconds(o.mean_s), fmt.seconds(o.spread_s))
    console.print(t)
    console.print(f"mean over the ops: {fmt.seconds(got.op_s)} an op (host.op_s)")
    if out:
        if not standard_stream(out):
            console.print(f"wrote {escape(out)} (a framework file's host: keys)")
    else:
        console.print(fragment_yaml(fragment).rstrip(), markup=False, highlight=False, soft_wrap=True)
