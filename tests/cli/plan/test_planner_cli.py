"""`dnnplan plan` and `dnnplan predict plan.yaml` through the real app; plan files round-trip."""

import json

import pytest
import yaml
from typer.testing import CliRunner

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import DEFAULT_MACHINE, load_machine
from networks.errors import DnnplanError
from networks.loader import load_network
from dnnplan.cli import app
from planner.problem.solve import make_plan
from planner.plan.plan_file import plan_to_dict, read_plan, write_plan

runner = CliRunner()
MACHINE = load_machine(DEFAULT_MACHINE)


@pytest.fixture(scope="module")
def alexnet_plan():
    net = load_network("alexnet")
    return make_plan(net, "alexnet", 128, 4, MACHINE, Roofline(MACHINE), machine_ref=DEFAULT_MACHINE)


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_plan_round_trips_through_its_file_unchanged(alexnet_plan, tmp_path, suffix):
    path = str(tmp_path / f"plan{suffix}")
    write_plan(alexnet_plan, path)
    back, _ = read_plan(path)
    assert back == alexnet_plan
    assert plan_to_dict(back) == plan_to_dict(alexnet_plan)


def test_plan_command_prints_layers_baselines_and_solver():
    result = runner.invoke(app, ["plan", "lenet5", "--devices", "4"])
    assert result.exit_code == 0, result.output
    for text in ("conv1", "baselines", "data parallel", "best uniform", "solver reduced", "optimal"):
        assert text in result.output


def test_plan_json_and_out_then_predict_agrees(tmp_path):
    out = str(tmp_path / "p.yaml")
    result = runner.invoke(app, ["plan", "resnet18", "-p", "4", "--json", "--out", out])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["devices"] == 4 and data["solver"]["status"] == "optimal"
    assert type(data["solver"]["memory_limit_bytes"]) is int  # whole bytes, as a script compares them
    conv1 = data["layers"][0]  # a convolution: its algorithms as the planner weighed them
    assert {"name", "strategy", "algorithm", "fwd_s", "bwd_s", "comm_s", "memory_bytes", "alternatives"} == set(conv1)
    assert conv1["algorithm"] == min(conv1["alternatives"], key=lambda a: a["compute_s"])["algorithm"]
    assert conv1["fwd_s"] + conv1["bwd_s"] == pytest.approx(
        next(a["compute_s"] for a in conv1["alternatives"] if a["algorithm"] == conv1["algorithm"]), rel=1e-12)
    assert {"name", "strategy", "algorithm", "fwd_s", "bwd_s", "comm_s", "memory_bytes"} == set(data["layers"][1])
    pred = runner.invoke(app, ["predict", out, "--json"])
    assert pred.exit_code == 0, pred.output
    assert json.loads(pred.stdout)["step_s"] == pytest.approx(data["step_s"], rel=1e-12)


