"""The executor's rich tables: predicted against measured per layer and phase, the step, the
check, and `dnnplan validate`'s summary. Numbers arrive in SI units; this module formats them."""

from __future__ import annotations

import sys
from typing import Callable

from dnnplan.render.terminal.console import Console
from rich.markup import escape
from rich.table import Table

from costmodel.step.breakdown import measured_terms
from dnnplan.render import fmt
from dnnplan.render.answer import breakdown_text, mfu_note
from dnnplan.render.terminal.messages import err_console
from dnnplan.render.tables import WIDTH
from executor.check.gradients import CheckResult
from executor.report.compare import Comparison
from executor.report.in_run import LABEL as IN_RUN_LABEL
from executor.report.pipeline import bubble

console = Console(highlight=False, width=min(WIDTH, Console().width) if sys.stdout.isatty() else WIDTH,
                  soft_wrap=not sys.stdout.isatty())  # piped, a sentence on one line (dnnplan.render.tables)


def pct(rel: float | None) -> str:
    if rel is None:
        return "-"
    colour = "green" if abs(rel) < 0.1 else "yellow" if abs(rel) < 0.25 else "red"
    return f"[{colour}]{rel * 100:+.0f}%[/{colour}]"


def _cell(measured: float, predicted: float, rel: float | None) -> str:
    if measured == 0 and predicted == 0:
        return ""
    return f"{fmt.seconds(measured)} / {fmt.seconds(predicted)} {pct(rel)}"


#: the table's columns: the step's terms (costmodel.step.breakdown), each the sum of these phases
TERM_PHASES = (("forward", ("fwd_compute", "fwd_comm")), ("backward", ("bwd_compute", "bwd_comm")),
               ("gradient sync", ("grad_sync",)), ("update", ("update",)), ("waiting", ("wait",)))


def _term(times, phases) -> float:
    return sum(times.phases.get(ph, 0.0) for ph in phases)


def comparison_table(cmp: Comparison, title: str, strategies: dict[str, str]) -> None:
    """One row per layer: measured / predicted and the error of each term of the step (the names
    `plan` and `predict` use: forward, backward, gradient sync, update), and the layer total."""
    used = [(name, phs) for name, phs in TERM_PHASES
            if any(_term(lt, phs) > 0 for lt in cmp.measured.layers + cmp.predicted)]
    t = Table(title=title, title_justify="left", caption="cells: measured / predicted, error = (measured - "
              "predicted) / predicted; measured = median over steps of the slowest rank", caption_justify="left")
    t.add_column("layer", overflow="fold")
    t.add_column("strategy", overflow="fold")
    for name, _ in used:
        t.add_column(name, justify="right", overflow="fold")
    t.add_column("layer total", justify="right", overflow="fold")
    for m, p in zip(cmp.measured.layers, cmp.predicted):
        row = [m.name, strategies.get(m.name, "")]
        for _, phs in used:
            got, want = _term(m, phs), _term(p, phs)
            row.append(_cell(got, want, None if want <= 0 else (got - want) / want))
        row.append(_cell(m.total_s, p.total_s, None if p.total_s <= 0 else (m.total_s - p.total_s) / p.total_s))
        t.add_row(*row)
    m_sum = sum(lt.total_s for lt in cmp.measured.layers)
    p_sum = sum(lt.total_s for lt in cmp.predicted)
    t.add_section()
    t.add_row("[bold]sum of layers[/bold]", "", *[""] * len(used),
              _cell(m_sum, p_sum, None if p_sum <= 0 else (m_sum - p_sum) / p_sum))
    console.print(t)


def _terms(layers, wait_s: float | None, step_s: float):
    """The step's terms (costmodel.step.breakdown.measured_terms) from per-layer phases; ``wait_s``
    replaces the layers' own wait (the prediction's, which no layer carries)."""
    phases: dict[str, float] = {}
    for lt in layers:
        for ph, secs in lt.phases.items():
            phases[ph] = phases.get(ph, 0.0) + secs
    if wait_s is not None:
        phases["wait"] = wait_s
    return measured_terms(phases, step_s)


