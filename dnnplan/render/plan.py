"""Output of `dnnplan plan`: the answer first (dnnplan.render.answer), then the per-layer plan, the
convolution algorithms, the baselines, the solver's detail, sweeps and pipelines; and the same
answer as JSON for scripts (:func:`plan_json`)."""

from __future__ import annotations

import dataclasses
import math

from rich.markup import escape
from rich.table import Table

from costmodel.step.breakdown import step_terms
from costmodel.calls.algorithms import CONV_ALGORITHMS, attention_default, is_recomputed, kernel_algorithm
from costmodel.choices.training import DEFAULT_FRAMEWORK
from costmodel.comm.overlap import resolve_overlap
from costmodel.step.pipeline import pipeline_json
from dnnplan.render import fmt
from dnnplan.render.answer import (Facts, assumptions_line, comm_line, gap_line, header_lines, layout_line,
                                   memory_json, memory_mfu_line, step_line, train_line, uncovered_words)
from dnnplan.render.tables import console, memory_line, pipeline_table
from executor.session.runnable import cannot_run
from executor.session.step_choice import fastest
from networks.writing import shell_word
from planner.problem.solve import speedup, strategy_mix
from planner.plan.layout_by_axis import axes_line, plan_axes
from planner.plan.plan import Plan
from planner.plan.plan_file import plan_to_dict
from profiler.context import Context

__all__ = ["Facts", "answer", "facts", "plan_json", "plan_table", "step_context_dict", "console"]

#: networks of at most this many layers get their per-layer tables without --layers
SMALL_NETWORK = 24


def answer(plan: Plan, got, facts: Facts, layers: bool) -> None:
    """The plan, summary first: ``got`` is the pipeline search's choice for a pipelined plan (else None)."""
    for line in header_lines(facts):
        console.print(line)
    if facts.why:
        console.print(f"{facts.why}; so the pipeline search ran (pipeline stages, micro-batches)")
    if facts.timed and fastest(list(facts.timed)).prediction is not None:
        context_step_line(list(facts.timed))
    else:
        console.print(step_line(plan.step_s, plan.breakdown))
    if plan.comm and (line := comm_line(plan.comm, plan.choices.overlap)) is not None:
        console.print(line)
    limit = facts.limit_bytes or plan.solver.get("memory_limit_bytes")
    console.print(memory_mfu_line(plan.memory_peak_bytes, limit, plan.mfu, plan.memory_allocated_bytes))
    if facts.train is not None:
        console.print(train_line(facts.train))
    if plan.memory_parts and got is None:
        console.print(memory_line(plan.memory_parts))
    if got is None:
        again = sum(is_recomputed(lp.algorithm) for lp in plan.layers)  # flash+recompute too, as the axes count
        console.print(layout_line([lp.strategy.label for lp in plan.layers])
                      + (f"; {fmt.many(again, 'layer')} recompute{'s its' if again == 1 else ' their'} forward in "
                         "backward (memory binds)" if again else ""))
        console.print(gap_line(plan.solver))
    else:
        pipeline_summary(got)
    if facts.axes:
        console.print(escape(facts.axes))
    if facts.zero_why:  # after the layout it chose between (the step stays in the first lines)
        console.print(escape(facts.zero_why))
    if (line := assumptions_line(facts)) is not None:
        console.print(line)
    if plan.choices.framework != DEFAULT_FRAMEWORK:
        console.print(f"framework: {plan.choices.framework} (its kernels, host and overlap priced in the search; its "
                      "memory in the limit)", markup=False,
                      emoji=False)
    detailed = layers or facts.layers <= SMALL_NETWORK
    if got is None:
        if facts.timed:
            context_table(plan, list(facts.timed))
        else:
            baselines_table(plan)
        if detailed:
            plan_table(plan)
    elif detailed:
        pipeline_details(got)
    if not detailed:
        console.print(f"[dim]per-layer tables: --layers ({facts.layers} layers)[/dim]")


def plan_table(plan: Plan) -> None:
    """Per layer: its split, algorithm, compute, communication and memory; the memory by part, the
    convolution algorithms weighed and the solver's detail."""
    t = Table(title=f"per layer (batch {plan.batch} on {plan.devices} devices)", title_justify="left")
    for col in ("layer", "strategy", "algorithm", "fwd", "bwd", "comm", "memory"):
        t.add_column(col, justify="left" if col in ("layer", "strategy", "algorithm") else "right",
                     overflow="fold")
    for lp in plan.layers:
        t.add_row(lp.name, lp.strategy.label, lp.algorithm or "-", fmt.seconds(lp.fwd_s), fmt.seconds(lp.bwd_s),
                  fmt.seconds(lp.comm_s), fmt.nbytes(lp.memory_bytes))
    console.print(t)
    mix = ", ".join(f"{k} x{v}" for k, v in strategy_mix(plan).items())
    console.print(f"splits by dimension: {mix}")
    algorithms_table(plan)
    solver_line(plan)


