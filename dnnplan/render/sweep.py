"""`dnnplan plan --sweep`'s tables and its line a point: strong scaling on one machine, and the
comparison of machines and device counts (time and cost to train, the fastest and cheapest marked).

Numbers arrive in SI units (planner.sweep's rows); a point with no plan gives its reason in a note
under the table, wrapped, never cut.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from dnnplan.render import fmt
from dnnplan.render.terminal.messages import err_console
from dnnplan.render.tables import console


def sweep_table(rows: list[dict], network: str, batch: int, machine: str, pipelines: bool = False) -> None:
    """Per device count: the plan and data parallelism, speedups and efficiencies; a count with no
    plan gives its reason, wrapped (never cut); data parallelism over the memory limit is marked;
    ``pipelines``: the points were planned with the pipeline search where nothing fits whole."""
    t = Table(title=f"strong scaling of {network}, batch {batch} on {machine}", title_justify="left")
    for col in ("devices", "plan step", "speedup", "efficiency", "data-parallel step", "speedup ", "efficiency ",
                "plan / data", "strategy mix"):
        t.add_column(col, justify="left" if col == "strategy mix" else "right", overflow="fold")
    notes = []
    for r in rows:
        if r.get("error"):
            notes.append(f"{r['devices']} device{'s' if r['devices'] != 1 else ''}: {r['error']}")
            t.add_row(str(r["devices"]), _no_plan(r), "", "", "", "", "", "", f"note {len(notes)}")
            continue
        fits = r.get("data_fits", True)
        over = "" if fits else " [yellow]over memory[/yellow]"
        t.add_row(str(r["devices"]), fmt.seconds(r["step_s"]) + _gap(r), f"{r['speedup']:.2f}x",
                  f"{r['efficiency']:.0%}", fmt.seconds(r["data_step_s"]) + over,
                  f"{r['data_speedup']:.2f}x", f"{r['data_efficiency']:.0%}",
                  f"{r['data_step_s'] / r['step_s']:.2f}x" if fits else "-", _mix(r))
    console.print(t)
    _notes(notes)
    console.print("speedup and efficiency are relative to the first device count that has a plan")
    _whole_batch_only(rows, pipelines)


def compare_table(rows: list[dict], network: str, batch: int, tokens: float | None,
                  pipelines: bool = False, priced: bool = False, reads_tokens: bool = False) -> None:
    """Per machine and device count: the step, throughput, and for a token budget the days,
    device-hours and cost to train; the fastest and the cheapest marked (planner.sweep.mark_best);
    ``pipelines``: the points were planned with the pipeline search where nothing fits whole;
    ``priced``: the machines were given prices; ``reads_tokens``: the network reads token ids (its
    throughput in tokens a second)."""
    budget = f", {fmt.count(tokens)} tokens" if tokens is not None else ""
    t = Table(title=f"{network}, batch {batch}{budget}: machines and device counts", title_justify="left")
    priced = priced and tokens is not None
    cols = ["machine", "devices", "step", "tokens/s" if reads_tokens else "samples/s"]
    if tokens is not None:
        cols += ["days", "device-hours"] + (["cost"] if priced else [])
    else:
        cols.append("device-time a step")
    cols += ["best", "strategy mix"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("machine", "best", "strategy mix") else "right",
                     overflow="fold")
    notes: list[str] = []
    for r, note in zip(rows, _no_plan_notes(rows, pipelines)):
        if r.get("error"):
            if note not in notes:
                notes.append(note)
            t.add_row(escape(r["machine"]), str(r["devices"]), _no_plan(r),
                      *[""] * (len(cols) - 4), f"note {notes.index(note) + 1}")
            continue
        cells = [escape(r["machine"]), str(r["devices"]), fmt.seconds(r["step_s"]) + _gap(r), _rate(r)]
        if tokens is not None:
            train = r["train"]
            cells += [_amount(train["days"]), _amount(train["device_hours"])]
            cells += [_amount(train["cost"])] if priced else []
        else:
            cells.append(fmt.seconds(r["device_s_per_step"]))
        cells += [_marks(r), _mix(r)]
        t.add_row(*cells)
    console.print(t)
    _notes(notes)
    cheapest = "cost" if priced else "device-hours" if tokens is not None else "device-time a step"
    console.print(f"fastest: the shortest step; cheapest: the least {cheapest}")
    _whole_batch_only(rows, pipelines)


def _whole_batch_only(rows: list[dict], pipelines: bool) -> None:
    """Where a point has no plan and the points were planned with the whole batch at once, the flag
    that weighs what a single plan weighs beside it."""
    refused = any(r.get("error") and not r.get("lost") for r in rows)
    if refused and not any("pipeline" in r for r in rows) and not pipelines:
        console.print("these points were planned with the whole batch at once, without gradient accumulation or "
                      "pipelining: --pipeline auto plans each as `dnnplan plan` does, accumulating micro-batches "
                      "or pipelined where nothing fits whole")


def _no_plan(row: dict) -> str:
    """A row without a plan's cell: failed (its worker process was lost), or no plan (refused)."""
    return "[red]failed[/red]" if row.get("lost") else "[yellow]no plan[/yellow]"


