"""Rich output of `dnnplan plan`: the per-layer plan, totals, baselines, solver line, sweeps."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from costmodel.optimizer import Optimizer
from dnnplan.render import fmt
from dnnplan.render.tables import console, memory_line, pipeline_table
from executor.session.step_choice import fastest
from planner.optimize import speedup, strategy_mix
from planner.plan import Plan


def plan_table(plan: Plan) -> None:
    t = Table(title=f"plan for {plan.network_name}: batch {plan.batch} on {plan.devices} x {plan.machine}, "
                    f"{plan.precision}, {Optimizer(plan.optimizer, plan.zero).label}", title_justify="left")
    for col in ("layer", "strategy", "algorithm", "fwd", "bwd", "comm", "memory"):
        t.add_column(col, justify="left" if col in ("layer", "strategy", "algorithm") else "right")
    for lp in plan.layers:
        t.add_row(lp.name, lp.strategy.label, lp.algorithm or "-", fmt.seconds(lp.fwd_s), fmt.seconds(lp.bwd_s),
                  fmt.seconds(lp.comm_s), fmt.nbytes(lp.memory_bytes))
    console.print(t)
    fwd = sum(lp.fwd_s for lp in plan.layers)
    bwd = sum(lp.bwd_s for lp in plan.layers)
    comm = sum(lp.comm_s for lp in plan.layers)
    mix = ", ".join(f"{k} x{v}" for k, v in strategy_mix(plan).items())
    console.print(f"[bold]step {fmt.seconds(plan.step_s)}[/bold] (compute fwd {fmt.seconds(fwd)} + bwd "
                  f"{fmt.seconds(bwd)}, communication {fmt.seconds(comm)}, rest: optimiser update);  "
                  f"peak memory {fmt.nbytes(plan.memory_peak_bytes)} per device;  model FLOP utilisation "
                  f"{plan.mfu:.1%};  splits: {mix}")
    if plan.memory_parts:
        console.print(memory_line(plan.memory_parts))
    algorithms_table(plan)
    baselines_table(plan)
    solver_line(plan)


def step_context_dict(timed: list) -> dict | None:
    """``plan --json``'s ``step_context``: per candidate, its step predicted from its kernels timed
    in its step's context and from the profile alone, and which was chosen (None: no check)."""
    if not timed:
        return None
    return {"chosen": fastest(timed).name,
            "plans": {t.name: {"step_s": t.step_s, "profile_step_s": t.alone_s} for t in timed}}


def step_context_line(timed: list) -> None:
    """The candidates' steps predicted in their step's context (executor.session.step_choice), and the choice."""
    got = step_context_dict(timed)
    if got is None:
        return
    steps = ", ".join(f"{name} {fmt.seconds(v['step_s'])}" for name, v in got["plans"].items())
    console.print(f"in step context (each plan's kernels and collectives timed again in its step's order, "
                  f"before any run): {steps}; "
                  f"the plan: {got['chosen']} (the step above is the profile's, kernels timed alone)")


ALGORITHM_COLUMNS = ("direct", "im2col", "fft", "winograd")


def algorithms_table(plan: Plan) -> None:
    """Why each convolution runs the algorithm it does: every algorithm's compute time under the
    layer's split (layers with the same numbers share a row), the chosen one in bold."""
    groups: dict[tuple, list[str]] = {}
    chosen: dict[tuple, str] = {}
    for lp in plan.layers:
        if lp.alternatives:
            key = (lp.alternatives, lp.algorithm)
            groups.setdefault(key, []).append(lp.name)
            chosen[key] = lp.algorithm
    if not groups:
        return
    t = Table(title="convolution algorithms: forward + backward compute per step under each layer's split "
                    "(docs/costmodel.md, Convolution algorithms)", title_justify="left")
    t.add_column("layers", justify="left")
    for col in ALGORITHM_COLUMNS:
        t.add_column(col, justify="right")
    t.add_column("chosen", justify="left")
    t.add_column("why", justify="left")
    for (alts, algo), names in groups.items():
        secs = {a: s for a, s, _ in alts}
        work = {a: w for a, _, w in alts}
        fastest = min(alts, key=lambda r: (r[1], r[2]))[0]
        cells = [(f"[bold]{fmt.seconds(secs[a])}[/bold]" if a == algo else fmt.seconds(secs[a])) if a in secs
                 else "n/a" for a in ALGORITHM_COLUMNS]
        ties = [a for a, s, w in alts if a != algo and (s, w) == (secs[algo], work[algo])]
        if algo == fastest:
            why = "fastest" + (f" (ties {', '.join(ties)}: the first listed is kept)" if ties else "")
        else:
            why = (f"{fastest} is {secs[algo] / secs[fastest]:.2f}x faster but needs "
                   f"{fmt.nbytes(work[fastest])} of workspace: the memory limit binds")
        label = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} alike)"
        t.add_row(label, *cells, algo, why)
    console.print(t)


def baselines_table(plan: Plan) -> None:
    if not plan.baselines:
        return
    t = Table(title="baselines (same cost model)", title_justify="left")
    for col in ("strategy", "step", "peak memory", "plan speedup"):
        t.add_column(col, justify="left" if col == "strategy" else "right")
    t.add_row("[bold]this plan[/bold]", fmt.seconds(plan.step_s), fmt.nbytes(plan.memory_peak_bytes), "1.00x")
    for b in plan.baselines:
        t.add_row(b.name, fmt.seconds(b.step_s), fmt.nbytes(b.memory_peak_bytes), f"{speedup(plan, b):.2f}x")
    console.print(t)


