"""One set of numbers (issue 55): a baseline over the memory limit is never shown as faster; "this
plan" is never slower than a baseline it lists; plan, predict and execute split the step into the
same terms with the same numbers; the README's main command answers in its first screen."""

import json
import re

import pytest
from typer.testing import CliRunner

from costmodel.step.breakdown import CORE, step_terms
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.step.prediction import predict_step
from dnnplan.cli import app
from dnnplan.render.measured.execute import _terms
from executor.report.compare import Measured, compare_prediction, predicted_layers
from networks.loader import load_network
from planner.problem.build import build_problem
from planner.problem.solve import make_plan
from planner.plan.plan_file import read_plan
from planner.solvers import min_memory

runner = CliRunner()
MACHINE = load_machine("dgx-a100")
GIB = 2 ** 30


def _between_need_and_data_parallel(name: str, p: int, batch: int) -> float:
    """A memory limit some plan fits but pure data parallelism does not."""
    net = load_network(name)
    data = make_plan(net, name, batch, p, MACHINE, Roofline(MACHINE)).baselines[0]
    need, _ = min_memory(build_problem(net, batch, p, MACHINE, Roofline(MACHINE), None, recompute=True).problem)
    assert need < data.memory_peak_bytes
    return (need + data.memory_peak_bytes) / 2


def test_a_baseline_over_the_memory_limit_is_marked_never_a_speedup():
    limit = _between_need_and_data_parallel("alexnet", 4, 512)
    args = ["plan", "alexnet", "-p", "4", "-b", "512", "--memory", f"{limit / GIB:.6f}", "--zero", "0"]
    plan = json.loads(runner.invoke(app, args + ["--json"]).stdout)
    data = next(b for b in plan["baselines"] if b["name"] == "data parallel")
    assert data["fits"] is False
    text = runner.invoke(app, args).stdout
    row = next(line for line in text.splitlines() if "data parallel" in line)
    assert "does not fit" in row and "as fast" not in row


@pytest.mark.parametrize("name, p, batch", [("lenet5", 4, 128), ("alexnet", 4, 512), ("resnet18", 8, 256),
                                            ("gpt-tiny", 4, 16)])
def test_this_plan_is_never_slower_than_a_baseline_it_lists(name, p, batch):
    plan = json.loads(runner.invoke(app, ["plan", name, "-p", str(p), "-b", str(batch), "--json"]).stdout)
    for b in plan["baselines"]:
        if b["fits"]:
            assert plan["step_s"] <= b["step_s"] * (1 + 1e-9), b


def test_plan_predict_and_execute_split_the_step_alike(tmp_path):
    path = str(tmp_path / "plan.yaml")
    planned = runner.invoke(app, ["plan", "lenet5", "-p", "2", "-b", "16", "--out", path])
    assert planned.exit_code == 0, planned.output
    predicted = runner.invoke(app, ["predict", path])
    assert predicted.exit_code == 0, predicted.output

    def step_line(text: str) -> str:
        return next(line for line in text.splitlines() if line.startswith("step "))

    assert step_line(planned.stdout) == step_line(predicted.stdout)
    assert all(name in step_line(planned.stdout) for name in CORE)
    assert "model FLOP utilisation" in planned.stdout and "model FLOP utilisation" in predicted.stdout
    plan, net = read_plan(path)
    pred = predict_step(net, plan.batch, plan.strategies(), plan.algorithms(), MACHINE, Roofline(MACHINE))
    measured = Measured(2, 1, pred.step_s, pred.step_s, pred.step_s, predicted_layers(pred))
    executed = dict(_terms(compare_prediction(pred, measured).predicted, 0.0, pred.step_s))
    planned_terms = dict(step_terms(pred))
    for name in CORE:  # the executor's table and summary use the same names and numbers
        assert executed[name] == pytest.approx(planned_terms[name], rel=1e-9, abs=1e-15)