def test_hand_edited_plan_evaluates_and_is_not_faster(tmp_path):
    out = tmp_path / "p.yaml"
    assert runner.invoke(app, ["plan", "alexnet", "-p", "4", "--out", str(out)]).exit_code == 0
    data = yaml.safe_load(out.read_text())
    conv = next(l for l in data["layers"] if l["name"] == "conv2")
    conv["strategy"] = {"F": 4} if conv["strategy"] != {"F": 4} else {"N": 4}
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(app, ["predict", str(out), "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert got["step_s"] >= data["step_s"] * (1 - 1e-9)
    assert got["plan"]["recorded_step_s"] == data["step_s"]
    table = runner.invoke(app, ["predict", str(out)])
    assert table.exit_code == 0 and "recorded" in table.output


@pytest.mark.parametrize("flags, words", [
    (["-p", "16", "-m", "dgx-h100", "-s", "filter"], "--devices, --machine, --strategy given with a plan file"),
    (["--pipeline", "2", "--micro-batches", "4"], "--pipeline, --micro-batches given with a plan file"),
    (["--precision", "bf16"], "--precision 'bf16' differs from the plan's precision fp32"),
    (["--zero", "3"], "--zero 3 differs from the plan's zero 0"),
])
def test_flags_a_plan_file_decides_are_refused_not_ignored(alexnet_plan, tmp_path, flags, words):
    path = tmp_path / "p.yaml"
    write_plan(alexnet_plan, str(path))
    result = runner.invoke(app, ["predict", str(path), *flags])
    assert result.exit_code == 2 and words in result.output and str(path) in result.output
    assert runner.invoke(app, ["predict", str(path), "--precision", "fp32", "--json"]).exit_code == 0  # the same


def test_flags_that_give_the_plans_own_choices_are_taken(tmp_path):
    """The plan's overlap and bucket, and its attention left to the machine, given as flags: the same
    choices written another way (data with the default bucket is data@25, flash the machine's), taken;
    another bucket is refused naming the plan's in words."""
    path = tmp_path / "moe.yaml"
    assert runner.invoke(app, ["predict", "tiny-moe", "-p", "4", "-b", "8", "--tensor", "2", "--expert", "2",
                               "--machine", "dgx-h100", "--out", str(path)]).exit_code == 0
    for flags in (["--bucket-mb", "25"], ["--attention", "flash"], ["--overlap", "data@25"], ["--overlap", "data"]):
        got = runner.invoke(app, ["predict", str(path), *flags])
        assert got.exit_code == 0, (flags, got.output)
    other = runner.invoke(app, ["predict", str(path), "--bucket-mb", "50"])
    assert other.exit_code == 2 and "differs from the plan's overlap data with 25 MiB gradient buckets" in \
        " ".join(other.output.split())


def test_plan_for_another_network_version_is_rejected(alexnet_plan, tmp_path):
    path = tmp_path / "p.yaml"
    write_plan(alexnet_plan, str(path))
    data = yaml.safe_load(path.read_text())
    data["network_hash"] = "0123456789abcdef"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(DnnplanError, match="different version"):
        read_plan(str(path))
    result = runner.invoke(app, ["predict", str(path)])
    assert result.exit_code == 2 and "different version" in result.output


def test_plan_for_a_wrong_machine_is_rejected(alexnet_plan, tmp_path):
    path = tmp_path / "p.yaml"
    write_plan(alexnet_plan, str(path))
    data = yaml.safe_load(path.read_text())
    data["machine"] = "no-such-machine"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["predict", str(path)])
    assert result.exit_code == 2 and "no-such-machine" in result.output
    assert f"{path}, field 'machine'" in result.output  # the plan file named, where no machine file is
    data["network"] = "no-such-net"
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["predict", str(path)])
    assert result.exit_code == 2 and f"{path}, field 'network'" in result.output
    data["network"] = "alexnet"
    data["machine"] = "local"
    data["devices"] = 4096
    path.write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["predict", str(path)])
    assert result.exit_code == 2, result.output


