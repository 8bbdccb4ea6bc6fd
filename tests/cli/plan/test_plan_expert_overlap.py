"""`+experts` overlap planned: the expert all-to-alls that no other micro-batch's opposite pass
hides (a step of one micro-batch; a pipeline's warm-up and cool-down) are in the plan's step, as
`dnnplan predict PLAN` prices them. Planned without them, the whole batch ended in an internal
error (the solver's objective 3.04 s against the plan's 3.65 s) and a pipelined plan stated a step
1.5% under its own prediction."""

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
