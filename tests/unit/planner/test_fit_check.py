"""planner.fit_check: planning again under a lowered limit until the predicted peak fits, and, when
planning again runs out of time, the over-limit answer's own layout planned under that limit."""

from __future__ import annotations


import re

import pytest

from networks.errors import DnnplanError
from planner.first_plan import refit_choice
from planner.fit_check import fitting, lowered_limit
from planner.problem.solve import Settings
from planner.pipeline.triples import AUTO
from planner.pipeline.search import SearchOutOfTime, search_pipeline
from planner.solvers import Budget
from costmodel.choices.training import TrainingChoices
from profiler import context

from tests.support.paths import ZOO


GIB = 2.0 ** 30


def _planner(peaks: dict[float, float], out_of_time_below: float | None = None):
    """``plan_under(limit)`` returning (limit, peak) with the peak ``peaks`` gives for the limit
    (over the limit by a fixed excess otherwise); out of time for every limit below the given one."""
    calls = []

    def plan_under(limit: float):
        calls.append(limit)
        if out_of_time_below is not None and limit < out_of_time_below:
            raise SearchOutOfTime("no plan was found within the 1 s time limit")
        return ("searched", limit, peaks.get(limit, limit + 2 * GIB))
    return plan_under, calls


def test_a_plan_over_the_limit_is_planned_again_under_a_lower_one():
    plan_under, calls = _planner({80 * GIB: 84 * GIB, 76 * GIB: 79 * GIB})
    answer, note = fitting(plan_under, lambda a: a[2], 80 * GIB)
    assert calls == [80 * GIB, 76 * GIB] and answer[2] <= 80 * GIB and "76" in note


def test_an_over_limit_answer_beaten_already_is_not_planned_again():
    """An over-limit answer that ``beaten`` says cannot win (slower than a step held elsewhere: no
    faster under a lower limit) raises ``beaten``'s error at once, with no plan again; one it lets
    pass is planned again as before, and an answer that fits is never asked about."""
    plan_under, calls = _planner({80 * GIB: 84 * GIB, 76 * GIB: 79 * GIB})
    asked = []

    def beaten(answer):
        asked.append(answer)
        return DnnplanError("no plan beats the step held")

    with pytest.raises(DnnplanError, match="step held"):
        fitting(plan_under, lambda a: a[2], 80 * GIB, beaten=beaten)
    assert calls == [80 * GIB] and asked == [("searched", 80 * GIB, 84 * GIB)]
    plan_under, calls = _planner({80 * GIB: 84 * GIB, 76 * GIB: 79 * GIB})
    answer, _ = fitting(plan_under, lambda a: a[2], 80 * GIB, beaten=lambda a: None)
    assert calls == [80 * GIB, 76 * GIB] and answer[2] <= 80 * GIB
    plan_under, calls = _planner({80 * GIB: 79 * GIB})
    fitting(plan_under, lambda a: a[2], 80 * GIB, beaten=lambda a: asked.append(a))
    assert len(asked) == 1


def test_out_of_time_again_the_first_answers_layout_is_refitted():
    """The search held an over-limit plan at its deadline; planning again has no time left: the
    refit gets that answer and the lowered limit, and its answer is returned with the note."""
    plan_under, calls = _planner({80 * GIB: 84 * GIB}, out_of_time_below=80 * GIB)
    refits = []

    def refit(answer, under):
        refits.append((answer, under))
        return ("refit", under, under - GIB)

    answer, note = fitting(plan_under, lambda a: a[2], 80 * GIB, refit)
    assert refits == [(("searched", 80 * GIB, 84 * GIB), 76 * GIB)]
    assert answer == ("refit", 76 * GIB, 75 * GIB) and "76" in note


def test_out_of_time_again_without_a_refit_is_the_time_out():
    plan_under, _ = _planner({80 * GIB: 84 * GIB}, out_of_time_below=80 * GIB)
    with pytest.raises(SearchOutOfTime):
        fitting(plan_under, lambda a: a[2], 80 * GIB)