def test_sweep_table_and_json():
    result = runner.invoke(app, ["plan", "mlp", "-p", "8", "--sweep", "1,2,4,8", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [r["devices"] for r in rows] == [1, 2, 4, 8]
    assert rows[0]["speedup"] == 1.0 and all(r["step_s"] <= r["data_step_s"] * (1 + 1e-9) for r in rows)
    table = runner.invoke(app, ["plan", "mlp", "-p", "8", "--sweep", "1,2,...,8"])
    assert table.exit_code == 0 and "strong scaling" in table.output


def test_plot_needs_matplotlib_or_writes_a_png(tmp_path):
    png = tmp_path / "s.png"
    result = runner.invoke(app, ["plan", "mlp", "-p", "4", "--sweep", "1,2,4", "--plot", str(png)])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert result.exit_code == 2 and "matplotlib" in result.output
    else:
        assert result.exit_code == 0 and png.read_bytes().startswith(b"\x89PNG")
        # the format the suffix names: PDF and SVG as such, another suffix a PNG
        for name, head in (("s.pdf", b"%PDF"), ("s.svg", b"<?xml"), ("s.fig", b"\x89PNG")):
            path = tmp_path / name
            got = runner.invoke(app, ["plan", "mlp", "-p", "4", "--sweep", "1,2,4", "--plot", str(path)])
            assert got.exit_code == 0 and path.read_bytes().startswith(head), (name, path.read_bytes()[:20])


@pytest.mark.parametrize("args,text", [
    (["--solver", "magic"], "--solver"),
    (["--memory", "0.001"], "the least a plan of one stage needs"),
    (["--memory", "-1"], "--memory"),
    (["--plot", "x.png"], "--sweep"),
    (["--sweep", "1,x"], "--sweep"),
    (["--pipeline", "off", "--micro-batches", "4"], "--micro-batches 4 accumulates micro-batches, and --pipeline off"),
    (["--micro-batches", "4"], "cannot be pipelined nor its micro-batches accumulated (plan it without --pipeline "
                               "and --micro-batches)"),
])
def test_plan_errors_are_one_line_exit_2(args, text):
    result = runner.invoke(app, ["plan", "resnet18", "-p", "4", *args])
    assert result.exit_code == 2, result.output
    assert text in result.output and "Traceback" not in result.output


def test_ilp_solver_option_gives_the_same_plan_step():
    a = json.loads(runner.invoke(app, ["plan", "lenet5", "-p", "4", "--json"]).stdout)
    b = json.loads(runner.invoke(app, ["plan", "lenet5", "-p", "4", "--json", "--solver", "ilp",
                                       "--time-limit", "60"]).stdout)
    assert b["solver"]["solver"].startswith("ilp") and b["solver"]["time_limit_s"] == 60
    assert a["step_s"] == pytest.approx(b["step_s"], rel=1e-9)


def test_one_stage_of_one_micro_batch_is_laid_out_as_the_whole_batch_at_once():
    """tiny-gqa at batch 10 on 3 devices: the pipeline search's answer of one stage and one
    micro-batch is the whole batch at once, not '1 micro-batches ... (gradient accumulation)'."""
    text = runner.invoke(app, ["plan", "tiny-gqa", "-p", "3", "-b", "10", "--time-limit", "10"],
                         env={"COLUMNS": "400"}).output
    layout = next(line for line in text.splitlines() if line.startswith("layout:"))
    assert "1 micro-batches" not in layout and "gradient accumulation" not in layout


def test_the_written_plans_next_step_is_one_the_executor_takes(tmp_path):
    """A pipelined plan's line suggests `dnnplan execute` only where the executor runs it: tiny-llama
    pipelined on this computer under Adam (the default with attention; the executor runs momentum
    SGD) is pointed at `dnnplan predict`, and under momentum at `execute`."""
    for flags, words in ((["--optimizer", "adam"], "evaluate it, or an edited copy, with `dnnplan predict"),
                         (["--optimizer", "momentum"], "run it with `dnnplan execute")):
        out = tmp_path / f"{flags[1]}.yaml"
        result = runner.invoke(app, ["plan", "tiny-llama", "-p", "2", "-b", "8", "--machine", "local", "--pipeline",
                                     "2", *flags, "--out", str(out)], env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        assert words in " ".join(result.output.split()), result.output[-600:]  # the line wraps at a long path


def test_a_predicted_layouts_next_step_is_one_the_executor_takes(tmp_path):
    """`dnnplan predict --out` as `plan --out`: `execute` suggested only for a layout it runs (tiny-llama
    on this computer under Adam, the default with attention, is pointed at `dnnplan predict`)."""
    for flags, words in ((["--optimizer", "adam"], "evaluate it, or an edited copy, with `dnnplan predict"),
                         (["--optimizer", "momentum"], "run it with `dnnplan execute")):
        out = tmp_path / f"{flags[1]}.yaml"
        result = runner.invoke(app, ["predict", "tiny-llama", "-p", "2", "-b", "8", "--machine", "dgx-a100",
                                     "--precision", "fp32", *flags, "--out", str(out)], env={"COLUMNS": "300"})
        assert result.exit_code == 0, result.output
        assert words in " ".join(result.output.split()), result.output[-600:]


def test_a_predicted_layouts_plan_file_keeps_its_utilisation_and_memory_parts(tmp_path):
    """`dnnplan predict --out` writes the MFU and memory parts it printed, as `plan --out` does."""
    out = tmp_path / "p.yaml"
    args = ["predict", "tiny-llama", "-p", "4", "-b", "8", "--machine", "dgx-h100", "--tensor", "2"]
    printed = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    assert runner.invoke(app, [*args, "--out", str(out)]).exit_code == 0
    written, _ = read_plan(str(out))
    assert written.mfu == pytest.approx(printed["mfu"], rel=1e-12) and written.mfu > 0
    assert sum(written.memory_parts.values()) == written.memory_peak_bytes == printed["memory_peak_bytes"]


def test_a_memory_limit_above_the_devices_own_is_warned_of():
    got = runner.invoke(app, ["plan", "lenet5", "-p", "2", "--machine", "dgx-a100", "--memory", "1000",
                              "--time-limit", "5"])
    assert got.exit_code == 0, got.output
    assert "warning: --memory 1000 GiB is more than a dgx-a100 device holds" in " ".join(got.output.split())
    within = runner.invoke(app, ["plan", "lenet5", "-p", "2", "--machine", "dgx-a100", "--memory", "10",
                                 "--time-limit", "5"])
    assert within.exit_code == 0 and "warning: --memory" not in within.output


def test_pipeline_flags_say_the_zero_stage_they_plan_at():
    """--pipeline S (or --micro-batches M) answers by the pipeline search at ZeRO-0 where --zero is
    not given: the summary lists it as assumed, with how to weigh the stages."""
    got = runner.invoke(app, ["plan", "tiny-llama", "-p", "4", "--machine", "dgx-h100", "--pipeline", "2",
                              "--time-limit", "5", "--json"])
    assert got.exit_code == 0, got.output
    data = json.loads(got.stdout)
    assert any(a.startswith("--zero 0 (not weighed with --pipeline or --micro-batches") for a in data["assumed"])
    given = json.loads(runner.invoke(app, ["plan", "tiny-llama", "-p", "4", "--machine", "dgx-h100", "--pipeline",
                                           "2", "--zero", "1", "--time-limit", "5", "--json"]).stdout)
    assert not any(a.startswith("--zero") for a in given["assumed"])


def test_the_baselines_title_names_convolution_algorithms_only_where_there_are_convolutions():
    text = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--pipeline", "off", "--time-limit", "5", "--layers"],
                         env={"COLUMNS": "200"}).output
    assert "against the baselines (same cost model)" in text and "convolution's fastest" not in text
    cnn = runner.invoke(app, ["plan", "lenet5", "-p", "2", "--time-limit", "5", "--layers"],
                        env={"COLUMNS": "200"}).output
    assert "against the baselines (same cost model, each convolution's fastest algorithm)" in " ".join(cnn.split())


def test_a_pipelined_plans_memory_parts_are_the_peak_stages():
    """--layers of a pipelined plan: the memory by part adds up to the peak the line above names,
    the fullest stage's (it was always stage 0's)."""
    import re  # noqa: PLC0415 - this test's only use
    text = " ".join(runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--machine", "dgx-a100", "--pipeline", "2",
                                        "--time-limit", "5", "--layers"], env={"COLUMNS": "250"}).output.split())
    peak_stage = re.search(r"peak memory \S+ \S+ per device \(stage (\d+)", text).group(1)
    assert f"(stage {peak_stage}, the peak's)" in text


def test_a_plan_without_a_pipeline_that_the_executor_runs_is_pointed_at_execute(tmp_path):
    """lenet5 on this computer's 2 cores, the whole batch at once: `dnnplan execute` runs it, and the
    line says so (it pointed every plan without a pipeline at `dnnplan predict`)."""
    out = tmp_path / "p.yaml"
    got = runner.invoke(app, ["plan", "lenet5", "-p", "2", "-b", "16", "--machine", "local", "--out", str(out),
                              "--time-limit", "10"], env={"COLUMNS": "300"})
    assert got.exit_code == 0, got.output
    assert f"run it with `dnnplan execute {out} --ranks 2`" in " ".join(got.output.split())
