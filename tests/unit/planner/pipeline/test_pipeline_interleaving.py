"""The default schedule's interleaving inside the pipeline search (planner.pipeline.triples.Interleaving):
each pair that becomes the best 1F1B pair has its interleavings weighed, no interleaving beats its
pair's 1F1B bound times the saving, and under a ceiling no 1F1B pair beats, the interleavings that
may beat it are still searched."""

from __future__ import annotations

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError
from planner.pipeline.search import NoPipelineFits, SearchOutOfTime, search_pipeline
from planner.pipeline.triples import chunk_counts
from planner.problem.solve import Settings
from profiler import context

from tests.support.pipeline_cases import PROVE, SETTINGS, gpt4


def test_the_default_schedule_interleaves_each_pair_that_became_the_best(tmp_path):
    """Under the default schedule every (S, m) that was the best 1F1B pair when it was searched has
    its interleaved triples weighed, not only the last best (planner.pipeline.triples.interleaving):
    the 4-block GPT on 8 devices at batch 8 under 2.4 MiB finds (2, 8) first, whose 2 chunks a device
    are weighed (searched, or bounded out against the step then held), then (4, 1), which cannot
    interleave 4 blocks (the last best alone weighed no interleaving)."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.0025
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, schedule="default")
    plain = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, schedule="1f1b")
    assert got.prediction.step_s <= plain.prediction.step_s * (1 + 1e-12)
    best, leaders = float("inf"), []
    for c in got.candidates:
        if c.chunks == 1 and c.step_s is not None and c.step_s < best:
            leaders.append((c.stages, c.micro_batches))
        best = min(best, c.step_s or best)
    assert (2, 8) in leaders and not chunk_counts(4, got.stages, got.micro_batches, INTERLEAVED)
    interleavable = [k for k in leaders if chunk_counts(4, *k, INTERLEAVED)]
    weighed = {c.key for c in got.candidates if c.chunks > 1 and (c.step_s is not None or c.skipped == "bound")}
    assert {(s, m, v) for s, m in interleavable for v in chunk_counts(4, s, m, INTERLEAVED)} <= weighed


@pytest.mark.parametrize("batch, limit_gib", [(8, 0.0015), (8, 0.0025), (16, 0.0012)])
def test_no_interleaving_beats_its_pairs_1f1b_bound_times_the_saving_and_default_finds_the_best(tmp_path, batch,
                                                                                                limit_gib):
    """Brute force, stages solved exactly: every interleavable pair's every V searched on its own;
    each triple's step is at least ``saving(S, m, V)`` times its pair's 1F1B lower bound (the bound
    the default schedule prunes other pairs' interleavings by), and the default schedule, which
    interleaves only where that bound could win, finds the best step of all (1F1B or interleaved)."""
    from planner.pipeline.triples import saving

    ctx = context.resolve(gpt4(tmp_path), 8, batch, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * limit_gib
    plain = search_pipeline(ctx.network, batch, 8, ctx.machine, ctx.compute, limit, PROVE, exact=True,
                            schedule="1f1b", prove_s=None)
    lower = {(c.stages, c.micro_batches): c.lower_s for c in plain.candidates}
    best, triples = plain.prediction.step_s, 0
    for (s, m), low in lower.items():
        if not chunk_counts(4, s, m, INTERLEAVED) or low == float("inf"):
            continue
        try:  # every V of the pair (here V = 2: 4 blocks)
            got = search_pipeline(ctx.network, batch, 8, ctx.machine, ctx.compute, limit, PROVE, exact=True,
                                  stage_counts=(s,), micro_counts=(m,), schedule=INTERLEAVED, prove_s=None)
        except DnnplanError:
            continue  # nothing fits interleaved
        for c in got.candidates:
            if c.step_s is not None:
                triples += 1
                assert c.step_s >= saving(s, m, c.chunks) * low * (1 - 1e-12)
                best = min(best, c.step_s)
    assert triples >= 2
    default = search_pipeline(ctx.network, batch, 8, ctx.machine, ctx.compute, limit, PROVE, exact=True,
                              schedule="default", prove_s=None)
    assert default.prediction.step_s <= best * (1 + 1e-9)


def test_a_ceiling_between_the_interleaved_and_the_1f1b_best_keeps_the_interleaved_plan(tmp_path):
    """gpt-tiny widened to 1,024 features, 8 blocks at 512 tokens, on 8 H100s at batch 8: the default
    schedule's best interleaves (4 stages, 2 chunks a device), faster than any 1F1B plan. Under a
    ceiling between the two every 1F1B pair's bound reaches the ceiling; the search must still weigh
    the pairs' interleavings (their bounds, the saving times the 1F1B one, below it) and answer the
    interleaved plan, not 'nothing beats the ceiling'."""
    from tests.unit.planner.test_zero_choice import _gpt

    ctx = context.resolve(_gpt(tmp_path, 1024, 512), 8, 8, "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    settings = Settings(choices=TrainingChoices(optimizer="adam", precision="bf16"))
    best = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, settings, schedule="default", prove_s=None)
    plain = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, settings, schedule="1f1b", prove_s=None)
    assert best.chunks > 1 and best.prediction.step_s < plain.prediction.step_s
    ceiling = (best.prediction.step_s + plain.prediction.step_s) / 2
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, settings, schedule="default",
                          prove_s=None, ceiling=ceiling)
    assert got.prediction.step_s == pytest.approx(best.prediction.step_s, rel=1e-9) and got.chunks == best.chunks


def test_no_bound_offered_while_searching_is_above_the_interleaved_plan_found_later(tmp_path):
    """The same widened gpt-tiny, searched under a budget: each best-so-far plan is offered with a
    lower bound on every plan's step (the progress line's gap, Ctrl-C's answer). While a pair's
    interleavings are not yet searched that bound is its 1F1B bound times the saving, never the
    1F1B bound alone: no bound offered may exceed the interleaved step the search answers."""
    from dataclasses import replace

    from planner.solvers import Budget
    from tests.unit.planner.test_zero_choice import _gpt

    ctx = context.resolve(_gpt(tmp_path, 1024, 512), 8, 8, "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    budget, bounds = Budget(None), []
    budget.listener = lambda best, _elapsed: bounds.append((best.step_s, best.lower_s))
    settings = replace(Settings(choices=TrainingChoices(optimizer="adam", precision="bf16")), budget=budget)
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, settings, schedule="default", prove_s=None)
    assert got.chunks > 1 and len(bounds) >= 2 and bounds[0][0] > got.prediction.step_s  # a 1F1B plan first
    assert all(lower <= got.prediction.step_s * (1 + 1e-9) for _, lower in bounds), bounds


def test_under_a_ceiling_a_pairs_interleavings_are_bounded_before_a_1f1b_pair_of_a_higher_bound():
    """Under a ceiling (a ZeRO stage searched after another), :meth:`Interleaving.ahead_of` bounds,
    before the 1F1B pair of bound ``b`` is searched, the interleaved triples of every pair whose
    least interleaved step (its 1F1B bound, from its searched candidate where there is one, else
    from the bounds still to search, times the saving at its most chunks) is below ``b`` and the
    step held, least first; a pair none of whose triples can beat the step held is weighed (its
    triples in the candidates at their bounds), one whose triple could is left to ``rest`` at its
    least triple bound; not a pair already weighed, nor one that cannot interleave or fit
    (llama3-70b on 64 H100s under ZeRO-2 left four pairs' interleavings at their floors, 52 s,
    below the 56.46 s held, when its time ran out after searching 1F1B pairs of higher bounds)."""
    from types import SimpleNamespace

    from planner.pipeline.choice import Candidate
    from planner.pipeline.triples import Interleaving, saving

    table = {(4, 8, 2): (9.5, True, 9.0), (2, 8, 2): (8.5, True, 8.0), (2, 8, 4): (9.6, None, 9.0)}
    asked = []

    def bound(stages, m, chunks=1, above=None):
        asked.append((stages, m, chunks))
        return table[(stages, m, chunks)]

    search = SimpleNamespace(stack=SimpleNamespace(n=8), settings=SimpleNamespace(budget=None), ceiling=9.0,
                             bound=bound)
    then = Interleaving(search, lambda stages, m, v: 1.0, 0.0, None)
    out = [Candidate(4, 8, 9.0, 9.5, lower_s=9.2)]  # searched: its 1F1B bound is its candidate's
    combos = [(9.0, 2, 8, 1, True), (9.1, 4, 8, 1, True), (9.3, 2, 4, 1, None), (9.4, 2, 16, 1, False),
              (9.6, 2, 1, 1, None), (12.0, 8, 8, 1, True)]
    # (4, 8) at its candidate's 9.2 x saving(4, 8, 2) = 7.95 (the 9.1 still to search would give
    # 7.86), (2, 8) at 9.0 x saving(2, 8, 4) = 8.25; (2, 4) weighed already; (2, 16) does not fit;
    # (2, 1) and (8, 8) cannot interleave 8 blocks
    assert 9.1 * saving(4, 8, 2) < 7.9 < 9.2 * saving(4, 8, 2) < 8.0 < 9.0 * saving(2, 8, 4) < 9.0
    for bound_s, want in ((7.9, []), (8.0, [(4, 8, 2)])):
        then.done, then.open, asked[:] = {(2, 4)}, {}, []
        then.ahead_of(bound_s, None, list(out), combos, 0.01)
        assert asked == want, bound_s
    then.done, then.open, asked[:], weighed = {(2, 4)}, {}, [], list(out)
    then.ahead_of(11.0, None, weighed, combos, 0.01)
    assert asked == [(4, 8, 2), (2, 8, 2), (2, 8, 4)]
    # (4, 8)'s one triple bounds at 9.5, above the 9.0 held: weighed at that bound
    assert then.done == {(2, 4), (4, 8)} and [(c.key, c.lower_s, c.skipped) for c in weighed[1:]] == \
        [((4, 8, 2), 9.5, "bound")]
    # (2, 8)'s V = 2 bounds at 8.5, below it: left to rest, its interleavings no faster than 8.5
    assert then.open == {(2, 8): 8.5} and then.lower(2, 8, 9.0) == 8.5
    asked[:] = []
    then.ahead_of(11.0, None, weighed, combos, 0.01)  # nothing bounded twice
    assert asked == []
    asked[:] = []
    then.done, then.open = {(2, 4)}, {}
    then.ahead_of(11.0, SimpleNamespace(step_s=7.9), list(out), combos, 0.01)  # a step held below them
    assert asked == []
    then.done, then.open = {(2, 4)}, {}
    then.ahead_of(11.0, SimpleNamespace(step_s=8.55), list(out), combos, 0.01)
    # 8.5 is within the proof's tolerance of 8.55 but below it: left open (its pair may still become
    # the best 1F1B pair, whose interleavings are searched whole), never weighed as beaten
    assert then.open == {(2, 8): 8.5} and then.done == {(2, 4), (4, 8)}
    searched = []
    then.done, then.open = {(2, 4), (4, 8)}, {(2, 8): 8.5}
    then.pair = lambda key, best, out, later, builder=None: searched.append(key) or best
    then.rest(SimpleNamespace(step_s=8.55), [Candidate(2, 8, 9.0, lower_s=9.0)], 0.01)
    assert searched == []  # 8.5 is within the tolerance of 8.55: not searched
    then.rest(SimpleNamespace(step_s=8.7), [Candidate(2, 8, 9.0, lower_s=9.0)], 0.01)
    assert searched == [(2, 8)]


def test_an_unresolved_triple_stays_in_the_gap_at_its_bound_never_as_nothing_fits(tmp_path, monkeypatch):
    """A triple whose device solves found no plan fitting every moment of its order, without proving
    none fits (planner.pipeline.interleave.Unplanned ``"unresolved"``), is a candidate with no step
    at the larger of its bound and the devices' bound: the proven gap counts it, where "nothing fits"
    (no lower bound) would have called the answer optimal."""
    from planner.pipeline import interleave  # noqa: PLC0415 - the function this test replaces
    from planner.pipeline.choice import proven_gap  # noqa: PLC0415 - this test's only use
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    plain = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, PROVE, schedule=INTERLEAVED)
    assert plain.chunks > 1 and plain.stats["proven_gap"] < 1e-3
    real, chosen = interleave.search, (plain.stages, plain.micro_batches, plain.chunks)

    def unresolved(solver, stack, stages, m, chunks, *rest):
        if (stages, m, chunks) == chosen:
            raise interleave.Unplanned(0.0, "unresolved")
        return real(solver, stack, stages, m, chunks, *rest)

    monkeypatch.setattr(interleave, "search", unresolved)
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, PROVE, schedule=INTERLEAVED)
    left = next(c for c in got.candidates if c.key == chosen)
    assert left.skipped == "unresolved" and left.step_s is None and left.lower_s == left.bound_s
    assert got.prediction.step_s > plain.prediction.step_s
    gap = got.stats["proven_gap"]
    assert gap == pytest.approx(proven_gap(got.prediction.step_s, got.candidates))
    assert gap >= 1 - left.lower_s / got.prediction.step_s > plain.stats["proven_gap"]


def test_a_search_whose_every_triple_is_unresolved_is_unfinished_at_their_bounds_never_unfit(tmp_path, monkeypatch):
    """With no plan found and every interleaved triple unresolved (not proven unfit), the search
    says it found none and how fast one could be (SearchOutOfTime at the triples' least bound, the
    stage's lower bound for the ZeRO choice), never that no pipelined plan fits."""
    from planner.pipeline import interleave  # noqa: PLC0415 - the function this test replaces
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    plain = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, PROVE, schedule=INTERLEAVED)

    def unresolved(*args):
        raise interleave.Unplanned(0.0, "unresolved")

    monkeypatch.setattr(interleave, "search", unresolved)
    with pytest.raises(SearchOutOfTime) as err:
        search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, PROVE, schedule=INTERLEAVED)
    assert not isinstance(err.value, NoPipelineFits)
    assert 0 < err.value.lower_s <= plain.prediction.step_s
    assert "unresolved" in str(err.value) and "--schedule 1f1b" in err.value.hint

