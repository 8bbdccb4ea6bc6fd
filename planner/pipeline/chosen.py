"""The pipeline a search chose, as the answer: its stages' solutions and pipelined step, priced by
the cost model and checked against the search's step (:func:`predicted`), its
:class:`~planner.pipeline.choice.PipelineChoice` with the search's statistics (:func:`choice`), and
a best so far offered to the time budget as the plan a stop would answer (:func:`offer`). ``search``
is :class:`planner.pipeline.pair_search.PairSearch` (pure).
"""

from __future__ import annotations

import time
from dataclasses import replace

from costmodel.step.pipeline import PipelinePrediction, StagePrediction, kept_micro_batches, unpaired_expert_s
from planner.pipeline import interleave
from planner.pipeline.choice import Best, Candidate, PipelineChoice, proven_gap
from planner.pipeline.stack import roles
from planner.problem.solve import PlanMismatch


def offer(search, best: Best, out: list[Candidate], pending: list, start: float) -> None:
    """Offer ``best`` to the budget as the plan so far, with the least lower bound of every pair
    (those not tried yet by their bounds); finishing it makes its :class:`PipelineChoice`."""
    budget = search.settings.budget
    rest = [Candidate(s2, m2, b2, skipped="interrupted", lower_s=b2, chunks=v2) for b2, s2, m2, v2, _ in pending]
    inter = search.interleaving  # a pair not interleaved yet: its interleavings may run below its 1F1B bound
    lower = min([c.lower_s if inter is None or c.chunks != 1 or c.lower_s == float("inf")
                 else inter.lower(c.stages, c.micro_batches, c.lower_s) for c in out + rest], default=best.step_s)
    if budget.best is not None and best.step_s >= budget.best.step_s:
        budget.bound(lower)
        return
    what = f"pipeline {best.stages}, {best.micro_batches} micro-batches" + (
        f", {best.chunks} chunks a device" if best.chunks > 1 else "")
    got = choice(search, best, tuple(out) + tuple(rest), time.perf_counter() - start)  # now: Ctrl-C answers at once
    budget.offer(best.step_s, what, lambda: replace(got, stats={**got.stats, "proven_gap": budget.best.gap,
                                                              "interrupted": True}), lower)


def predicted(search, best) -> tuple[list, PipelinePrediction]:
    """``best``'s stage solutions and its pipelined step as the cost model prices it, checked against
    the search's step."""
    step, stages, m, cut, solver = best.step_s, best.stages, best.micro_batches, best.cut, best.solver
    micro, rl, stack = search.batch // m, roles(stages), search.stack
    sols, preds, start = [], [], 0
    for s, k in enumerate(cut if best.chunks == 1 else ()):
        net = stack.stage(k, rl[s])
        sol = solver.solve((k, rl[s]), net, search.kept(stages, s, m), search.tied(stages, s, net))
        sols.append(sol)
        layers = stack.layers(start, k, rl[s])
        one = sol.predict(micro, search.view(stages), search.compute, search.settings)
        # the micro-batches the stage holds (a middle stage's solve holds the most any middle stage does,
        # so one solution serves them all: the plan states each stage's own, as `dnnplan predict` does)
        preds.append(StagePrediction(s, (layers[0].name, layers[-1].name), search.p // stages, one,
                                     search.p2p_s(stages, s, micro),
                                     kept_micro_batches(search.schedule, stages, s, m),
                                     sol.tied_s, unpaired_expert_s(search.schedule, stages, s, m, 1, one)))
        start += k
    pred = PipelinePrediction(stack.network.name, search.batch, search.p, m, search.schedule, tuple(preds))
    if best.chunks > 1:
        sols = list(best.solutions)
        pred = interleave.predict(stack, search.batch, search.p, stages, m, best.chunks, best.solutions,
                                  search.machine, search.compute, search.settings, step)
    searched = interleave.searched_step(pred)  # the plan's step adds +experts' all-to-alls run alone
    if abs(searched - step) > 1e-9 * step:
        raise PlanMismatch(f"the pipelined step {searched!r} s differs from the search's {step!r} s")
    return sols, pred


def choice(search, best, candidates: tuple[Candidate, ...], seconds: float) -> PipelineChoice:
    step, stages, m, cut, solver = best.step_s, best.stages, best.micro_batches, best.cut, best.solver
    key = (id(best.solver), stages, m, best.chunks, cut, step)  # predicted once: offered, then chosen
    if key not in search.predicted:
        search.predicted = {key: predicted(search, best)}
    sols, pred = search.predicted[key]
    stack = search.stack
    stats = {"seconds": round(seconds, 3), "tried": sum(1 for c in candidates if not c.skipped),
             "skipped": sum(1 for c in candidates if c.skipped), "stage_solves": search.solves,
             "worst_stage_gap": search.worst_gap, "relaxed_stage_solves": solver.relaxed,
             "open_stage_solves": solver.open,
             "closed_pairs": sum(1 for c in candidates if c.closed and c.key != (stages, m, best.chunks)),
             "proven_gap": proven_gap(step, candidates), "memory_limit_bytes": search.limit,
             "time_limit_s": None if search.settings.budget is None else search.settings.budget.stated_s}
    return PipelineChoice(stack, search.batch, search.p, stages, m, cut, tuple(sols), pred, candidates, stats,
                          best.chunks)
