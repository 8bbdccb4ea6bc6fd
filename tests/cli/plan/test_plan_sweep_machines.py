"""`dnnplan plan --sweep` over several machines: the comparison table and its marks, the JSON rows,
time and cost to train at each machine's price, the mistakes refused in one line, Ctrl-C."""

import json
import os
import signal
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from tests.support.cli_errors import one_error_line
from tests.support.ctrl_c import default_sigint
from tests.support.paths import ROOT

runner = CliRunner()
MACHINES = "dgx-a100,dgx-h100,dgx-a100-40gb,dgx1-v100"
#: the H100 is the fastest at every count; priced at 100 a device-hour it is never the cheapest
PRICES = "dgx-a100=1.6,dgx-h100=100,dgx-a100-40gb=1.2,dgx1-v100=0.8"
SWEEP = ["plan", "gpt-tiny", "-m", MACHINES, "--sweep", "1,2,4", "--tokens", "1B"]


def _json(*args: str) -> dict:
    result = runner.invoke(app, [*SWEEP, *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_machine_and_count_is_a_row_with_time_and_cost_to_train():
    data = _json("--gpu-hour-price", PRICES)
    rows = data["rows"]
    assert [(r["machine"], r["devices"]) for r in rows] == [(m, p) for m in MACHINES.split(",") for p in (1, 2, 4)]
    assert data["machines"] == MACHINES.split(",") and data["tokens"] == 1e9 and data["complete"]
    for r in rows:
        train = r["train"]
        assert train["devices"] == r["devices"] and train["price_per_device_hour"] == data["prices"][r["machine"]]
        assert train["cost"] == pytest.approx(train["device_hours"] * data["prices"][r["machine"]])
        assert r["tokens_per_s"] == pytest.approx(train["tokens_per_step"] / r["step_s"])


def test_the_fastest_and_the_cheapest_are_marked_once_each():
    data = _json("--gpu-hour-price", PRICES)
    rows = data["rows"]
    fastest = [r for r in rows if r["fastest"]]
    cheapest = [r for r in rows if r["cheapest"]]
    assert len(fastest) == len(cheapest) == 1
    assert fastest[0]["step_s"] == min(r["step_s"] for r in rows) and fastest[0]["machine"] == "dgx-h100"
    assert cheapest[0]["train"]["cost"] == min(r["train"]["cost"] for r in rows)
    assert cheapest[0]["machine"] != "dgx-h100"  # the price, not the speed, decides it
    assert data["fastest"] == {"machine": "dgx-h100", "devices": fastest[0]["devices"]}
    assert data["cheapest"] == {"machine": cheapest[0]["machine"], "devices": cheapest[0]["devices"]}


def test_the_table_marks_the_rows_and_states_the_rule():
    result = runner.invoke(app, [*SWEEP, "--gpu-hour-price", "2"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any("dgx-h100" in line and "fastest" in line for line in lines)
    assert any("cheapest" in line and "│" in line for line in lines)
    assert "fastest: the shortest step; cheapest: the least cost" in result.stdout
    # a line a point on stderr as each finishes, never on stdout
    assert "planned 12 of 12" in result.output and "planned" not in result.stdout


def test_without_prices_the_cheapest_is_the_fewest_device_hours():
    data = _json()
    cheapest = next(r for r in data["rows"] if r["cheapest"])
    assert cheapest["train"]["cost"] is None and data["prices"] is None
    assert cheapest["train"]["device_hours"] == min(r["train"]["device_hours"] for r in data["rows"])


def test_several_machines_without_sweep_compare_at_the_devices_given():
    result = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "-m", "dgx-a100,dgx-h100", "--json"])
    assert result.exit_code == 0, result.output
    assert [(r["machine"], r["devices"]) for r in json.loads(result.stdout)["rows"]] == [("dgx-a100", 2),
                                                                                      ("dgx-h100", 2)]


def test_one_machine_and_one_price_still_plans_as_before():
    result = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "-m", "dgx-h100", "--tokens", "1B",
                                 "--gpu-hour-price", "dgx-h100=3", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["train"]["price_per_device_hour"] == 3.0


def test_pipeline_auto_plans_each_point_as_plan_does_pipelined_where_nothing_fits_whole():
    args = ["plan", "gpt-tiny", "-b", "64", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2", "--memory", "0.005", "--json"]
    whole = json.loads(runner.invoke(app, args).stdout)["rows"]
    assert all("no plan of gpt-tiny at batch 64 fits" in r["error"] for r in whole)
    result = runner.invoke(app, [*args, "--pipeline", "auto"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert all(r["memory_peak_bytes"] <= 0.005 * 2 ** 30 * (1 + 1e-9) for r in rows)
    assert [r["pipeline"]["stages"] for r in rows] == [1, 2, 1, 2]  # accumulation on 1 device, 2 stages on 2
    assert sum(r["fastest"] for r in rows) == 1


def test_counts_of_a_machine_where_nothing_fits_share_one_note():
    result = runner.invoke(app, ["plan", "gpt-tiny", "-b", "64", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2,4",
                                 "--memory", "0.005"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())  # the notes wrap at the table's width
    # 4 devices have a plan; the others' note says what was weighed and what weighs more
    assert "note 1: dgx-a100 x 1, 2: no plan of the whole batch at once fits 5.12 MiB a device" in text
    assert "--pipeline auto weighs gradient accumulation and pipelines" in text
    assert "note 2: dgx-h100 x 1, 2:" in text and "note 3" not in text
    assert "--pipeline auto plans each as `dnnplan plan` does" in text
    piped = runner.invoke(app, ["plan", "gpt-tiny", "-b", "64", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2,4",
                                "--memory", "0.001", "--pipeline", "auto"])
    assert piped.exit_code == 0, piped.output
    text = " ".join(piped.stdout.split())
    assert "x 1: no plan fits 1.02 MiB a device, with or without pipelining; the least a plan of one stage needs" in text
    assert "weighs gradient accumulation" not in text and "planned with the whole batch at once" not in text


def test_plot_draws_a_line_a_machine(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "machines.png"
    result = runner.invoke(app, [*SWEEP, "--gpu-hour-price", "2", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {png}" in result.stdout


def test_a_plot_of_a_sweep_without_a_plan_says_no_figure_was_written(tmp_path):
    png = tmp_path / "none.png"
    result = runner.invoke(app, ["plan", "gpt-tiny", "-b", "64", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2",
                                 "--memory", "0.001", "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert f"warning: --plot {png}: no figure written, no point of the sweep has a plan" in \
        " ".join(result.output.split())
    assert not png.exists() and "wrote" not in result.output


@pytest.mark.parametrize("args, words", [
    (["-m", "dgx-a100,dgx-z9"], "dgx-z9"),
    (["-m", "dgx-a100,dgx-h100", "--tokens", "1B", "--gpu-hour-price", "dgx-a100=1,dgx-h200=3"],
     "--gpu-hour-price names 'dgx-h200', which --machine does not plan for"),
    (["-m", "dgx-a100,dgx-h100", "--tokens", "1B", "--gpu-hour-price", "dgx-a100=1"], "no price for dgx-h100"),
    (["-m", "dgx-a100,dgx-h100", "--tokens", "1B", "--gpu-hour-price", "dgx-a100=1,dgx-h100=free"],
     "is not a price"),
    (["-m", "dgx-a100,dgx-h100", "--profile", "x.json"], "--profile times one machine's kernels"),
    (["-m", "dgx-a100,dgx-h100", "--pipeline", "2"], "a fixed --pipeline or --micro-batches cannot be swept"),
    (["--micro-batches", "2"], "a fixed --pipeline or --micro-batches cannot be swept"),
    (["-m", "dgx-a100,dgx-h100", "--sweep-jobs", "0"], "--sweep-jobs must be a whole number from 1 to 64"),
    (["-m", "dgx-a100,local", "--sweep-jobs", "2"], "machine `local`"),
    (["--out", "sweep.yaml"], "--out writes one plan's file, and --sweep plans several"),
    (["--layers"], "--layers prints one plan's per-layer tables, and --sweep plans several"),
    (["--emit", "megatron"], "--emit prints one plan's launch file, and --sweep plans several"),
    (["--sweep", "8,16,...,12"], "multiplies on to a larger end"),
])
def test_mistakes_are_one_line_exit_2(args, words):
    line = one_error_line(runner.invoke(app, ["plan", "gpt-tiny", "--sweep", "1,2", *args]))
    assert words in line


def test_out_comparing_machines_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "plan.yaml"
    line = one_error_line(runner.invoke(app, ["plan", "gpt-tiny", "-m", "dgx-a100,dgx-h100", "--out", str(out)]))
    assert "several machines are compared" in line and not out.exists()


def test_one_plans_outputs_comparing_machines_name_the_comparison():
    for flags, words in ((["--emit", "megatron"], "--emit prints one plan's launch file, and several machines"),
                         (["--layers"], "--layers prints one plan's per-layer tables, and several machines")):
        line = one_error_line(runner.invoke(app, ["plan", "gpt-tiny", "-m", "dgx-a100,dgx-h100", *flags]))
        assert words in line and "--sweep" not in line.split("(")[0]


def test_sweep_jobs_without_a_sweep_is_one_line():
    line = one_error_line(runner.invoke(app, ["plan", "gpt-tiny", "--sweep-jobs", "2"]))
    assert "--sweep-jobs plans a sweep's points" in line


def test_tokens_for_a_network_without_tokens_is_one_line():
    line = one_error_line(runner.invoke(app, ["plan", "lenet5", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2",
                                              "--tokens", "1B"]))
    assert "reads no token ids" in line


def test_points_in_worker_processes_give_the_same_rows():
    one = _json("--gpu-hour-price", PRICES)["rows"]
    two = _json("--gpu-hour-price", PRICES, "--sweep-jobs", "2")["rows"]
    assert [(r["machine"], r["devices"], r["step_s"], r["fastest"], r["cheapest"]) for r in two] == \
        [(r["machine"], r["devices"], r["step_s"], r["fastest"], r["cheapest"]) for r in one]


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_ctrl_c_keeps_the_points_planned_and_exits_130(jobs):
    # llama3-70b at batch 16: 256 devices has no plan at once, 512 and up search for seconds
    args = [sys.executable, "-m", "dnnplan", "plan", "llama3-70b", "-m", "dgx-a100,dgx-h100", "--sweep",
            "256,512,1024,2048", "--time-limit", "120", "--sweep-jobs", jobs, "--json"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "120"}, preexec_fn=default_sigint)
    try:
        for line in proc.stderr:
            if line.startswith("planned 1 of 8"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    data = json.loads(out)
    assert not data["complete"] and 1 <= len(data["rows"]) < 8
    assert "points planned, shown above" in err



def test_what_a_sweep_assumes_is_said_as_a_plans_summary_says_it():
    """The flags not given are said under the table and in the JSON (``assumed``), as a single plan
    says them; the batch, the same at every point, is the default at --devices where given, else at
    the sweep's most devices, and says the count it is the default of (the JSON's batch_assumed)."""
    data = _json()
    assert data["batch"] == 64 and data["batch_assumed"].endswith(", at 4 devices")  # gpt-tiny: 16 a device
    fewer = _json("-p", "2")
    assert fewer["batch"] == 32 and fewer["batch_assumed"].endswith(", at 2 devices")
    given = _json("-b", "8")
    assert given["batch"] == 8 and "batch_assumed" not in given
    # each machine's precision where they differ: the V100 has no bfloat16 peak
    assert "--precision bf16 (a network with attention on a GPU; fp16 on dgx1-v100)" in data["assumed"]
    assert "--optimizer adam (a network with attention)" in data["assumed"]
    table = " ".join(runner.invoke(app, [*SWEEP, "--precision", "fp16"]).output.split())
    assert "assumed, the flag not given: --optimizer adam (a network with attention); --batch 64" in table
    assert "--precision" not in table.split("assumed, the flag not given:")[1]
    # each point of a comparison weighs the ZeRO stages, as a single plan does; a strong-scaling sweep
    # (one machine, no tokens) plans each at ZeRO-0 unless given, and says so
    assert not any(a.startswith("--zero") for a in data["assumed"])
    assert all(r["zero"] in (0, 1, 2, 3) for r in data["rows"] if "step_s" in r)
    scaling = runner.invoke(app, ["plan", "gpt-tiny", "--sweep", "1,2,4", "--json"])
    assert any(a.startswith("--zero 0 (each point") for a in json.loads(scaling.stdout)["assumed"])
    assert not any(a.startswith("--zero") for a in json.loads(
        runner.invoke(app, ["plan", "gpt-tiny", "--sweep", "1,2,4", "--zero", "1", "--json"]).stdout)["assumed"])


def test_a_point_of_one_micro_batch_is_not_called_accumulated():
    """--pipeline auto: a point whose answer is the whole batch at once (one stage, one micro-batch)
    shows its layers' mix alone; gradient accumulation says its micro-batches; a pipeline its stages."""
    from dnnplan.render.sweep import _mix

    row = {"mix": {"N+H": 641, "N+F": 2}}
    assert _mix({**row, "pipeline": {"stages": 1, "micro_batches": 1, "chunks": 1}}) == "N+H x641, N+F x2"
    assert _mix({**row, "pipeline": {"stages": 1, "micro_batches": 4, "chunks": 1}}).startswith(
        "4 micro-batches (accumulated); ")
    assert _mix({**row, "pipeline": {"stages": 2, "micro_batches": 8, "chunks": 1}}).startswith(
        "pipeline 2 (8 micro-batches); ")


def test_a_comparisons_point_is_the_plan_dnnplan_plan_answers_there():
    """Comparing machines, each point weighs the ZeRO stages as `dnnplan plan --pipeline off` does at
    that count (it planned ZeRO-0 alone: gpt2 on 8 H100s 40.6 ms where the plan's ZeRO-1 takes 39)."""
    swept = runner.invoke(app, ["plan", "gpt2", "-m", "dgx-a100,dgx-h100", "--sweep", "8", "--tokens", "1B", "--json"])
    assert swept.exit_code == 0, swept.output
    for machine in ("dgx-a100", "dgx-h100"):
        single = runner.invoke(app, ["plan", "gpt2", "-p", "8", "-m", machine, "--pipeline", "off", "--json"])
        assert single.exit_code == 0, single.output
        want = json.loads(single.stdout)
        got = next(r for r in json.loads(swept.stdout)["rows"] if r["machine"] == machine)
        assert (got["step_s"], got["zero"]) == (want["step_s"], want["zero"]) and want["zero"] == 1, machine


def test_a_figure_named_for_a_format_it_is_not_written_in_is_refused(tmp_path):
    """--plot x.jpg wrote PNG bytes under a .jpg name; now one line before any point is planned."""
    got = runner.invoke(app, [*SWEEP, "--plot", str(tmp_path / "x.jpg")])
    assert got.exit_code == 2 and "the figure is written as PNG, PDF or SVG" in got.output, got.output
    assert not (tmp_path / "x.jpg").exists() and "planned" not in got.output