def step_context_dict(timed: list) -> dict | None:
    """``plan --json``'s ``step_context``: per candidate, its step predicted from its kernels timed
    in its step's context and from the profile alone, and which was chosen (None: no check)."""
    if not timed:
        return None
    return {"chosen": fastest(timed).name,
            "plans": {t.name: {"step_s": t.step_s, "profile_step_s": t.alone_s} for t in timed}}


def context_table(plan: Plan, timed: list) -> None:
    """Machine `local`: the plan beside the uniform plans, each predicted as `dnnplan execute`
    predicts it (its kernels and collectives timed again in its step's order and context, the
    executor's time between kernels, the wait for the slowest rank): the plan is the fastest
    there, so none listed is faster (executor.session.step_choice)."""
    chosen = fastest(timed)
    limit = plan.solver.get("memory_limit_bytes")
    t = Table(title="against the uniform plans, as `dnnplan execute` predicts each (kernels timed in the step's "
                    "context)", title_justify="left")
    for col in ("plan", "step", "profile alone", "peak memory", "this plan is"):
        t.add_column(col, justify="left" if col in ("plan", "this plan is") else "right", overflow="fold")
    for c in [chosen] + [c for c in timed if c is not chosen]:
        name = f"[bold]this plan ({c.name})[/bold]" if c is chosen else c.name
        fits = limit is None or c.plan.memory_peak_bytes <= limit * (1 + 1e-9)
        ratio = "" if c is chosen else (f"{c.step_s / chosen.step_s:.2f}x as fast" if fits
                                        else "[yellow]not comparable: it does not fit[/yellow]")
        t.add_row(name, fmt.seconds(c.step_s), fmt.seconds(c.alone_s), fmt.nbytes(c.plan.memory_peak_bytes), ratio)
    console.print(t)


def context_step_line(timed: list) -> None:
    """Machine `local`: the chosen plan's step as `dnnplan execute` predicts it, by term."""
    chosen = fastest(timed)
    if chosen.prediction is not None:
        console.print(step_line(chosen.step_s, step_terms(chosen.prediction))
                      + f" [dim](as `dnnplan execute` predicts it; from the profile alone {fmt.seconds(chosen.alone_s)})[/dim]")


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
    """This plan beside the plans a user would otherwise pick; one that does not fit the memory
    limit is marked so, never shown as a speed-up (planner.problem.baselines)."""
    if not plan.baselines:
        return
    limit = plan.solver.get("memory_limit_bytes")
    # each baseline with every convolution's fastest algorithm, as the plan (planner.problem.baselines);
    # `dnnplan predict NETWORK --strategy data` prices the default one (im2col): slower where it differs
    convolves = any(lp.algorithm in CONV_ALGORITHMS for lp in plan.layers)
    t = Table(title="against the baselines (same cost model" + (", each convolution's fastest algorithm)" if convolves
                                                                else ")"), title_justify="left")
    for col in ("strategy", "step", "peak memory", "this plan is"):
        t.add_column(col, justify="left" if col in ("strategy", "this plan is") else "right", overflow="fold")
    t.add_row("[bold]this plan[/bold]", fmt.seconds(plan.step_s), fmt.nbytes(plan.memory_peak_bytes), "")
    for b in plan.baselines:
        if not b.fits:
            over = f" > {fmt.nbytes(limit)}" if limit else ""
            t.add_row(b.name, fmt.seconds(b.step_s), fmt.nbytes(b.memory_peak_bytes) + over,
                      "[yellow]not comparable: the baseline does not fit[/yellow]")
            continue
        t.add_row(b.name, fmt.seconds(b.step_s), fmt.nbytes(b.memory_peak_bytes), f"{speedup(plan, b):.2f}x as fast")
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