def _equation(step_s: float, terms) -> str:
    """`` = forward ... + ...`` where the terms sum to the step; else (a measured step: each layer's
    phase is its slowest rank's median, and the slowest rank differs by phase, so the terms can sum
    to more than the median step) the terms with their sum, never an equation that does not hold."""
    total = sum(secs for _, secs in terms)
    if total <= step_s * (1 + 1e-6):
        return f" = {breakdown_text(terms)}"
    return (f"; by term, each layer's phase its slowest rank's median ({fmt.seconds(total)} together: the slowest "
            f"rank differs by phase): {breakdown_text(terms)}")


def step_summary(cmp: Comparison, mfu: Callable[[float], float] | None = None) -> None:
    """The step predicted and measured, each by term (the names `plan` and `predict` use), its
    error and the model FLOP utilisation of each; then how the measured step was spread."""
    m = cmp.measured
    med = cmp.layer_median_abs_rel
    util = ((lambda secs: f";  model FLOP utilisation {mfu(secs):.1%}{mfu_note(mfu(secs))}") if mfu
            else (lambda secs: ""))
    predicted = _terms(cmp.predicted, cmp.predicted_wait_s, cmp.predicted_step_s)
    console.print(f"[bold]predicted step {fmt.seconds(cmp.predicted_step_s)}[/bold]"
                  f"{_equation(cmp.predicted_step_s, predicted)}"
                  f"{util(cmp.predicted_step_s)}")
    console.print(f"[bold]measured step {fmt.seconds(m.step_s)}[/bold]"
                  f"{_equation(m.step_s, _terms(m.layers, None, m.step_s))}{util(m.step_s)}")
    console.print(
        f"[bold]step[/bold]  error {pct(cmp.step_rel)}; measured the median of {m.steps} steps, "
        f"{fmt.seconds(m.step_min_s)} to {fmt.seconds(m.step_max_s)}; predicted outside the timed layers "
        f"{fmt.seconds(cmp.predicted_outside_s)}{_code(cmp.predicted_collective_code_s)};  per-layer median |error| "
        f"{'-' if med is None else f'{med * 100:.0f}%'}")


def _code(code_s: float) -> str:
    return f", {fmt.seconds(code_s)} of it the code around collectives" if code_s > 0 else ""


def stage_table(cmp: Comparison) -> None:
    """A pipelined run: each stage's busy and idle time, measured / predicted, and the bubble."""
    if not cmp.stages:
        return
    t = Table(title="pipeline stages", title_justify="left", caption="busy: the step less the stage's waits "
              "(slowest of its ranks); idle: the step less busy; each measured one the median over the timed "
              "steps (so a stage's busy and idle need not add up to the median step); the bubble: the least idle "
              "stage's idle time",
              caption_justify="left")
    for col in ("stage", "layers", "ranks", "busy", "idle"):
        t.add_column(col, justify="right" if col in ("busy", "idle") else "left")
    for r in cmp.stages:
        t.add_row(str(r.stage), f"{r.first_layer} .. {r.last_layer}", ",".join(map(str, r.ranks)),
                  _cell(r.measured_busy_s, r.predicted_busy_s, r.busy_rel),
                  f"{fmt.seconds(r.measured_idle_s)} / {fmt.seconds(r.predicted_idle_s)}")
    console.print(t)
    pred, meas = bubble(cmp.stages)
    console.print(f"[bold]bubble[/bold]  measured {fmt.seconds(meas)}  predicted {fmt.seconds(pred)}  "
                  f"({meas / cmp.measured.step_s * 100:.0f}% / {pred / cmp.predicted_step_s * 100:.0f}% of the step)")


def ahead_of_time_line(cmp: Comparison) -> None:
    """``execute --fresh-profile``: the prediction made ahead of time (the profile before the run),
    beside the one from the kernels re-timed inside it that the table shows."""
    console.print(f"[bold]ahead of time[/bold]  predicted {fmt.seconds(cmp.predicted_step_s)} from the profile "
                  f"taken before the run, error {pct(cmp.step_rel)} (the table and step above: the {IN_RUN_LABEL})")


def profile_alone_line(alone_s: float | None, measured_s: float) -> None:
    """``execute``: the prediction from the profile's kernels timed alone, beside the headline made
    from the plan's kernels timed in its step's context (nothing without step context)."""
    if alone_s:
        console.print(f"[bold]profile alone[/bold]  predicted {fmt.seconds(alone_s)} from the kernels timed in "
                      f"isolation, error {pct(measured_s / alone_s - 1)} (the ahead-of-time prediction times them "
                      "again in the step's order first; --no-step-context leaves that out)")


