"""`dnnplan predict PLAN` of a plan for machine `local` says what `dnnplan execute` predicts
before its run (executor.session.predict): the plan's kernels timed again in its step's context, the
executor's time between kernels and the ranks' wait; other plans are priced as before."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.session import predict as ahead

runner = CliRunner()


def _plan(tmp_path, *args: str) -> str:
    path = str(tmp_path / "p.yaml")
    r = runner.invoke(app, ["plan", "lenet5", "--batch", "8", "--out", path, "--force", *args])
    assert r.exit_code == 0, r.output
    return path


def _predict(path: str, *args: str) -> dict:
    r = runner.invoke(app, ["predict", path, "--json", *args])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
def test_a_local_plan_is_predicted_as_execute_predicts_it_the_profile_alone_beside(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    path = _plan(tmp_path, "--devices", "2", "--machine", "local")
    on, off = _predict(path), _predict(path, "--no-step-context")
    assert on["as_execute_predicts"] and off["as_execute_predicts"]
    assert on["profile_predicted_step_s"] > 0 and off["profile_predicted_step_s"] is None
    # the profile-alone step is the --no-step-context prediction: the same profile, the same wait term
    assert on["profile_predicted_step_s"] == pytest.approx(off["step_s"], rel=1e-9)
    assert on["step_s"] != off["step_s"]
    assert off["wait_s"] > 0 and off["collective_code_s"] > 0  # two ranks share this computer: they wait
    assert off["step_s"] == pytest.approx(off["fwd_s"] + off["bwd_s"] + off["grad_sync_s"] + off["update_s"]
                                          + off["dispatch_s"] + off["wait_s"] + off["collective_code_s"])
    text = runner.invoke(app, ["predict", path]).output
    assert "as `dnnplan execute` predicts this plan before its run" in text and "from the profile alone" in text
    assert "waiting for the slowest rank" in " ".join(text.split())
    assert "code around collectives" in " ".join(text.split())


def test_predict_of_a_local_plan_uses_the_executors_prediction(tmp_path, monkeypatch):
    """What `predict` shows is the prediction executor.session.predict made (no second model beside it)."""
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    path = _plan(tmp_path, "--devices", "1", "--machine", "local", "--no-step-context")
    made = []
    real = ahead.ahead_of_time

    def spy(plan_path, step_context=True):
        got = real(plan_path, step_context)
        made.append((step_context, got))
        return got

    monkeypatch.setattr("executor.session.predict.ahead_of_time", spy)
    out = _predict(path, "--no-step-context")
    assert [s for s, _ in made] == [False] and made[0][1] is not None
    assert out["step_s"] == pytest.approx(made[0][1].prediction.step_s, rel=1e-12)
    assert out["wait_s"] == 0  # one rank waits for nobody


@pytest.mark.parametrize("args", [("--devices", "2", "--machine", "dgx-a100"),
                                  ("--devices", "1", "--machine", "local", "--optimizer", "adam")])
def test_plans_execute_would_not_predict_here_are_priced_by_the_model_alone(tmp_path, monkeypatch, args):
    """Another machine's plan, or one the executor cannot run (Adam), is priced as before."""
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    path = _plan(tmp_path, *args, "--no-step-context")
    assert ahead.ahead_of_time(path) is None
    out = _predict(path)
    assert not out["as_execute_predicts"] and out["profile_predicted_step_s"] is None and out["wait_s"] == 0


def test_a_table_given_that_lacks_the_predictions_kernels_is_said(tmp_path):
    """--profile with a table of GEMMs alone: the convolutions and the rest are priced by the
    roofline, said in one warning line (it was silent); a table holding them all says nothing."""
    from typer.testing import CliRunner

    from dnnplan.cli import app
    runner = CliRunner()
    table = tmp_path / "g.json"
    made = runner.invoke(app, ["profile", "gemm", "--sizes", "64,128", "--quick", "--out", str(table)])
    assert made.exit_code == 0, made.output
    got = runner.invoke(app, ["predict", "lenet5", "-p", "2", "-b", "8", "--machine", "local", "--profile", str(table)])
    assert got.exit_code == 0, got.output
    text = " ".join(got.output.split())
    assert f"kernel shape(s) of this prediction are not in {table} (conv2d.bwd_data" in text
    assert "priced by roofline instead" in text
    whole = runner.invoke(app, ["predict", "resnet50", "-p", "1", "-b", "64", "--machine", "dgx-h100",
                                "--precision", "tf32", "--profile", "h100-tf32"])
    assert whole.exit_code == 0 and "not in h100-tf32" not in whole.output


@pytest.mark.parametrize("framework", ["pytorch", "dnnplan-graphs"])
def test_a_table_lacking_kernels_is_said_under_a_framework_too(framework):
    """Under a framework the kernels are priced through its model (costmodel.frameworks.kernels),
    which passes on what the table lacked: the warning stays (it was lost under pytorch and dnnplan)."""
    from typer.testing import CliRunner

    from dnnplan.cli import app
    got = CliRunner().invoke(app, ["predict", "gpt2", "-p", "1", "-b", "8", "--machine", "dgx-h100", "--precision",
                                   "tf32", "--profile", "h100-tf32", "--framework", framework])
    assert got.exit_code == 0, got.output
    assert "kernel shape(s) of this prediction are not in h100-tf32" in " ".join(got.output.split())
