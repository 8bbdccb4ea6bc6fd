"""Ctrl-C in `dnnplan validate`: the kernels timed while planning are saved, the plans that
finished are kept in a partial report (the --json file, else validate-NETWORK-Pr.partial.json),
and the same command resumes, running only the plans not measured yet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from dnnplan.commands import validate as validate_command
from executor.session import validate as validation
from executor.session.validate import RunSettings, ValidationInterrupted

from tests.support.ctrl_c import default_sigint
from tests.support.paths import ROOT
from tests.support.validate_runs import ARGS, FakeRuns

runner = CliRunner()
SETTINGS = RunSettings(steps=1, warmup=0, check=False)


def _interrupted(monkeypatch, ctx, **kwargs) -> ValidationInterrupted:
    monkeypatch.setattr(validation, "measure_both", FakeRuns(stop_at=2))
    with pytest.raises(ValidationInterrupted) as info:
        validation.validate(ctx, "lenet5", "dgx-a100", SETTINGS, **kwargs)
    return info.value


def test_an_interrupted_validate_keeps_the_finished_plan_and_a_resumed_one_skips_it(monkeypatch):
    ctx = validation.resolve("lenet5", 2, 8, "dgx-a100", None, False)
    finished = []
    err = _interrupted(monkeypatch, ctx, on_run=finished.append)
    report = err.report
    assert not report.complete and report.planned >= 2 and len(report.rows) == 1 and len(finished) == 1
    data = report.to_json()
    assert validation.is_partial(data) and data["complete"] is False
    # a report edited so that a row lacks its name is not one to resume (it ended in an internal error)
    assert not validation.is_partial({**data, "runs": [{}]})
    assert not validation.is_partial({**data, "plans": [{k: v for k, v in data["plans"][0].items() if k != "name"}]})
    assert {k: data[k] for k in ("network", "ranks", "batch", "machine", "steps", "warmup")} == {
        "network": "lenet5", "ranks": 2, "batch": 8, "machine": "dgx-a100", "steps": 1, "warmup": 0}
    first = data["plans"][0]
    assert first["plan"] == validation.plan_layers(finished[0].plan) and first["measured_step_s"] == 0.001
    assert "1 of" in str(err) and "run the same command again" in str(err)

    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    reused = []
    done = validation.validate(ctx, "lenet5", "dgx-a100", SETTINGS, earlier=data["plans"], on_reused=reused.append)
    assert first["plan"] not in again.plans and len(again.plans) == report.planned - 1
    assert done.complete and done.to_json()["complete"] is True and len(done.rows) == report.planned
    assert done.rows[0]["resumed"] and done.rows[0]["measured_step_s"] == 0.001 and reused == [done.rows[0]]
    assert not any(r.get("resumed") for r in done.rows[1:])


def test_a_partial_report_of_other_settings_is_told_apart():
    ctx = validation.resolve("lenet5", 2, 8, "dgx-a100", None, False)
    data = validation.new_report(ctx, "dgx-a100", SETTINGS, planned=3).to_json()
    data["complete"] = False
    assert validation.conflicts(data, validation.new_report(ctx, "dgx-a100", SETTINGS)) == []
    other = validation.resolve("lenet5", 2, 16, "dgx-a100", None, False)
    more_steps = RunSettings(steps=3, warmup=0, check=False)
    assert validation.conflicts(data, validation.new_report(other, "dgx-a100", more_steps)) == [
        "batch 8 there, 16 here", "steps 1 there, 3 here"]


def test_ctrl_c_while_planning_saves_the_kernels_timed(monkeypatch, tmp_path):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("DNNPLAN_NO_PROFILE", "1")  # nothing is timed for real here
    ctx = validation.resolve("lenet5", 2, 8, "local", None, False)
    saved = []
    monkeypatch.setattr(ctx.compute, "save", lambda: saved.append(True))

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(validation, "make_plan", stop)
    with pytest.raises(ValidationInterrupted) as info:
        validation.validate(ctx, "lenet5", "local", SETTINGS)
    assert saved == [True] and info.value.cache == ctx.compute.path
    assert info.value.report.rows == [] and info.value.report.planned == 0 and not info.value.report.complete
    assert "while planning" in str(info.value)


def test_the_command_keeps_a_partial_file_and_the_same_command_resumes(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "measure_both", FakeRuns(stop_at=2))
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 130, r.output
    partial = tmp_path / "validate-lenet5-2r.partial.json"
    data = json.loads(partial.read_text())
    assert data["complete"] is False and len(data["plans"]) == 1
    assert f"interrupted: 1 of {data['planned']} plans finished" in r.output
    assert "kept in validate-lenet5-2r.partial.json" in r.output
    assert f"resume with: dnnplan {' '.join(ARGS)}" in r.output
    assert "Traceback" not in r.output

    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    assert "not run again" in r.output and "(earlier run)" in r.output
    assert len(again.plans) == data["planned"] - 1 and data["plans"][0]["plan"] not in again.plans
    assert not partial.exists()  # spent: the report is complete


class _Killed(BaseException):
    """The process ended outright (kill -9): nothing of the command runs after it."""


def test_a_run_killed_outright_keeps_the_plans_measured_before_it(monkeypatch, tmp_path):
    """The partial report is written after each plan, not only on Ctrl-C: a run killed mid-plan
    (here, the second plan's run never returns) keeps the first, and the same command resumes."""
    monkeypatch.chdir(tmp_path)
    runs = FakeRuns()

    def killed_at_the_second(prep, **kwargs):
        if len(runs.plans) == 1:
            raise _Killed
        return runs(prep, **kwargs)

    monkeypatch.setattr(validation, "measure_both", killed_at_the_second)
    with pytest.raises(_Killed):
        runner.invoke(app, ARGS)
    data = json.loads((tmp_path / "validate-lenet5-2r.partial.json").read_text())
    assert data["complete"] is False and len(data["plans"]) == 1 and data["plans"][0]["plan"] == runs.plans[0]
    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0 and "not run again" in r.output, r.output
    assert runs.plans[0] not in again.plans and not (tmp_path / "validate-lenet5-2r.partial.json").exists()


def test_a_partial_file_of_other_settings_is_refused(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "measure_both", FakeRuns(stop_at=2))
    out = tmp_path / "v.json"
    assert runner.invoke(app, [*ARGS, "--json", str(out)]).exit_code == 130
    assert json.loads(out.read_text())["complete"] is False
    r = runner.invoke(app, [*ARGS[:5], "16", *ARGS[6:], "--json", str(out)])
    assert r.exit_code == 2, r.output
    assert f"{out} holds an interrupted validate of other settings (batch 8 there, 16 here)" in " ".join(
        r.output.split())
    monkeypatch.setattr(validation, "measure_both", FakeRuns())
    r = runner.invoke(app, [*ARGS, "--json", str(out)])  # the same settings: a resume, no --force wanted
    assert r.exit_code == 0, r.output
    done = json.loads(out.read_text())
    assert done["complete"] is True and done["plans"][0]["resumed"] and len(done["plans"]) == done["planned"]
    r = runner.invoke(app, [*ARGS, "--json", str(out)])  # complete: replaced only with --force
    assert r.exit_code == 2 and "pass --force to replace it" in r.output, r.output


def test_ctrl_c_while_the_tables_print_keeps_every_plan_measured(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "measure_both", FakeRuns())

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(validate_command.render, "validate_table", stop)
    r = runner.invoke(app, [*ARGS, "--json", "v.json"])
    assert r.exit_code == 130 and "the complete report is in v.json" in " ".join(r.output.split()), r.output
    done = json.loads((tmp_path / "v.json").read_text())
    assert done["complete"] is True and len(done["plans"]) == done["planned"]

    runs = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", runs)
    r = runner.invoke(app, ARGS)  # no --json: every plan kept as a partial report
    partial = tmp_path / "validate-lenet5-2r.partial.json"
    assert r.exit_code == 130 and "kept in validate-lenet5-2r.partial.json" in r.output, r.output
    data = json.loads(partial.read_text())
    assert data["complete"] is False and len(data["plans"]) == data["planned"] == len(runs.plans)

    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    again = FakeRuns()
    monkeypatch.setattr(validation, "measure_both", again)
    r = runner.invoke(app, ARGS)  # the same command shows them, running none again
    assert r.exit_code == 0 and again.plans == [] and not partial.exists(), r.output


# --- Ctrl-C at a terminal, for real -------------------------------------------------------------

def _worker_pids(marker: str) -> list[int]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "executor.launch.worker" in line and marker in line]