def _no_plan_notes(rows: list[dict], pipelines: bool = False) -> list[str | None]:
    """Each row's note (None: it has a plan). The consecutive counts of one machine where no plan
    fits its memory share one note: the counts, and the least a plan needs a device at each: of the
    whole batch at once (then ``--pipeline auto`` is named first: accumulating micro-batches may
    fit), or with ``pipelines`` of one stage, accumulating or not (a pipeline's stages may hold less)."""
    out: list[str | None] = []
    run: list[dict] = []

    def close() -> None:
        if run:
            needs = ", ".join(f"{fmt.nbytes(r['need_bytes'])} ({r['devices']})" for r in run)
            counts = ", ".join(str(r["devices"]) for r in run)
            limit = fmt.nbytes(run[0]["limit_bytes"])
            head = f"{run[0]['machine']} x {counts}: "
            if pipelines:
                note = (head + f"no plan fits {limit} a device, with or without pipelining; the least a plan of one "
                        f"stage needs a device (devices): {needs}; allow more --memory, more devices or a smaller "
                        "--batch")
            else:
                note = (head + f"no plan of the whole batch at once fits {limit} a device; the least such a plan "
                        f"needs a device (devices): {needs}; --pipeline auto weighs gradient accumulation and "
                        "pipelines, or allow more --memory, more devices or a smaller --batch")
            out.extend([note] * len(run))
            run.clear()

    for r in rows:
        fits_none = "need_bytes" in r and (not run or (run[-1]["machine"], run[-1]["limit_bytes"]) ==
                                           (r["machine"], r["limit_bytes"]))
        if not fits_none:
            close()
        if "need_bytes" in r:
            run.append(r)
            continue
        out.append(f"{r['machine']} x {r['devices']}: {r['error']}" if r.get("error") else None)
    close()
    return out


def point_line(row: dict, done: int, total: int, rows: list[dict]) -> str:
    """One point as it finishes (stderr), with the fastest and the cheapest so far."""
    head = f"planned {done} of {total}: {row['machine']} x {row['devices']}: "
    if row.get("lost"):
        return head + "failed: " + row["error"]
    if row.get("error"):
        return head + "no plan (" + row["error"].split(";")[0].split(" (")[0] + ")"
    text = head + f"{fmt.seconds(row['step_s'])} a step"
    train = row.get("train")
    if train is not None:
        cost = "" if train["cost"] is None else f", cost {_amount(train['cost'])}"
        text += f", {_amount(train['days'])} days{cost}"
    best = {k: r for k in ("fastest", "cheapest") for r in rows if r.get(k)}
    if best:
        text += "; so far " + ", ".join(f"{k} {r['machine']} x {r['devices']}" for k, r in best.items())
    return text


def _amount(x: float) -> str:
    """Days, device-hours or money: 3 digits below 100, whole to 100,000, then with a suffix (1.44M)."""
    return fmt.count(x) if x >= 1e5 else f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _rate(row: dict) -> str:
    return fmt.count(row.get("tokens_per_s", row["samples_per_s"]))


def _marks(row: dict) -> str:
    return ", ".join(k for k in ("fastest", "cheapest") if row.get(k))


def _mix(row: dict) -> str:
    """The layers' splits by kind, after the pipeline where the point is pipelined, and the ZeRO stage
    the point chose where it weighed them (ZeRO-0 said by nothing)."""
    mix = ", ".join(f"{k} x{v}" for k, v in row["mix"].items())
    if row.get("zero"):
        mix += f"; ZeRO-{row['zero']}"
    pipe = row.get("pipeline")
    if pipe is None:
        return mix
    chunks = f", {pipe['chunks']} chunks a device" if pipe["chunks"] > 1 else ""
    if pipe["stages"] == 1:  # gradient accumulation; one micro-batch is the whole batch at once
        return mix if pipe["micro_batches"] == 1 else f"{pipe['micro_batches']} micro-batches (accumulated); {mix}"
    return f"pipeline {pipe['stages']} ({pipe['micro_batches']} micro-batches{chunks}); {mix}"


def _notes(notes: list[str]) -> None:
    for k, note in enumerate(notes, 1):  # whole, wrapped at spaces by the console (never cut)
        console.print(f"note {k}: {escape(note)}")


def _gap(row: dict) -> str:
    gap = row.get("gap")
    return f" (within {gap:.1%})" if row.get("status") != "optimal" and gap else ""


def progress(line: str) -> None:
    """A point's line on stderr (stdout keeps the table or the JSON)."""
    err_console.print(line, markup=False, emoji=False)