def pipeline_summary(got) -> None:
    """The pipeline search's choice in two lines: the layout, and the gap proven to the optimum."""
    runs: list[list] = []  # consecutive stages with one mix of splits, as [first, last, mix]
    for s, sol in zip(got.prediction.stages, got.solutions):
        m = stage_mix(sol.strategies)
        if runs and runs[-1][2] == m:
            runs[-1][1] = s.index
        else:
            runs.append([s.index, s.index, m])
    mix = "; ".join((f"stage {a}" if a == b else f"stages {a}-{b}") + f": {m}" for a, b, m in runs)
    again = sum(is_recomputed(algo) for sol in got.solutions for algo in sol.algorithms.values())
    mix += f"; recomputation on {fmt.many(again, 'layer')} of the stages (memory binds)" if again else ""
    if got.stages == 1 and got.micro_batches == 1:
        console.print(f"layout: no pipeline, the whole batch at once; splits {mix}")
    elif got.stages == 1:
        console.print(f"layout: no pipeline; {got.micro_batches} micro-batches of {got.micro_batch} a step "
                      f"(gradient accumulation); splits {mix}")
    else:
        console.print(f"layout: pipeline of {got.stages} stages x {got.devices // got.stages} devices, "
                      f"{got.micro_batches} micro-batches of {got.micro_batch}, {_schedule(got)}, "
                      f"blocks a stage {_cut(got.cut)}; splits {mix}")
    console.print(proof_line(got.stats))


def _schedule(got) -> str:
    return f"interleaved 1F1B ({got.chunks} chunks a device)" if got.chunks > 1 else got.prediction.schedule.upper()


def _cut(cut) -> str:
    return f"{cut[0]} each" if len(set(cut)) == 1 else "/".join(map(str, cut))


def wrote_line(made, out: str, device_kind: str, devices: int) -> str:
    """``wrote FILE (...)`` after a plan written by `plan --out` or `predict --out`: the executor's
    run suggested only for a plan it runs on the machine's kind of device
    (executor.session.runnable.cannot_run), else a prediction of the file."""
    runs = cannot_run(made, out, "cupy" if device_kind == "gpu" else "numpy") is None
    how = f"run it with `dnnplan execute {shell_word(out)} --ranks {devices}`" if runs else \
        f"evaluate it, or an edited copy, with `dnnplan predict {shell_word(out)}`"
    return f"wrote {out} ({how})"


def pipeline_details(got) -> None:
    """The stages' table, the fullest stage's memory by part (the peak's) and how the search went (--layers)."""
    pred = got.prediction
    pipeline_table(pred)
    fullest = max(pred.stages, key=lambda s: s.memory_peak_bytes)
    console.print(f"{memory_line(fullest.memory_parts)} (stage {fullest.index}, the peak's)")
    st = got.stats
    gap = (f"; pairs compared with memory-bound stages solved by Lagrangian relaxation, worst gap "
           f"{st['worst_stage_gap']:.2%}" if st["worst_stage_gap"] else "")
    console.print(f"searched {st['tried']} (pipeline, micro-batch) pairs, {st['skipped']} more ruled out by their "
                  f"bounds or left at the time limit, {st['stage_solves']} stage solves in {st['seconds']:.1f} s{gap}")
    if st.get("relaxed_stage_solves"):
        left = st["open_stage_solves"]
        console.print(f"the chosen pair's {st['relaxed_stage_solves']} memory-bound stage solves: "
                      + ("every gap closed, each stage optimal" if not left else f"{left} left with a gap"))


def proof_line(stats: dict) -> str:
    """The gap proven between the choice and the best pipelined plan (planner.pipeline.search)."""
    again = (f"; {stats['closed_pairs']} other pairs searched again with their stages' gaps closed"
             if stats.get("closed_pairs") else "")
    gap, tol = stats["proven_gap"], stats.get("prove_tolerance", 0.0)
    if stats.get("interrupted"):
        return (f"[yellow]interrupted[/yellow]: the best plan found so far, within {gap:.1%} of the "
                "optimum (proven)")
    if stats.get("uncovered_zero"):
        return uncovered_words(gap, stats["uncovered_zero"]) + again
    if gap <= 0:
        return f"proven optimal: no other pipeline or micro-batch count is faster{again}"
    if gap <= tol:
        return f"within {gap:.2%} of the optimum (proven; pairs that could win by less than {tol:.0%}, --gap, are left){again}"
    return (f"within [bold]{gap:.1%}[/bold] of the optimum (proven: other pairs, by their bounds or their stages' "
            f"Lagrangian gaps, could still be faster; a longer --time-limit or --prove closes them){again}")


