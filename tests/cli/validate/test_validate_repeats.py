"""`dnnplan validate --repeats R`: every plan runs R times in ABBA order, each plan's row is the
median over its runs, and Ctrl-C keeps the runs that finished so the same command resumes with
the others (the runs themselves stand in: executor.session.validate.measure_both is replaced)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.session import validate as validation
from executor.session.validate import RunSettings, ValidationInterrupted

from tests.support.validate_runs import ARGS, FakeRuns

runner = CliRunner()
TWICE = RunSettings(steps=1, warmup=0, check=False, repeats=2)


@pytest.fixture(scope="module")
def ctx():
    return validation.resolve("lenet5", 2, 8, "dgx-a100", None, False)


def test_each_plan_runs_twice_in_abba_order_and_gets_one_row(monkeypatch, ctx):
    runs = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", runs)
    report = validation.validate(ctx, "lenet5", "dgx-a100", TWICE)
    n = report.planned
    assert n >= 2 and runs.plans[:n] == runs.plans[n:][::-1]  # A B C .. then .. C B A
    assert [r["repeat"] for r in report.rows] == [0] * n + [1] * n
    data = report.to_json()
    assert data["repeats"] == 2 and len(data["runs"]) == 2 * n and len(data["plans"]) == n
    first = data["plans"][0]  # FakeRuns' k-th run measures k ms against 2 ms predicted
    assert first["repeats"] == 2 and first["measured_step_s"] == pytest.approx((0.001 + 0.001 * 2 * n) / 2)
    assert first["step_rel_min"] == pytest.approx(0.001 / 0.002 - 1)
    assert first["step_noise"] == pytest.approx(abs(0.001 / (0.001 * 2 * n) - 1))
    assert data["summary"]["noise_floor"] is not None


def test_an_interrupted_repeated_validate_resumes_with_the_runs_not_made(monkeypatch, ctx):
    monkeypatch.setattr(validation, "measure_both", FakeRuns(stop_at=3))
    with pytest.raises(ValidationInterrupted) as info:
        validation.validate(ctx, "lenet5", "dgx-a100", TWICE)
    partial = info.value.report.to_json()
    n = partial["planned"]
    assert len(partial["runs"]) == 2 and f"2 of {2 * n} runs finished" in str(info.value)
    assert validation.conflicts(partial, validation.new_report(ctx, "dgx-a100", TWICE)) == []
    assert validation.conflicts(partial, validation.new_report(ctx, "dgx-a100", RunSettings(
        steps=1, warmup=0, check=False))) == ["repeats 2 there, 1 here"]
    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    done = validation.validate(ctx, "lenet5", "dgx-a100", TWICE, earlier=validation.earlier_runs(partial))
    assert len(again.plans) == 2 * n - 2 and len(done.rows) == 2 * n
    assert [r.get("resumed", False) for r in done.rows[:3]] == [True, True, False]
    assert all(p["repeats"] == 2 for p in done.to_json()["plans"])


def test_a_partial_report_from_before_repeats_counts_as_one_repeat(ctx):
    old = validation.new_report(ctx, "dgx-a100", RunSettings(steps=1, warmup=0, check=False)).to_json()
    del old["repeats"]
    assert validation.conflicts(old, validation.new_report(ctx, "dgx-a100", RunSettings(
        steps=1, warmup=0, check=False))) == []


def test_the_command_resumes_a_repeated_validate(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "measure_both", FakeRuns(stop_at=2))
    args = [*ARGS, "--repeats", "2", "--json", "v.json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 130, r.output
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["complete"] is False and len(data["runs"]) == 1
    assert f"interrupted: 1 of {2 * data['planned']} runs finished" in " ".join(r.output.split())
    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    done = json.loads((tmp_path / "v.json").read_text())
    assert len(again.plans) == 2 * data["planned"] - 1 and len(done["runs"]) == 2 * data["planned"]
    assert done["complete"] and "error range" in r.output


def test_each_run_gives_the_in_run_error_beside_the_ahead_of_time_one(monkeypatch, ctx):
    """As if machine dgx-a100's kernels could be timed here: every run is timed in-run, its row
    holds both errors, the plan's row the medians, the summary both means."""
    runs = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", runs)
    monkeypatch.setattr(validation, "in_run_unavailable", lambda *args: None)
    data = validation.validate(ctx, "lenet5", "dgx-a100", TWICE).to_json()
    assert data["in_run_note"] is None and all(runs.in_run)
    for r in data["runs"]:  # FakeRuns: predicted 2 ms ahead of time, 4 ms from in-run kernel times
        assert r["predicted_step_s"] == 0.002 and r["in_run_predicted_step_s"] == 0.004
        assert r["in_run_step_rel"] == pytest.approx(r["measured_step_s"] / 0.004 - 1)
        assert r["step_rel"] == pytest.approx(r["measured_step_s"] / 0.002 - 1)
    for p in data["plans"]:
        mine = [r["in_run_step_rel"] for r in data["runs"] if r["plan"] == p["plan"]]
        assert len(mine) == 2 and p["in_run_step_rel"] == pytest.approx(sum(mine) / 2)
    s = data["summary"]
    assert s["in_run_mean_abs_step_error"] == pytest.approx(
        sum(abs(p["in_run_step_rel"]) for p in data["plans"]) / len(data["plans"]))
    assert s["mean_abs_step_error"] != s["in_run_mean_abs_step_error"]


def test_the_in_run_column_is_null_and_says_why_where_it_cannot_apply(monkeypatch, ctx):
    runs = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", runs)
    data = validation.validate(ctx, "lenet5", "dgx-a100", TWICE).to_json()
    assert not any(runs.in_run) and "machine 'dgx-a100' is not this computer" in data["in_run_note"]
    assert all(p["in_run_step_rel"] is None and p["in_run_predicted_step_s"] is None for p in data["plans"])
    assert data["summary"]["in_run_mean_abs_step_error"] is None and data["summary"]["mean_abs_step_error"] > 0
    off = validation.validate(ctx, "lenet5", "dgx-a100", RunSettings(steps=1, warmup=0, check=False, in_run=False))
    assert off.in_run_note == "in-run timing off (--no-in-run)"