def memory_text(predicted: int | None, measured: int | None, rel: float | None) -> str:
    """``measured / predicted error`` of the peak memory per rank ("-" where a side is missing)."""
    if measured is None or predicted is None:
        return "-" if measured is None else f"{fmt.nbytes(measured)} / -"
    return f"{fmt.nbytes(measured)} / {fmt.nbytes(predicted)} {pct(rel)}"


def memory_line(cmp: Comparison) -> None:
    """The measured peak memory (largest rank, in a step of its own) against the prediction."""
    if cmp.measured.peak_bytes is None:
        return
    console.print(f"[bold]memory[/bold]  peak per rank measured / predicted "
                  f"{memory_text(cmp.predicted_peak_bytes, cmp.measured.peak_bytes, cmp.memory_rel)} "
                  "(the largest rank's arrays in an extra, untimed step)")


def device_line(device: dict | None) -> None:
    """Where a GPU run ran, in which precision, and whether its collectives went through the host."""
    if not device:
        return
    how = ("collectives staged through the host's MPI (ranks share a GPU; NCCL refuses that)"
           if device.get("staged") else "collectives over NCCL")
    console.print(f"[bold]device[/bold]  {escape(str(device.get('device')))} (GPU {device.get('device_id')}), "
                  f"{device.get('precision')}, {how}")


def steps_mode_line(mode: dict | None) -> None:
    """How the timed steps ran: replayed as a CUDA graph, or eagerly and why."""
    if not mode:
        return
    if mode.get("mode") == "graphs":
        console.print("[bold]steps[/bold]  each timed step replayed as one CUDA graph captured after the warm-up; "
                      "per-layer times from one eager step after them")
    elif mode.get("reason"):
        console.print(f"[bold]steps[/bold]  eager: {escape(str(mode['reason']))}")
    else:
        console.print("[bold]steps[/bold]  eager")


def check_line(check: CheckResult | None, batch_norm: str = "sync") -> None:
    """The check's verdict; under --batch-norm local the one process normalises each rank's sample
    shard by its own statistics, as the ranks do (executor.check.reference_bn)."""
    if check is None:
        return
    shards = " (batch norm over each rank's sample shard, as planned)" if batch_norm == "local" else ""
    verdict = "[bold green]passed[/bold green]" if check.passed else "[bold red]FAILED[/bold red]"
    console.print(f"[bold]check[/bold]  {verdict}: worst relative error {check.worst_rel_error:.2e} in "
                  f"{check.worst_tensor} (tolerance {check.tolerance:.0e}; "
                  f"loss {check.loss_rel_error:.1e}) against one process on the whole batch{shards}")


def validate_table(rows: list[dict], title: str) -> None:
    """One row per plan: the ahead-of-time prediction and its error first, then (when any plan has
    it) the in-run one (executor.report.in_run)."""
    spread = any(r.get("repeats", 1) > 1 for r in rows)
    in_run = any(r.get("in_run_step_rel") is not None for r in rows)
    t = Table(title=title, title_justify="left", caption_justify="left", caption=(
        "predicted, step error: ahead of time, from the profile taken before the run (with each plan's kernels "
        "timed in its step's context before the runs, unless --no-step-context)" + (
            f"; in-run: the {IN_RUN_LABEL}, re-timed inside the same run (a check of the model's structure, "
            "not a prediction)" if in_run else "")))
    cols = ("plan", "strategies", "predicted", "measured", "step error") + (("error range",) if spread else ()) + (
        ("in-run predicted", "in-run error") if in_run else ()) + ("layer median |error|", "memory meas. / pred.",
                                                                     "check")
    for col in cols:
        t.add_column(col, justify="left" if col in ("plan", "strategies", "check") else "right")
    for r in rows:
        check = r.get("check")
        ctext = "-" if check is None else (f"[green]ok[/green] {check['worst_rel_error']:.1e}" if check["passed"]
                                          else f"[red]FAILED[/red] {check['worst_tensor']} {check['worst_rel_error']:.1e}")
        med = r["layer_median_abs_rel"]
        name = escape(r["name"]) + (" [dim](earlier run)[/dim]" if r.get("resumed") else "")
        cells = [name, r["strategies"], fmt.seconds(r["predicted_step_s"]), fmt.seconds(r["measured_step_s"]),
                 pct(r["step_rel"])]
        if spread:
            cells.append(rel_range(r.get("step_rel_min"), r.get("step_rel_max")))
        if in_run:
            got = r.get("in_run_predicted_step_s")
            cells += ["-" if got is None else fmt.seconds(got), pct(r.get("in_run_step_rel"))]
        mem = memory_text(r.get("predicted_peak_bytes"), r.get("measured_peak_bytes"), r.get("memory_rel"))
        t.add_row(*cells, "-" if med is None else f"{med * 100:.0f}%", mem, ctext)
    console.print(t)
    if any(r.get("resumed") for r in rows):
        console.print("[dim](earlier run): measured by an interrupted run of the same settings, not run again[/dim]")


