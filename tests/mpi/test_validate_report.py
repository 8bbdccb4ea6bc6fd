"""`dnnplan validate --quick --report DIR`: a real, small validate writes a Markdown report, its
summary and figures that agree with its JSON; and the mistakes a user can make with --report are
one line and exit 2. No timing is asserted: only that the numbers agree with each other."""

from __future__ import annotations

import json
import statistics
import sys

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from dnnplan.render import fmt

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def table(markdown: str, heading: str) -> list[dict]:
    """The first table under ``## heading``, as one dict per row (header -> cell)."""
    part = markdown.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    lines = [l for l in part.splitlines() if l.startswith("|")]
    header = cells(lines[0])
    return [dict(zip(header, cells(l))) for l in lines[2:]]


def cells(line: str) -> list[str]:
    """A Markdown table row's cells (``\\|`` inside a cell is a literal bar)."""
    return [c.strip().replace("\\|", "|") for c in line.strip().strip("|").split(" | ")]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One real `validate --quick --report DIR --json FILE` (a profile cache of its own)."""
    tmp = tmp_path_factory.mktemp("quick")
    mp = pytest.MonkeyPatch()
    mp.setenv("DNNPLAN_CACHE", str(tmp / "cache"))
    try:
        result = runner.invoke(app, ["validate", "--quick", "--report", str(tmp / "report"), "--json",
                                     str(tmp / "v.json")])
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return tmp, result.output, json.loads((tmp / "v.json").read_text())


@pytest.mark.mpi
@pytest.mark.slow
def test_the_quick_report_holds_its_files_and_a_summary_that_agrees_with_the_plans(quick):
    tmp, output, data = quick
    folder = tmp / "report"
    assert data["network"] == "lenet5" and data["repeats"] == 2 and data["complete"]
    for name in ("step_time.png", "layer_error.png", "memory.png"):
        assert (folder / name).read_bytes()[:8] == PNG
    assert json.loads((folder / "summary.json").read_text()) == data["summary"]
    s, plans = data["summary"], data["plans"]
    rels = [abs(p["step_rel"]) for p in plans]
    assert s["plans"] == len(plans) >= 1 and all(p["repeats"] == 2 for p in plans)
    assert s["mean_abs_step_error"] == pytest.approx(statistics.fmean(rels))
    assert s["worst_abs_step_error"] == pytest.approx(max(rels)) and s["worst_abs_step_error"] >= s["mean_abs_step_error"]
    assert s["memory_error"] == pytest.approx(statistics.fmean(abs(p["memory_rel"]) for p in plans))
    layers = [abs(l["rel"]) for p in plans for l in p["layers"] if l["rel"] is not None]
    assert s["layer_median_error"] == pytest.approx(statistics.median(layers))
    assert s["layer_median_error"] <= s["layer_p90_error"] <= max(layers)
    assert s["noise_floor"] is not None and s["noise_floor"] >= 0
    fastest = min(p["measured_step_s"] for p in plans)
    mine = [p for p in plans if p["name"].split(" = ")[0] == "planner"][0]
    assert s["best_plan_loss"] == pytest.approx(mine["measured_step_s"] / fastest - 1)
    assert len(data["runs"]) == 2 * len(plans)
    for p in plans:  # the merged row agrees with its two runs
        runs = [r for r in data["runs"] if r["plan"] == p["plan"]]
        assert sorted(r["repeat"] for r in runs) == [0, 1]
        assert p["step_rel"] == pytest.approx(statistics.median(r["step_rel"] for r in runs))
        assert p["step_rel_min"] <= p["step_rel"] <= p["step_rel_max"]
        assert p["measured_peak_bytes"] > 0 and p["predicted_peak_bytes"] > 0
    assert "summary" in output and "report written:" in output


@pytest.mark.mpi
@pytest.mark.slow
def test_the_quick_validate_gives_the_in_run_error_beside_the_ahead_of_time_one(quick):
    """Every run of machine `local` is also predicted from its kernels re-timed inside it: that
    column agrees with the run's measured step, and the plan rows and summary with the runs."""
    tmp, output, data = quick
    assert data["in_run_note"] is None
    for r in data["runs"]:
        assert r["in_run_predicted_step_s"] > 0 and r["predicted_step_s"] > 0
        assert r["in_run_step_rel"] == pytest.approx(r["measured_step_s"] / r["in_run_predicted_step_s"] - 1)
        assert r["step_rel"] == pytest.approx(r["measured_step_s"] / r["predicted_step_s"] - 1)
        layers = [l for l in r["layers"] if l["in_run_predicted_s"]]
        assert layers and all(l["in_run_rel"] == pytest.approx(l["measured_s"] / l["in_run_predicted_s"] - 1)
                              for l in layers)
        assert r["in_run_layer_median_abs_rel"] == pytest.approx(statistics.median(abs(l["in_run_rel"])
                                                                                   for l in layers))
    # the two columns come from different kernel times: the profile before the run, and the run's
    assert any(r["in_run_predicted_step_s"] != r["predicted_step_s"] for r in data["runs"])
    for p in data["plans"]:
        runs = [r for r in data["runs"] if r["plan"] == p["plan"]]
        assert p["in_run_step_rel"] == pytest.approx(statistics.median(r["in_run_step_rel"] for r in runs))
        assert p["in_run_predicted_step_s"] == pytest.approx(statistics.median(r["in_run_predicted_step_s"]
                                                                               for r in runs))
    s, rels = data["summary"], [abs(p["in_run_step_rel"]) for p in data["plans"]]
    assert s["in_run_mean_abs_step_error"] == pytest.approx(statistics.fmean(rels))
    assert s["in_run_worst_abs_step_error"] == pytest.approx(max(rels))
    assert "model error given in-run kernel times" in " ".join(output.split())  # (headers wrap at 120 columns)