def _workers_gone(marker: str, within_s: float = 10.0) -> list[int]:
    """The workers still running after up to ``within_s`` seconds (a loaded machine reaps slowly)."""
    deadline = time.monotonic() + within_s
    while (left := _worker_pids(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _start(args: list[str], cwd: Path, env: dict) -> tuple[subprocess.Popen, list[threading.Thread], list[str],
                                                             list[str]]:
    """The command in its own process group (as a terminal runs it), stdout and stderr gathered
    line by line."""
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=default_sigint)
    out: list[str] = []
    err: list[str] = []
    readers = [threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True),
               threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)]
    for t in readers:
        t.start()
    return proc, readers, out, err


@pytest.mark.mpi
@pytest.mark.slow
def test_ctrl_c_in_validate_keeps_the_finished_plans_and_the_same_command_resumes(tmp_path):
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "DNNPLAN_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT),
           "TMPDIR": str(tmp_path / "tmp")}  # the plans' temporary folder: the workers' marker
    # 200 steps: each plan's run lasts seconds, so the Ctrl-C sent on the first "measured" line lands
    # while the second plan runs, however slowly this process reads that line
    args = ["validate", "lenet5", "-n", "2", "--batch", "8", "--steps", "200", "--warmup", "0", "--json", "v.json"]
    proc, readers, out_lines, lines = _start(args, tmp_path, env)
    try:
        start = time.monotonic()
        while not any(l.startswith("measured ") for l in lines) and proc.poll() is None \
                and time.monotonic() - start < 1200:  # planning times kernels on demand: slow on a loaded machine
            time.sleep(0.05)
        assert proc.poll() is None, "validate ended before it could be interrupted: " + "".join(lines)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the whole foreground process group
        proc.wait(300)
        for t in readers:
            t.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)
    out = "".join(out_lines)
    err = " ".join("".join(lines).split())
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err and _workers_gone(str(tmp_path)) == []
    assert (tmp_path / "v.json").exists(), out + err
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["complete"] is False and data["machine"] == "local" and data["steps"] == 200
    assert len(data["plans"]) == 1 and data["plans"][0]["plan"]["strategies"]
    first = data["plans"][0]
    assert f"interrupted: 1 of {data['planned']} plans finished ({first['name']}); kept in v.json" in err
    assert "resume with: dnnplan validate lenet5 --ranks 2 --batch 8 --steps 200 --warmup 0 --json v.json" in err
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]

    again = subprocess.run([sys.executable, "-m", "dnnplan", *args], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=1800)  # a loaded 2-core machine: 300 s was too short under load 20
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"measured {first['name']}: step" in again.stderr and "not run again" in again.stderr
    assert sum(1 for l in again.stderr.splitlines() if l.startswith("measured ") and "predicted" in l) == \
        data["planned"] - 1
    done = json.loads((tmp_path / "v.json").read_text())
    assert done["complete"] is True and len(done["plans"]) == data["planned"]
    assert done["plans"][0]["resumed"] and done["plans"][0]["measured_step_s"] == first["measured_step_s"]
