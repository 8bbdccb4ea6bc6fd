"""`dnnplan plan --framework`: the search prices the framework's host and overlap, the plan's step
is its step as the framework runs it (`dnnplan predict PLAN` says the same, to the last digit), and
the memory limit holds the peak the framework reserves."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.frameworks.host_calls import host_timeline
from costmodel.frameworks.loading import load_framework
from costmodel.step.prediction import predict_step
from costmodel.frameworks.as_run import step_as_run
from dnnplan.cli import app
from planner.plan.plan_file import read_plan
from profiler import context

runner = CliRunner()
GIB = 2 ** 30


def _plan(tmp_path, network: str, *extra: str) -> tuple[dict, str]:
    out = tmp_path / f"{network}-{len(list(tmp_path.iterdir()))}.yaml"
    args = ["plan", network, "-p", "4", "-b", "64", "--machine", "dgx-h100", "--time-limit", "60", "--json",
            "--pipeline", "off", "--out", str(out), *extra]  # the whole batch's host timeline
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1]), str(out)


@pytest.mark.parametrize("network", ["lenet5", "gpt-tiny"])
def test_the_plans_step_under_pytorch_is_predict_of_its_file_to_the_last_digit(tmp_path, network):
    planned, path = _plan(tmp_path, network, "--framework", "pytorch")
    predicted = runner.invoke(app, ["predict", path, "--json"])
    assert predicted.exit_code == 0, predicted.output
    again = json.loads(predicted.output)
    assert planned["step_s"] == again["step_s"] and planned["memory_peak_bytes"] == again["memory_peak_bytes"]
    assert again["host_s"] > 0  # small layers: eager PyTorch's host binds
    # the solver weighed the host per layer; the step reported is the host timeline's
    assert planned["solver"]["objective_s"] != planned["step_s"]
    assert planned["memory_reserved_bytes"] > planned["memory_allocated_bytes"]
    default, _ = _plan(tmp_path, network)
    assert default["step_s"] == pytest.approx(default["solver"]["objective_s"], rel=1e-9)
    assert default["step_s"] < planned["step_s"]
    assert default["memory_reserved_bytes"] == default["memory_allocated_bytes"] == default["memory_peak_bytes"]


def test_a_predicted_steps_host_is_its_timeline_not_the_layers_sums_again(tmp_path):
    _, path = _plan(tmp_path, "lenet5", "--framework", "pytorch")
    plan, net = read_plan(path)
    ctx = context.resolve(plan.network, plan.devices, plan.batch, plan.machine, choices=plan.choices)
    raw = predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), ctx.machine, ctx.compute,
                       plan.choices.sharded_optimizer, overlap=plan.choices.overlap)
    fw = load_framework("pytorch")
    assert raw.dispatch_s > 0  # the per-layer excess the planner weighs
    run = step_as_run(raw, net, fw, ctx.machine)
    assert run.dispatch_s == 0.0
    assert run.step_s == pytest.approx(host_timeline(raw, net, fw).end_s, rel=1e-12)


def test_the_memory_limit_holds_the_reserved_peak(tmp_path):
    # gpt-tiny's tensors take a few MiB; pytorch reserves 0.875 GiB beside them (context, NCCL buffers)
    planned, _ = _plan(tmp_path, "gpt-tiny", "--framework", "pytorch", "--memory", "0.9")
    assert planned["memory_allocated_bytes"] < 0.05 * GIB < 0.85 * GIB < planned["memory_reserved_bytes"] <= 0.9 * GIB
    refused = runner.invoke(app, ["plan", "gpt-tiny", "-p", "4", "-b", "64", "--machine", "dgx-h100",
                                  "--framework", "pytorch", "--memory", "0.875"])
    assert refused.exit_code == 2 and "framework pytorch reserves 0.875 GiB" in refused.output
    fits = runner.invoke(app, ["plan", "gpt-tiny", "-p", "4", "-b", "64", "--machine", "dgx-h100",
                               "--memory", "0.875", "--json"])
    assert fits.exit_code == 0, fits.output  # the default framework adds nothing: the tensors fit