def test_no_fit_after_every_try_is_one_clear_error():
    plan_under, calls = _planner({})  # the peak stays 84 GiB however low the limit
    with pytest.raises(DnnplanError, match="resharded inputs"):
        fitting(plan_under, lambda a: 84 * GIB, 80 * GIB)
    assert len(calls) == 4


def test_the_limit_is_never_lowered_to_nothing_or_less():
    """A search cut short keeps one layout whose peak stays 12.3 GiB over 80 GiB however low the
    limit: lowered by 12.3, then 24.7, then 49.3 GiB it came to -6.29 GiB ("fits -6.291 GiB per
    device"). Each lowering takes at most half of what is left."""
    excess = (80 + 6.291) / 7 * GIB
    assert 80 * GIB - excess * (1 + 2 + 4) == pytest.approx(-6.291 * GIB)  # the unbounded lowering
    under, seen = 80 * GIB, []
    for k in range(3):
        under = lowered_limit(under, excess, k)
        seen.append(under)
    assert seen[:2] == [80 * GIB - excess, 80 * GIB - 3 * excess]  # a small excess: lowered by it, as before
    assert seen[2] == pytest.approx(seen[1] / 2) and seen[2] > 0
    assert lowered_limit(80 * GIB, 200 * GIB, 0) == 40 * GIB


def test_nothing_fitting_a_lowered_limit_is_said_against_the_limit_asked_for():
    """Planning again under the lowered limit finds nothing (the pipeline search's "no pipelined plan
    ... fits"): the error names the 80 GiB asked for and the excess, never the lowered figure alone."""
    excess = 12.327 * GIB

    def plan_under(limit: float):
        if limit < 50 * GIB:
            raise DnnplanError(f"no pipelined plan of llama3.1-405b at batch 512 fits {limit / GIB:.3f} GiB per "
                               "device on 512 devices")
        return ("searched", limit, 80 * GIB + excess)
    with pytest.raises(DnnplanError) as got:
        fitting(plan_under, lambda a: a[2], 80 * GIB)
    text = str(got.value)
    assert "no plan was found whose peak fits 80.000 GiB a device" in text and "add 12.33 GiB" in text
    assert "planned again under 43.019 GiB: no pipelined plan" in text and not re.search(r" -\d", text)

    class Held(DnnplanError):  # e.g. planner.zero_choice.Beaten: not a failure to fit, raised as it is
        pass

    def beaten(limit: float):
        if limit < 80 * GIB:
            raise Held("no plan beats the 38.6 s step held")
        return ("searched", limit, 80 * GIB + excess)
    with pytest.raises(Held):
        fitting(beaten, lambda a: a[2], 80 * GIB, passes=(Held,))


def test_a_refit_plans_the_choices_own_pair_under_the_lowered_limit(tmp_path):
    """planner.first_plan.refit_choice (dnnplan plan's out-of-time fit check, with or without --pipeline):
    the over-limit choice's own stages and micro-batches searched again under the lower limit, within
    a share of the stated time; the answer fits that limit and its gap counts the first search's bound."""
    text = (ZOO / "gpt-tiny.yaml").read_text().replace("repeat: 2", "repeat: 4")
    (tmp_path / "gpt4.yaml").write_text(text)
    ctx = context.resolve(str(tmp_path / "gpt4.yaml"), 8, 8, "dgx-a100", None,
                          choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.003
    first = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit,
                            Settings(choices=TrainingChoices(optimizer="adam", precision="fp16")))
    under = first.prediction.memory_peak_bytes * 0.97
    settings = Settings(budget=Budget(60.0), choices=TrainingChoices(optimizer="adam", precision="fp16"))
    got = refit_choice(first, ctx.network, 8, 8, ctx.machine, ctx.compute, under, settings, AUTO)
    assert (got.stages, got.micro_batches) == (first.stages, first.micro_batches)
    assert got.prediction.memory_peak_bytes <= under * (1 + 1e-9)
    assert got.prediction.step_s >= first.prediction.step_s * (1 - 1e-12)  # a tighter limit is never faster
    lower = first.prediction.step_s * (1 - first.stats.get("proven_gap", 1.0))
    assert got.stats["proven_gap"] >= 1 - lower / got.prediction.step_s - 1e-12