@pytest.mark.mpi
@pytest.mark.slow
def test_the_markdown_shows_the_numbers_of_the_json(quick):
    tmp, _, data = quick
    text = (tmp / "report" / "report.md").read_text()
    rows = {r["plan"]: r for r in table(text, "Plans")}
    assert set(rows) == {p["name"] for p in data["plans"]}
    for p in data["plans"]:
        r = rows[p["name"]]
        assert r["step error"] == f"{p['step_rel'] * 100:+.1f}%"
        assert r["step error range"] == f"{p['step_rel_min'] * 100:+.1f}% to {p['step_rel_max'] * 100:+.1f}%"
        assert r["predicted step"] == fmt.seconds(p["predicted_step_s"])
        assert r["measured step (median)"] == fmt.seconds(p["measured_step_s"])
        assert r["measured min"] == fmt.seconds(p["measured_step_min_s"])
        assert r["memory measured"] == fmt.nbytes(p["measured_peak_bytes"])
        assert r["memory error"] == f"{p['memory_rel'] * 100:+.1f}%"
        assert r["check"].startswith("ok")
        assert r["in-run predicted step"] == fmt.seconds(p["in_run_predicted_step_s"])
        assert r["model error given in-run kernel times"] == f"{p['in_run_step_rel'] * 100:+.1f}%"
        assert list(r).index("step error") < list(r).index("model error given in-run kernel times")
    summary = {r["measure"]: r["value"] for r in table(text, "Summary")}
    s = data["summary"]
    assert summary["mean |step error| over plans (ahead of time)"] == f"{s['mean_abs_step_error'] * 100:.1f}%"
    assert summary["worst |step error| (ahead of time)"] == f"{s['worst_abs_step_error'] * 100:.1f}%"
    assert summary["mean |step error| over plans, model error given in-run kernel times"] == \
        f"{s['in_run_mean_abs_step_error'] * 100:.1f}%"
    assert summary["worst |step error|, model error given in-run kernel times"] == \
        f"{s['in_run_worst_abs_step_error'] * 100:.1f}%"
    first = data["plans"][0]
    part = text.split(f"### {first['name']}\n", 1)[1].split("\n#", 1)[0]
    lines = [l for l in part.splitlines() if l.startswith("|")]
    layers = [dict(zip(cells(lines[0]), cells(l))) for l in lines[2:]]
    assert [r["layer"] for r in layers] == [l["name"] for l in first["layers"]]
    for r, l in zip(layers, first["layers"]):
        assert r["model error given in-run kernel times"] == ("-" if l["in_run_rel"] is None else
                                                              f"{l['in_run_rel'] * 100:+.1f}%")
    assert "| in-run kernel timing | on: after untimed steps that follow the timed ones |" in text
    assert "distance between" in " ".join(text.split())
    assert "| network | lenet5 |" in text and "| git commit |" in text and "## How to read this" in text
    assert "![step_time](step_time.png)" in text


