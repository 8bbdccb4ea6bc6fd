"""Pipelined plans run for real: GPipe and 1F1B on 2 and 4 ranks, data and tensor parallel inside
the stages, cuts inside blocks, the tied head's table on two stages, with ``--check`` against one
process and the per-stage report; a stage's memory does not grow with the micro-batches under 1F1B.
The schedules, plan files and report on one process: tests/unit/executor/runtime/test_pipelined_plans.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app

from tests.support.executor_plans import pipelined_plan
from tests.support.paths import ROOT


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,stages,micro,schedule,tensor", [
    (2, 2, 4, "1f1b", 1), (2, 2, 2, "gpipe", 1), (4, 2, 2, "1f1b", 2), (4, 2, 4, "gpipe", 1)])
def test_dnnplan_execute_runs_a_pipeline_and_matches_one_process(tmp_path, ranks, stages, micro, schedule, tensor):
    plan = pipelined_plan(tmp_path, ranks, stages, micro, schedule, tensor)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(app, ["execute", plan, "--ranks", str(ranks), "--steps", "2", "--warmup", "1",
                                      "--check", "--json", str(out), "--timeout", "240"])
    assert result.exit_code == 0, result.output
    assert "pipeline stages" in result.output and "bubble" in result.output
    data = json.loads(out.read_text())
    assert data["check"]["passed"] and data["check"]["worst_rel_error"] <= 1e-4, data["check"]
    rows = data["stages"]
    assert [r["stage"] for r in rows] == list(range(stages))
    assert [r["ranks"] for r in rows] == [list(range(s * ranks // stages, (s + 1) * ranks // stages))
                                          for s in range(stages)]
    assert all(r["measured_busy_s"] > 0 and r["predicted_busy_s"] > 0 for r in rows)
    measured = {layer["name"]: layer for layer in data["measured"]["layers"]}
    # the head's copy of the table and the embedding sum their gradients across the two stages
    assert measured["embed"]["grad_sync_s"] > 0 and measured["lm_head"]["grad_sync_s"] > 0


@pytest.mark.mpi
def test_a_stages_memory_does_not_grow_with_the_micro_batches_1f1b_keeps_out_of_flight(tmp_path):
    """1F1B keeps at most S - s micro-batches in flight, whatever their count: each send's buffer is
    let go once delivered and each micro-batch's weight gradients are summed layer by layer, so a
    stage's peak at 16 micro-batches of 2 samples is its peak at 4 (within allocator noise)."""
    peaks = []
    for micro, batch in ((4, 8), (16, 32)):
        out = tmp_path / f"m{micro}.json"
        result = CliRunner().invoke(app, ["execute", pipelined_plan(tmp_path, 2, 2, micro, "1f1b", batch=batch),
                                          "--ranks", "2", "--steps", "1", "--warmup", "1", "--json", str(out),
                                          "--timeout", "240"])
        assert result.exit_code == 0, result.output
        data = json.loads(out.read_text())
        peaks.append(data["measured_peak_bytes"])
        assert data["predicted_peak_bytes"] == json.loads((tmp_path / "m4.json").read_text())["predicted_peak_bytes"]
    assert abs(peaks[1] / peaks[0] - 1) < 0.02, peaks


def _run_case(plan: str, ranks: int, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "tests.support.ranks.run_pipeline", plan, *extra]
    mpiexec = Path(sys.executable).parent / "mpiexec"
    got = subprocess.run([str(mpiexec) if mpiexec.exists() else "mpiexec", "-n", str(ranks), *cmd], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    assert got.returncode == 0, got.stderr[-3000:]
    return json.loads(got.stdout.strip().splitlines()[-1])


@pytest.mark.mpi
def test_four_stages_cut_inside_blocks_with_tensors_crossing_several_stages(tmp_path):
    """Cuts that split blocks: the residual stream and the embedding's output each reach a later
    stage than the next, and a stage receives two tensors at once."""
    plan = pipelined_plan(tmp_path, 4, 4, 4, "1f1b", firsts=("embed", "h0.add1", "h0.proj", "h1.ln2"))
    got = _run_case(plan, 4)
    assert got["passed"] and got["worst_rel_error"] <= 1e-4, got


@pytest.mark.mpi
def test_the_check_fails_when_the_two_copies_of_the_tied_table_are_not_summed(tmp_path):
    plan = pipelined_plan(tmp_path, 2, 2, 2, "1f1b")
    got = _run_case(plan, 2, "--no-tied-sum")
    assert not got["passed"] and got["worst_tensor"] == "embed.tokens", got
