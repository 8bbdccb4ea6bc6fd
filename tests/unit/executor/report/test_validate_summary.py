"""The numbers a validate is judged by (executor.report.summary) and each plan's row over its repeats
(executor.report.repeats), with their in-run keys (executor.report.in_run), on hand-made rows: nothing runs here."""

from __future__ import annotations

import statistics

import pytest

from executor.report import in_run
from executor.report.repeats import merged, pair_noise, plan_rows, run_order
from executor.report.summary import percentile, summarize


def row(name: str, predicted: float, measured: float, layers: list[tuple[float, float]], peak=(1000, None),
        repeat: int | None = None, lo: float | None = None, hi: float | None = None) -> dict:
    """A row as PlanRun.row makes it: ``layers`` as (predicted_s, measured_s) per layer."""
    predicted_peak, measured_peak = peak
    out = {"name": name, "strategies": "N=2 x3", "threads": 1, "predicted_step_s": predicted,
           "measured_step_s": measured, "measured_step_min_s": lo or measured, "measured_step_max_s": hi or measured,
           "step_rel": measured / predicted - 1, "layer_median_abs_rel": statistics.median(
               abs(m / p - 1) for p, m in layers),
           "predicted_peak_bytes": predicted_peak, "measured_peak_bytes": measured_peak,
           "memory_rel": None if measured_peak is None else measured_peak / predicted_peak - 1,
           "check": {"passed": True, "worst_rel_error": 1e-7, "worst_tensor": "fc.weight"},
           "plan": {"strategies": {"fc": name}, "algorithms": {}},
           "layers": [{"name": f"l{i}", "predicted_s": p, "measured_s": m, "rel": m / p - 1}
                      for i, (p, m) in enumerate(layers)]}
    return out if repeat is None else {**out, "repeat": repeat}


PLANS = [row("planner", 1.0, 1.2, [(1, 1.1), (1, 0.5), (1, 3.0)], peak=(1000, 1100)),
         row("data", 2.0, 1.0, [(1, 1.0), (2, 2.4)], peak=(1000, 700)),
         row("filter", 1.0, 1.05, [(1, 1.2)])]


def test_the_summary_of_hand_made_rows():
    s = summarize(PLANS)
    assert s["plans"] == 3
    assert s["mean_abs_step_error"] == pytest.approx((0.2 + 0.5 + 0.05) / 3)
    assert s["worst_abs_step_error"] == pytest.approx(0.5)
    layer = sorted([0.1, 0.5, 2.0, 0.0, 0.2, 0.2])  # |rel| of every layer of every plan
    assert s["layer_median_error"] == pytest.approx(statistics.median(layer))
    assert s["layer_p90_error"] == pytest.approx(1.25)  # between the 5th (0.5) and 6th (2.0) of six, at 0.5
    assert s["memory_error"] == pytest.approx((0.1 + 0.3) / 2)  # the plan without a measurement left out
    assert s["best_plan_loss"] == pytest.approx(0.2)  # the planner's 1.2 against data's 1.0
    assert s["noise_floor"] is None  # one run per plan


def test_the_summary_says_none_where_nothing_was_measured():
    s = summarize([{**PLANS[1], "name": "data", "measured_peak_bytes": None, "memory_rel": None}])
    assert s["memory_error"] is None and s["best_plan_loss"] is None and s["noise_floor"] is None
    assert summarize([])["mean_abs_step_error"] is None
    assert summarize([{**PLANS[0], "name": "planner = data"}])["best_plan_loss"] == 0.0


def test_percentile_interpolates_between_ranks():
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([0.0, 10.0], 90) == pytest.approx(9.0)
    assert percentile([], 90) is None


def test_runs_interleave_in_abba_order():
    assert run_order(3, 3) == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0), (2, 0), (2, 1), (2, 2)]
    assert run_order(2, 1) == [(0, 0), (0, 1)]