def one_line_exit_2(args: list[str], words: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert words in " ".join(result.output.split()) and "Traceback" not in result.output


def test_report_mistakes_are_one_line_before_anything_runs(tmp_path, monkeypatch):
    a_file = tmp_path / "r.txt"
    a_file.write_text("x")
    one_line_exit_2(["validate", "--quick", "--report", str(a_file)], f"--report {a_file} is a file, not a folder")
    one_line_exit_2(["validate", "--quick", "--report", str(tmp_path / "no" / "r")], "does not exist")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.md").write_text("# an earlier report")
    one_line_exit_2(["validate", "--quick", "--report", str(tmp_path / "old")], "pass --force to replace it")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the plot extra were not installed
    one_line_exit_2(["validate", "--quick", "--report", str(tmp_path / "new")], "pip install 'dnnplan[plot]'")
    assert not (tmp_path / "new").exists()


def test_a_network_and_ranks_are_required_without_quick():
    one_line_exit_2(["validate", "--ranks", "2"], "name the network to validate")
    one_line_exit_2(["validate", "lenet5"], "--ranks is required")


def test_more_ranks_than_the_machines_devices_is_said_in_validates_flag():
    """validate has --ranks, not --devices: the fix names the flag it takes."""
    from costmodel.machine.loading import load_machine
    most = load_machine("local").max_devices()  # this computer's cores
    one_line_exit_2(["validate", "lenet5", "--ranks", str(most + 1)],
                    f"--ranks {most + 1}: {most + 1} ranks do not fit on machine 'local'")
    one_line_exit_2(["validate", "lenet5", "--ranks", str(most + 1)], "(run on fewer --ranks, or pick a larger "
                                                                     "--machine)")


@pytest.mark.mpi
@pytest.mark.slow
def test_the_quick_validate_predicts_from_kernels_timed_in_step_context_with_the_profile_alone_beside(quick):
    """Each plan's headline comes from its kernels timed in its step's context before the runs;
    the prediction from the profile's kernels timed alone is kept beside, with its own error."""
    tmp, output, data = quick
    for r in data["runs"]:
        assert r["profile_predicted_step_s"] > 0
        assert r["profile_step_rel"] == pytest.approx(r["measured_step_s"] / r["profile_predicted_step_s"] - 1)
    assert any(r["profile_predicted_step_s"] != r["predicted_step_s"] for r in data["runs"])
    for p in data["plans"]:
        runs = [r for r in data["runs"] if r["plan"] == p["plan"]]
        assert p["profile_step_rel"] == pytest.approx(statistics.median(r["profile_step_rel"] for r in runs))
    alone = [abs(p["profile_step_rel"]) for p in data["plans"]]
    assert data["summary"]["profile_mean_abs_step_error"] == pytest.approx(statistics.fmean(alone))
    assert data["summary"]["profile_worst_abs_step_error"] == pytest.approx(max(alone))
    assert "from the profile alone" in output