def stage_mix(strategies) -> str:
    """A stage's splits, each with its count of layers, commonest first: the first three, and how
    many layers the others take (the counts sum to the stage's layers)."""
    out: dict[str, int] = {}
    for strat in strategies.values():
        out[strat.label] = out.get(strat.label, 0) + 1
    ranked = sorted(out.items(), key=lambda kv: -kv[1])
    rest = sum(v for _, v in ranked[3:])
    more = f" and {fmt.many(len(ranked) - 3, 'other split')} x{rest}" if rest else ""
    return " ".join(f"{k} x{v}" for k, v in ranked[:3]) + more


def facts(ctx: Context, answer, plan: Plan, got, defaults: tuple[str, ...], limit: float | None,
          train=None) -> Facts:
    """What the summary states of an answer (dnnplan.render.answer): ``got`` the pipeline search's
    choice (else None), ``defaults`` the flags assumed, ``limit`` the memory limit asked for,
    ``train`` a token budget's time and cost."""
    ops = {layer.name: layer.op for layer in ctx.network.layers}
    attention = tuple(sorted({kernel_algorithm(lp.algorithm) or attention_default(ctx.machine)  # recompute: its own
                              for lp in plan.layers if ops.get(lp.name) == "attention"}))
    choices = answer.settings.choices
    return Facts(ctx.network.name, ctx.devices, ctx.machine.name, ctx.machine.device.name, ctx.choices.precision,
                 choices.sharded_optimizer.label, ctx.batch, defaults, answer.why, tuple(answer.timed),
                 len(ctx.network.layers), "batchnorm2d" in ops.values(), attention,
                 resolve_overlap(choices.overlap, ctx.machine).label, ctx.choices.batch_norm,
                 ctx.choices.moe_dispatch if "moe" in ops.values() else "",
                 axes_line(plan_axes(ctx.network, plan, got), pipeline_axis(got, plan), choices.zero),
                 "; ".join(x for x in (answer.zero_why, answer.memory_note) if x),
                 limit if limit is not None else ctx.machine.device.mem_capacity_bytes, train)


def pipeline_axis(got, plan: Plan) -> str:
    """The pipeline axis in words: the stages, schedule and micro-batches, or none."""
    if got is None:
        return "no pipeline, the whole batch at once"
    if got.stages == 1:
        return (f"no pipeline, {got.micro_batches} micro-batches of {got.micro_batch} (gradient accumulation)"
                if got.micro_batches > 1 else "no pipeline, the whole batch at once")
    how = "interleaved 1F1B, " + f"{got.chunks} chunks a device" if got.chunks > 1 else plan.pipeline.schedule.upper()
    return f"pipeline {got.stages} ({how}), {got.micro_batches} micro-batches of {got.micro_batch}"


def plan_json(ctx: Context, answer, plan: Plan, got, train=None) -> dict:
    """`dnnplan plan --json`: the plan file's fields, the step context, the layout by axis, for a
    pipelined plan the search's choice and every candidate it weighed, and with ``train`` a token
    budget's time and cost."""
    limit = plan.solver.get("memory_limit_bytes") or ctx.machine.device.mem_capacity_bytes
    out = {**plan_to_dict(plan), "memory_allocated_bytes": plan.memory_allocated_bytes,
           "memory_reserved_bytes": plan.memory_peak_bytes, **memory_json(plan.memory_peak_bytes, limit),
           "step_context": step_context_dict(list(answer.timed))}
    out.setdefault("framework", plan.choices.framework)  # as predict's JSON names it, given or not
    if train is not None:
        out["train"] = train.json()
    out["axes"] = {**plan_axes(ctx.network, plan, got), "zero": answer.settings.choices.zero}
    if got is not None:
        # a one-stage pipeline's layers and overlap as the plan file has them, not as predict's JSON does
        piped = {k: v for k, v in pipeline_json(got.prediction).items() if k not in ("layers", "overlap")}
        out.update({**piped, "cut_blocks": list(got.cut), "mfu": plan.mfu,
                    "micro_batch": got.micro_batch, "search": got.stats,
                    "tried": [_finite(c.__dict__) for c in got.candidates]})
    if answer.why:
        out["why_pipelined"] = answer.why
    if answer.memory_note:
        out["memory_note"] = answer.memory_note
    if answer.zero_why:
        out["zero_choice"] = {"why": answer.zero_why,
                              "weighed": [_finite(dataclasses.asdict(w)) for w in answer.weighed]}
    return out


def _finite(row: dict) -> dict:
    """A candidate's fields for JSON: an infinite bound (nothing fits) as null, so the output
    stays strict JSON."""
    return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in row.items()}
