"""`dnnplan plan --sweep ... --sweep-jobs N` when the system kills the worker planning a point (SIGKILL,
as the out-of-memory killer sends it): that point's row says so in one line, the other points are
planned and shown, nothing is left running, no traceback, exit 0 as with a point that has no plan.
The worker really is killed: the point's planning sends itself SIGKILL."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from executor.session import sweep

runner = CliRunner()
SWEEP = ["plan", "gpt-tiny", "-m", "dgx-a100,dgx-h100", "--sweep", "1,2", "--tokens", "1B", "--sweep-jobs", "2"]
KILLED = "its worker process was killed by signal 9 (SIGKILL: out of memory?)"


@pytest.fixture
def dgx_h100_x2_killed(monkeypatch):
    """The worker planning dgx-h100 x 2 devices is killed; every other point is planned as usual."""
    real = sweep.plan_point

    def plan_point(request, ctx, name, devices, budget):
        if (name, devices) == ("dgx-h100", 2):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(request, ctx, name, devices, budget)

    monkeypatch.setattr(sweep, "plan_point", plan_point)


def test_the_killed_point_is_a_row_saying_so_and_the_others_are_planned(dgx_h100_x2_killed):
    before = set(multiprocessing.active_children())  # other tests' workers, not this sweep's
    result = runner.invoke(app, [*SWEEP, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [(r["machine"], r["devices"]) for r in rows] == [("dgx-a100", 1), ("dgx-a100", 2), ("dgx-h100", 1),
                                                            ("dgx-h100", 2)]
    lost = rows[3]
    assert lost["error"] == KILLED and lost["lost"] and not lost.get("fastest") and not lost.get("cheapest")
    assert all(r["step_s"] > 0 and "error" not in r for r in rows[:3])
    assert f"dgx-h100 x 2: failed: {KILLED}" in result.stderr and "Traceback" not in result.output
    assert not set(multiprocessing.active_children()) - before


def test_the_table_marks_the_point_failed_with_its_note(dgx_h100_x2_killed):
    result = runner.invoke(app, SWEEP, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert any("dgx-h100" in line and "failed" in line and "note 1" in line for line in lines), result.stdout
    assert any(f"dgx-h100 x 2: {KILLED}" in line for line in lines), result.stdout
    assert "Traceback" not in result.output


def test_a_machine_whose_kernels_are_timed_here_is_planned_last(monkeypatch):
    """Machine `local` times its kernels as it is planned (minutes on a small CPU): the other
    machines' points come first, so a stop during its timing keeps them; the table keeps the order named."""
    planned = []

    def plan_point(request, ctx, name, devices, budget):
        planned.append((name, devices))
        return {"machine": name, "devices": devices, "error": "stand-in"}

    monkeypatch.setattr(sweep, "plan_point", plan_point)
    result = runner.invoke(app, ["plan", "lenet5", "-m", "local,dgx-a100", "--sweep", "1,2", "--json"])
    assert result.exit_code == 0, result.output
    assert planned == [("dgx-a100", 1), ("dgx-a100", 2), ("local", 1), ("local", 2)]
    assert [(r["machine"], r["devices"]) for r in json.loads(result.stdout)["rows"]] == \
        [("local", 1), ("local", 2), ("dgx-a100", 1), ("dgx-a100", 2)]