def test_the_readme_main_command_answers_in_its_first_screen():
    readme = open("README.md", encoding="utf-8").read()
    command = re.search(r"<!-- main-command -->\n```\n(.*?)\n```", readme, re.S).group(1)
    args = command.split("&& dnnplan ")[-1].split()
    got = runner.invoke(app, args, env={"COLUMNS": "120"})
    assert got.exit_code == 0, got.output
    lines = got.stdout.splitlines()
    # piped, a sentence stays on one line; a terminal of 120 columns shows it in as many rows as it fills
    assert sum(max(1, -(-len(line) // 120)) for line in lines) < 40, got.stdout
    assert max(len(line) for line in lines if line[:1] in "┏┃┡│└") <= 120  # the tables keep the width
    assert lines[0].startswith(args[1]) and any(line.startswith("step ") for line in lines[:6])
    assert any("optimal" in line or "of the optimum" in line for line in lines[:10])


@pytest.mark.parametrize("layout", [["-p", "64", "-b", "64", "--precision", "fp8"],
                                    ["-p", "64", "-b", "256", "--pipeline", "2", "--micro-batches", "8"]])
def test_the_terms_sum_to_the_step_when_expert_all_to_alls_hide_under_other_micro_batches(layout):
    """``+experts`` hides each expert all-to-all under another micro-batch's opposite pass, but not
    in the passes no other pass runs beside (the first forward, the last backward; a pipeline's
    warm-up and cool-down): those are a term of their own, and exposed, not overlapped, communication."""
    got = runner.invoke(app, ["predict", "mixtral-8x7b", "--machine", "dgx-h100", "--expert", "8",
                              "--overlap", "all+experts", "--json", *layout])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    terms = out["step_breakdown_s"]
    assert terms["expert all-to-alls alone"] > 0
    assert sum(terms.values()) == pytest.approx(out["step_s"], rel=1e-12)


def test_a_plan_file_of_accumulated_micro_batches_predicts_with_its_layers(tmp_path):
    """A plan of one stage and several micro-batches (gradient accumulation, the planner's answer for
    a transformer whose batch does not fit whole) predicted from its file: its per-layer entries and
    memory parts, as a step's, beside the pipeline's fields; --layers prints their table."""
    out = tmp_path / "plan.yaml"
    planned = runner.invoke(app, ["plan", "tiny-llama", "-p", "4", "-b", "8", "--pipeline", "1", "--micro-batches",
                                  "2", "--time-limit", "5", "--out", str(out), "--json"])
    assert planned.exit_code == 0, planned.output
    got = json.loads(runner.invoke(app, ["predict", str(out), "--json"]).stdout)
    assert got["step_s"] == json.loads(planned.stdout)["step_s"] and got["micro_batches"] == 2
    assert len(got["layers"]) == len(load_network("tiny-llama").layers) and got["micro_batch"] == 4
    assert sum(got["memory_parts_bytes"].values()) == got["memory_peak_bytes"]
    assert "per layer, one micro-batch" in runner.invoke(app, ["predict", str(out), "--layers"]).stdout
    assert "fwd_s" in json.loads(planned.stdout)["layers"][0]  # plan --json keeps the plan file's entries


def test_every_predict_json_says_the_communication_exposed_and_overlapped_as_the_plan_did(tmp_path):
    """A pipelined plan file and the launch file exported from it, predicted with --json, carry
    comm_exposed_s and comm_overlapped_s as a network's prediction does, equal to the plan's
    step_comm_s."""
    out = tmp_path / "plan.yaml"
    planned = runner.invoke(app, ["plan", "tiny-llama", "-p", "4", "-b", "8", "--pipeline", "2", "--machine",
                                  "dgx-h100", "--time-limit", "5", "--out", str(out), "--json"])
    assert planned.exit_code == 0, planned.output
    comm = json.loads(planned.stdout)["step_comm_s"]
    got = json.loads(runner.invoke(app, ["predict", str(out), "--json"]).stdout)
    assert (got["comm_exposed_s"], got["comm_overlapped_s"]) == pytest.approx((comm["exposed"], comm["overlapped"]),
                                                                              rel=1e-12)
    assert got["comm_exposed_s"] > 0 and got["overlap"] == "data"
    launch = tmp_path / "launch.sh"
    assert runner.invoke(app, ["export", str(out), "--to", "megatron", "--out", str(launch)]).exit_code == 0
    read = json.loads(runner.invoke(app, ["predict", "--from", str(launch), "--json"]).stdout)
    assert (read["comm_exposed_s"], read["comm_overlapped_s"]) == pytest.approx(
        (got["comm_exposed_s"], got["comm_overlapped_s"]), rel=1e-12)


def test_predict_says_its_convolutions_algorithm_where_the_plans_baselines_take_the_fastest():
    """`plan`'s data-parallel baseline of resnet18 runs each convolution on its fastest algorithm,
    `predict -s data` on im2col: the two steps differ, and predict's summary says why."""
    got = runner.invoke(app, ["predict", "resnet18", "-p", "4", "-s", "data"], env={"COLUMNS": "300"})
    assert got.exit_code == 0, got.output
    assert "convolutions priced as im2col; `dnnplan plan` and its baselines weigh each convolution's fastest " \
           "algorithm (direct, fft, winograd)" in " ".join(got.output.split())
    assert "convolutions" not in runner.invoke(app, ["predict", "gpt2", "-p", "8"], env={"COLUMNS": "300"}).output