def validate_summary(summary: dict) -> None:
    """The summary's numbers on one line (executor.report.summary)."""
    def share(key: str) -> str:
        value = summary.get(key)
        return "-" if value is None else f"{value * 100:.1f}%"
    in_run = ""
    if summary.get("profile_mean_abs_step_error") is not None:
        in_run = (f"; from the profile alone (kernels timed in isolation): mean "
                  f"{share('profile_mean_abs_step_error')}, worst {share('profile_worst_abs_step_error')}")
    if summary.get("in_run_mean_abs_step_error") is not None:
        in_run += (f"; {IN_RUN_LABEL}: |step error| mean {share('in_run_mean_abs_step_error')}, worst "
                  f"{share('in_run_worst_abs_step_error')}")
    console.print(f"[bold]summary[/bold]  |step error| (ahead of time) mean {share('mean_abs_step_error')}, worst "
                  f"{share('worst_abs_step_error')}{in_run}; |layer error| median {share('layer_median_error')}, 90th "
                  f"percentile {share('layer_p90_error')}; |memory error| mean {share('memory_error')}; noise floor "
                  f"{share('noise_floor')}")


def rel_range(lo: float | None, hi: float | None) -> str:
    """A spread of relative errors over repeats, ``+12%..+20%``."""
    return "-" if lo is None or hi is None else f"{lo * 100:+.0f}%..{hi * 100:+.0f}%"


def validate_progress(row: dict) -> None:
    """One line on stderr as each plan finishes."""
    again = f" (repeat {row['repeat'] + 1})" if row.get("repeat") else ""
    in_run = row.get("in_run_predicted_step_s")
    alone = row.get("profile_predicted_step_s")
    beside = "" if alone is None else f", from the profile alone {fmt.seconds(alone)} ({pct(row['profile_step_rel'])})"
    if in_run is not None:
        beside += f", from in-run kernel times {fmt.seconds(in_run)} ({pct(row['in_run_step_rel'])})"
    err_console.print(f"measured {escape(row['name'])}{again}: step {fmt.seconds(row['measured_step_s'])}, predicted "
                      f"{fmt.seconds(row['predicted_step_s'])} ({pct(row['step_rel'])}){beside}", markup=True,
                      emoji=False)


def validate_reused(row: dict, path: str) -> None:
    """One line on stderr for a plan an interrupted run measured: its row is reused."""
    err_console.print(f"measured {escape(row['name'])}: step {fmt.seconds(row['measured_step_s'])} in an earlier "
                      f"run ({escape(path)}), not run again", markup=True, emoji=False)


def validate_interrupted(rows: list[dict], planned: int, kept: str | None, cache: str | None, command: str,
                         repeats: int = 1) -> None:
    """Two lines on stderr for a validate stopped by Ctrl-C: how many plans (runs, with --repeats)
    finished and where they are kept (or how far planning got), and the command that resumes."""
    if not planned:
        what = "while planning, before any plan ran" + (f"; kernels timed so far saved to {cache}" if cache else "")
        what += f"; the plans measured earlier stay in {kept}" if kept else ""
    else:
        names = f" ({', '.join(r['name'] for r in rows)})" if rows else ""
        what = (f"{len(rows)} of {planned} plans finished{names}; " if repeats == 1 else
                f"{len(rows)} of {planned * repeats} runs finished; ") + (f"kept in {kept}" if kept else "nothing to keep")
    err_console.print(f"[bold yellow]interrupted:[/bold yellow] {escape(what)}", markup=True, emoji=False)
    err_console.print(f"resume with: {escape(command)}", markup=True, emoji=False, soft_wrap=True)