def solver_line(plan: Plan) -> None:
    s = plan.solver
    if not s:
        return
    gap = "none" if s.get("gap") is None else f"{s['gap']:.3g}"
    limit = "none" if s.get("time_limit_s") is None else f"{s['time_limit_s']:g} s"
    console.print(f"solver {s.get('solver')} ({s.get('status')}, gap {gap}, time limit {limit}); "
                  f"{s.get('layers')} layers, {s.get('candidates')} candidates, reduced to "
                  f"{s.get('reduced_nodes')} node(s); build {s.get('build_s')} s, solve {s.get('solve_s')} s, "
                  f"total {s.get('total_s')} s")
    if s.get("detail"):
        console.print(f"[dim]{s['detail']}[/dim]")


def sweep_table(rows: list[dict], network: str, batch: int, machine: str) -> None:
    t = Table(title=f"strong scaling of {network}, batch {batch} on {machine}", title_justify="left")
    for col in ("devices", "plan step", "speedup", "efficiency", "data-parallel step", "speedup ", "efficiency ",
                "plan / data", "strategy mix"):
        t.add_column(col, justify="left" if col == "strategy mix" else "right")
    for r in rows:
        if r.get("error"):
            t.add_row(str(r["devices"]), "[yellow]no plan[/yellow]", "", "", "", "", "", "", r["error"][:80])
            continue
        t.add_row(str(r["devices"]), fmt.seconds(r["step_s"]), f"{r['speedup']:.2f}x", f"{r['efficiency']:.0%}",
                  fmt.seconds(r["data_step_s"]), f"{r['data_speedup']:.2f}x", f"{r['data_efficiency']:.0%}",
                  f"{r['data_step_s'] / r['step_s']:.2f}x",
                  ", ".join(f"{k} x{v}" for k, v in r["mix"].items()))
    console.print(t)
    console.print("speedup and efficiency are relative to the first device count that has a plan")


@contextmanager
def search_progress(what: str, disable: bool = False):
    """Yields a callback ``(done, total)`` that advances a bar on stderr (none with ``disable``)."""
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True, disable=disable)
    task = None
    with bar:
        def tick(done: int, total: int) -> None:
            nonlocal task
            if task is None:
                task = bar.add_task(what, total=total)
            bar.update(task, completed=done)
        yield tick


def pipeline_choice(got, mfu: float) -> None:
    """The pipeline search's answer (planner.pipeline_search.PipelineChoice): its stages, the
    chosen degrees and how the search went."""
    pred = got.prediction
    pipeline_table(pred)
    stage0 = pred.stages[0]
    parts = dict(stage0.micro.memory_parts)
    parts["activations"] = parts.get("activations", 0) * stage0.kept_micro_batches
    runs: list[list] = []  # consecutive stages with one mix of splits, as [first, last, mix]
    for s, sol in zip(pred.stages, got.solutions):
        m = _mix(sol.strategies)
        if runs and runs[-1][2] == m:
            runs[-1][1] = s.index
        else:
            runs.append([s.index, s.index, m])
    mix = "; ".join((f"stage {a}" if a == b else f"stages {a}-{b}") + f": {m}" for a, b, m in runs)
    console.print(f"chosen: pipeline {got.stages} x {got.devices // got.stages} devices a stage, "
                  f"{got.micro_batches} micro-batches of {got.micro_batch}, 1F1B, blocks per stage "
                  f"{'/'.join(map(str, got.cut))};  model FLOP utilisation {mfu:.1%}")
    console.print("splits: " + mix)
    console.print(memory_line(parts) + " (stage 0)")
    st = got.stats
    gap = (f"; pairs compared with memory-bound stages solved by Lagrangian relaxation, worst gap "
           f"{st['worst_stage_gap']:.2%}" if st["worst_stage_gap"] else "")
    console.print(f"searched {st['tried']} (pipeline, micro-batch) pairs, {st['skipped']} more ruled out by the "
                  f"physics bound, {st['stage_solves']} stage solves in {st['seconds']:.1f} s{gap}")
    if st.get("relaxed_stage_solves"):
        left = st["open_stage_solves"]
        console.print(f"the chosen pair's {st['relaxed_stage_solves']} memory-bound stage solves: "
                      + ("every gap closed, each stage optimal" if not left else f"{left} left with a gap"))
    console.print(proof_line(st))


def proof_line(stats: dict) -> str:
    """Whether another (pipeline, micro-batch) pair could still beat the choice (planner.pipeline_search)."""
    again = (f"{stats['closed_pairs']} other pairs searched again with their stages' gaps closed; "
             if stats.get("closed_pairs") else "")
    gap, tol = stats["proven_gap"], stats.get("prove_tolerance", 0.0)
    if gap <= 0:
        return f"{again}proven: no other pair is faster"
    if gap <= tol:
        return f"{again}proven within {gap:.2%}: no pair could win by more (pairs within {tol:.0%}, --gap, are left)"
    return (f"{again}another pair could still be up to {stats['proven_gap']:.1%} faster "
            "(its stages' Lagrangian gaps; a longer --prove closes them)")


def _mix(strategies) -> str:
    out: dict[str, int] = {}
    for strat in strategies.values():
        out[strat.label] = out.get(strat.label, 0) + 1
    return " ".join(f"{k} x{v}" for k, v in sorted(out.items(), key=lambda kv: -kv[1])[:3])
