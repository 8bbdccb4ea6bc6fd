"""A plan states the step and memory its prediction gives (`dnnplan predict PLAN`). Under `+experts`
overlap, the expert all-to-alls no other micro-batch's opposite pass hides (a step of one
micro-batch; a pipeline's warm-up and cool-down) are in the plan's step: planned without them, the
whole batch ended in an internal error (the solver's objective 3.04 s against the plan's 3.65 s)
and a pipelined plan stated a step 1.5% under its own prediction."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app

runner = CliRunner()


@pytest.mark.parametrize("extra", [
    [],  # the whole batch at once: one micro-batch
    ["--moe-dispatch", "flex", "--no-recompute"],  # one stage of 8 micro-batches from the pipeline search
])
def test_a_plan_under_expert_overlap_states_the_step_its_prediction_gives(tmp_path, extra):
    out = tmp_path / "plan.yaml"
    got = runner.invoke(app, ["plan", "qwen3-30b-a3b", "-p", "8", "--machine", "dgx-b200", "--overlap",
                              "data+experts", "--batch", "128", "--zero", "0", "--time-limit", "20", *extra,
                              "--json", "--out", str(out)])
    assert got.exit_code == 0, got.output
    planned = json.loads(got.stdout)
    assert planned["step_breakdown_s"]["expert all-to-alls alone"] > 0
    again = runner.invoke(app, ["predict", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_s"] == planned["step_s"]


def test_a_pipelined_plan_states_each_stages_own_activations(tmp_path):
    """The search solves every middle stage to hold what the first middle stage holds (one solution
    serves them all); the plan states each stage's own count, as its prediction does: 8, 7, ..., 1
    micro-batches under 1F1B on 8 stages, not 8, 7, 7, ..., 1 (21.18 GB a device, not 23.13)."""
    out = tmp_path / "plan.yaml"
    got = runner.invoke(app, ["plan", "llama3-8b", "-p", "64", "--machine", "dgx-a100", "--precision", "fp32",
                              "--optimizer", "momentum", "--pipeline", "8", "--no-recompute", "--json", "--out", str(out)])
    assert got.exit_code == 0, got.output
    planned = json.loads(got.stdout)
    again = json.loads(runner.invoke(app, ["predict", str(out), "--json"]).stdout)
    assert [s["kept_micro_batches"] for s in planned["stages"]] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert (planned["step_s"], planned["memory_peak_bytes"]) == (again["step_s"], again["memory_peak_bytes"])