def test_a_plans_runs_make_one_row_with_the_median_error_and_its_spread():
    runs = [row("data", 1.0, m, [(1, m)], peak=(1000, p), repeat=k, lo=m * 0.9, hi=m * 1.1)
            for k, (m, p) in enumerate([(1.1, 900), (1.3, 1200), (1.2, 1000)])]
    r = merged(runs)
    assert r["repeats"] == 3 and "repeat" not in r
    assert r["step_rel"] == pytest.approx(0.2) and r["step_rel_min"] == pytest.approx(0.1)
    assert r["step_rel_max"] == pytest.approx(0.3)
    assert r["measured_step_s"] == pytest.approx(1.2)
    assert r["measured_step_min_s"] == pytest.approx(0.99) and r["measured_step_max_s"] == pytest.approx(1.43)
    assert r["measured_peak_bytes"] == 1200 and r["memory_rel"] == pytest.approx(0.2)
    assert r["layers"][0]["rel"] == pytest.approx(0.2)
    assert r["step_noise"] == pytest.approx(statistics.median([abs(1.1 / 1.3 - 1), abs(1.1 / 1.2 - 1),
                                                              abs(1.3 / 1.2 - 1)]))
    assert merged(runs[:1]) == {k: v for k, v in runs[0].items() if k != "repeat"}


def test_plan_rows_group_runs_by_plan_and_the_noise_floor_is_their_median():
    runs = [row(n, 1.0, m, [(1, m)], repeat=k) for k, order in enumerate([("a", "b"), ("b", "a")])
            for n, m in zip(order, (1.0, 1.5) if k == 0 else (1.2, 1.1))]
    plans = plan_rows(runs)
    assert [p["name"] for p in plans] == ["a", "b"] and all(p["repeats"] == 2 for p in plans)
    a_noise, b_noise = abs(1.0 / 1.1 - 1), abs(1.5 / 1.2 - 1)
    assert plans[0]["step_noise"] == pytest.approx(a_noise) and plans[1]["step_noise"] == pytest.approx(b_noise)
    assert summarize(plans)["noise_floor"] == pytest.approx(statistics.median([a_noise, b_noise]))
    assert pair_noise([2.0]) is None


def with_in_run(r: dict, predicted: float | None) -> dict:
    """A row with the in-run keys of a prediction of ``predicted`` s from in-run kernel times
    (executor.report.in_run; every layer predicted at 1 s), or null ones."""
    if predicted is None:
        return in_run.normalised(r)
    layers = [{**l, "in_run_predicted_s": 1.0, "in_run_rel": l["measured_s"] - 1} for l in r["layers"]]
    return {**r, "in_run_predicted_step_s": predicted, "in_run_step_rel": r["measured_step_s"] / predicted - 1,
            "in_run_layer_median_abs_rel": statistics.median(abs(l["in_run_rel"]) for l in layers), "layers": layers}


def test_the_summary_gives_the_in_run_errors_beside_the_ahead_of_time_ones():
    s = summarize([with_in_run(PLANS[0], 1.25), with_in_run(PLANS[1], 0.8), with_in_run(PLANS[2], None)])
    assert s["mean_abs_step_error"] == pytest.approx((0.2 + 0.5 + 0.05) / 3)  # the headline is unchanged
    assert s["in_run_mean_abs_step_error"] == pytest.approx((0.04 + 0.25) / 2)  # the plan without one left out
    assert s["in_run_worst_abs_step_error"] == pytest.approx(0.25)
    none = summarize(PLANS)  # rows of an older partial report: no in-run keys at all
    assert none["in_run_mean_abs_step_error"] is None and none["in_run_worst_abs_step_error"] is None


def test_a_plans_in_run_keys_are_the_median_over_its_runs():
    runs = [with_in_run(row("data", 1.0, m, [(1, m), (1, 2 * m)], repeat=k), p)
            for k, (m, p) in enumerate([(1.1, 1.0), (1.3, 1.2), (1.2, 1.5)])]
    plan = in_run.merged(merged(runs), runs)
    assert plan["in_run_predicted_step_s"] == pytest.approx(1.2)
    assert plan["in_run_step_rel"] == pytest.approx(statistics.median([0.1, 1.3 / 1.2 - 1, 1.2 / 1.5 - 1]))
    assert plan["in_run_layer_median_abs_rel"] == pytest.approx(statistics.median(
        r["in_run_layer_median_abs_rel"] for r in runs))
    assert [l["in_run_rel"] for l in plan["layers"]] == pytest.approx([0.2, 1.4])
    assert plan["step_rel"] == pytest.approx(0.2)  # the ahead-of-time keys as executor.report.repeats made them
    before = row("data", 1.0, 1.1, [(1, 1.1)], repeat=0)  # a row of an older partial report
    old = in_run.merged(merged([before]), [before])
    assert old["in_run_step_rel"] is None and old["layers"][0]["in_run_rel"] is None  # an older row: null
