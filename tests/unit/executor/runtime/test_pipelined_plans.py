"""Pipelined plans: each schedule's order of micro-batches, a plan file written and read back and
predicted as written, a bad pipeline section refused in one line, and the per-stage report (busy,
idle, the bubble). Run for real under mpiexec: tests/mpi/test_execute_pipeline.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.frameworks.megatron import megatron_strategies
from dnnplan.cli import app
from executor.report.collect import RankTimes
from executor.report.compare import Measured
from executor.report.pipeline import bubble, compare_pipeline
from executor.runtime.pipeline import schedule_ops
from executor.session.step_choice import uniform_plan
from networks.errors import DnnplanError
from networks.loader import load_network
from planner.plan.plan import PipelineSpec
from planner.plan.plan_file import read_plan
from planner.pipeline.to_plan import predict_pipelined
from profiler import context

from tests.support.executor_plans import pipelined_plan

GPT = "gpt-tiny"


@pytest.mark.parametrize("stages,m", [(1, 1), (2, 1), (2, 4), (3, 2), (4, 8)])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_every_schedule_runs_each_micro_batch_forward_then_backward_once(stages, m, schedule):
    for s in range(stages):
        ops = schedule_ops(schedule, stages, s, m)
        assert sorted(ops) == sorted([("F", j) for j in range(m)] + [("B", j) for j in range(m)])
        assert all(ops.index(("F", j)) < ops.index(("B", j)) for j in range(m))
        in_flight = max(sum(1 for k, _ in ops[:i + 1] if k == "F") - sum(1 for k, _ in ops[:i + 1] if k == "B")
                        for i in range(len(ops)))
        # what costmodel.step.pipeline prices as the activations a stage keeps
        assert in_flight == (m if schedule == "gpipe" else min(stages - s, m))


def test_a_pipelined_plan_file_reads_back_as_written_and_predicts_its_recorded_step(tmp_path):
    out = tmp_path / "plan.yaml"
    result = CliRunner().invoke(app, ["plan", GPT, "-p", "4", "-b", "8", "--machine", "dgx-a100", "--pipeline", "2",
                                      "--micro-batches", "4", "--schedule", "gpipe", "--out", str(out)])
    assert result.exit_code == 0, result.output
    plan, net = read_plan(str(out))
    assert plan.pipeline == PipelineSpec(2, 4, "gpipe", ("embed", "h1.ln1"))
    assert plan.stage_ranks == 2 and plan.micro_batch == 2
    assert all(lp.strategy.p == 2 for lp in plan.layers)
    ctx = context.resolve(GPT, 4, 8, "dgx-a100")
    pred = predict_pipelined(plan, net, plan.strategies(), ctx.machine, ctx.compute)
    assert pred.step_s == pytest.approx(plan.step_s, rel=1e-9)
    assert pred.stages[0].kept_micro_batches == 4  # gpipe holds every micro-batch
    again = CliRunner().invoke(app, ["predict", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["step_s"] == pytest.approx(plan.step_s, rel=1e-9)


@pytest.mark.parametrize("edit,needle", [
    (lambda p: p.update(stages=3), "dividing the plan's devices"),
    (lambda p: p.update(micro_batches=3), "dividing the plan's batch"),
    (lambda p: p.update(schedule="zigzag"), "unknown pipeline schedule"),
    (lambda p: p.update(first_layers=["h1.ln1", "embed"]), "do not cut gpt-tiny in order"),
    (lambda p: p.update(first_layers=["embed", "h1.nope"]), "first layer 'h1.nope' is not a layer of gpt-tiny"),
    (lambda p: p.update(first_layers=["embed"]), "first layer of each of the 2 stages"),
])
def test_a_bad_pipeline_section_is_one_line_naming_the_file(tmp_path, edit, needle):
    path = Path(pipelined_plan(tmp_path, 2, 2, 2, "1f1b"))
    data = yaml.safe_load(path.read_text())
    edit(data["pipeline"])
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DnnplanError) as err:
        read_plan(str(path))
    assert needle in str(err.value) and str(path) in str(err.value)


def test_the_stage_report_reads_busy_and_idle_from_every_ranks_clock():
    """Two stages of one rank: rank 1 waits 3 ms of a 10 ms step, rank 0 1 ms."""
    net = load_network(GPT)
    ctx = context.resolve(GPT, 1, 4, "dgx-a100")
    strategies, _ = megatron_strategies(ctx.network, 1, 4, 1)
    plan = dataclasses.replace(uniform_plan(ctx, GPT, "dgx-a100", strategies, "x"), devices=2, batch=8,
                               pipeline=PipelineSpec(2, 2, "1f1b", ("embed", "h1.ln1")))
    pred = predict_pipelined(plan, net, plan.strategies(), ctx.machine, ctx.compute)
    ranks = [RankTimes(0, {0: 0.010}, {(0, "stage 0", "wait"): 0.001}, ()),
             RankTimes(1, {0: 0.009}, {(0, "stage 1", "wait"): 0.003}, ())]
    cmp = compare_pipeline(pred, Measured(2, 1, 0.010, 0.010, 0.010, ()), ranks)
    assert [r.measured_busy_s for r in cmp.stages] == pytest.approx([0.009, 0.006])
    assert [r.measured_idle_s for r in cmp.stages] == pytest.approx([0.001, 0.004])
    assert bubble(cmp.stages)[1] == pytest.approx(0.001)
    # predicted: each stage busy m T_s + O_s, and the rows add up to the step
    for row, st in zip(cmp.stages, pred.stages):
        assert row.predicted_busy_s == pytest.approx(2 * st.per_micro_s + st.once_s)
        assert row.predicted_busy_s + row.predicted_idle_s == pytest.approx(pred.step_s)
    by = {lt.name: lt for lt in cmp.predicted}
    micro = {row.layer.name: row.layer for row in pred.stages[0].micro.layers}
    assert by["h0.fc"].phases["fwd_compute"] == pytest.approx(2 * micro["h0.fc"].fwd_compute_s)
    assert by["h0.fc"].phases["grad_sync"] == pytest.approx(micro["h0.fc"].grad_sync_s)
