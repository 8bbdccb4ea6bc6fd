"""A command stopped or killed leaves nothing running: SIGTERM, SIGHUP and Ctrl-C to `execute`,
`profile` and `profile-comm` end mpiexec and every rank, keep what was measured, say what was kept
and exit 128 + the signal; `kill -9` of `execute` leaves ranks that notice within a second or two
and exit. Every check reads the process table (tests/support/proc_table.py): the whole tree the command
started, taken while it runs, must be gone within 10 s, and the MPI shared-memory files its ranks
made with it (lifecycle/shm_leftovers.py). The tests wait for progress lines or for
the ranks to appear, never for a fixed time. The stop signals and jobs themselves, in a child
Python: tests/unit/lifecycle/test_jobs_and_stops.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lifecycle import shm_leftovers
from tests.support import proc_table
from tests.support.ctrl_c import default_stop_signals
from tests.support.processes import dnnplan_env


GONE_WITHIN_S = 10.0
#: How long a loaded 2-core machine may take to start a command's ranks
START_S = 240.0


def _start(args: list[str], cwd: Path) -> tuple[subprocess.Popen, proc_table.Lines]:
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", *args], cwd=cwd, env=dnnplan_env(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_stop_signals)
    return proc, proc_table.Lines(proc.stdout, proc.stderr)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _runs(pid: int, module: str) -> bool:
    """Whether ``pid`` is ``python -m module`` (mpiexec's own command line names it too)."""
    args = _cmdline(pid)
    return bool(args) and not os.path.basename(args[0]).startswith(("mpiexec", "mpirun")) and \
        "-m" in args and module in args


def _tree_with(proc: subprocess.Popen, module: str, count: int) -> dict[int, str]:
    """The command's process tree once ``count`` processes of it run ``python -m module`` (read
    from /proc/PID/cmdline: full arguments)."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline and proc.poll() is None:
        seen = proc_table.tree(proc.pid)
        if sum(_runs(pid, module) for pid in seen) >= count:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"{count} x {module} never ran (exit {proc.poll()})")


def _stopped(proc: subprocess.Popen, lines: proc_table.Lines, seen: dict[int, str], sig: int) -> str:
    """Send ``sig``, wait for the command to end, and check that nothing of ``seen`` is left."""
    os.kill(proc.pid, sig)
    try:
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = proc_table.gone_within(seen, GONE_WITHIN_S)
    assert not left, "left running:\n" + proc_table.describe(left)
    return lines.join()


@pytest.fixture
def no_shm_left():
    """The MPI shared-memory files the test's ranks made are gone when it ends (none on a system
    without /dev/shm); a file some live process still maps is another job's (a test run beside this
    one), not this test's leftover."""
    earlier = shm_leftovers.before()
    yield
    new = {f"{shm_leftovers.SHM_DIR}/{name}" for name in set(shm_leftovers.before()) - earlier}
    left = new - shm_leftovers.mapped(new)
    assert not left, f"left in {shm_leftovers.SHM_DIR}: {sorted(left)}"


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("plan")
    made = subprocess.run([sys.executable, "-m", "dnnplan", "plan", "lenet5", "--devices", "2", "--batch", "64",
                           "--machine", "dgx-a100", "--out", str(folder / "p.yaml")], env=dnnplan_env(folder),
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    return folder / "p.yaml"


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stopped_execute_ends_mpiexec_and_every_rank(tmp_path, plan_file, sig, no_shm_left):
    args = ["execute", str(plan_file), "--ranks", "2", "--steps", "100000", "--json", "r.json"]
    proc, lines = _start(args, tmp_path)
    seen = _tree_with(proc, "executor.launch.worker", 2)
    assert len(seen) >= 4  # dnnplan, mpiexec (and its proxy), two ranks
    out = _stopped(proc, lines, seen, sig)
    assert proc.returncode == 128 + sig, out
    name = "Ctrl-C (SIGINT)" if sig == signal.SIGINT else signal.Signals(sig).name
    assert f"error: interrupted by {name}: the run was stopped and every rank ended" in out and "Traceback" not in out
    assert f"run it again with: dnnplan execute {plan_file} --ranks 2 --steps 100000 --json r.json" in out
    assert not (tmp_path / "r.json").exists()


@pytest.mark.mpi
@pytest.mark.slow
def test_ranks_of_an_execute_killed_with_sigkill_exit_on_their_own(tmp_path, plan_file, no_shm_left):
    proc, lines = _start(["execute", str(plan_file), "--ranks", "2", "--steps", "100000"], tmp_path)
    seen = _tree_with(proc, "executor.launch.worker", 2)
    _stopped(proc, lines, seen, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL


@pytest.mark.mpi
@pytest.mark.slow
def test_sigterm_in_validate_keeps_the_finished_plans_and_ends_every_rank(tmp_path):
    args = ["validate", "lenet5", "--ranks", "2", "--batch", "8", "--machine", "dgx-a100", "--steps", "300",
            "--warmup", "0", "--no-check", "--json", "v.json"]
    proc, lines = _start(args, tmp_path)
    first = lines.wait_for(lambda l: l.startswith("measured "), START_S, proc)
    assert first, lines.join()
    seen = _tree_with(proc, "executor.launch.worker", 2)  # the second plan's ranks (the first plan's have ended)
    out = _stopped(proc, lines, seen, signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in out, out
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["complete"] is False and [p["name"] for p in data["plans"]] == [first.split()[1].rstrip(":")]
    text = " ".join(out.split())
    assert f"interrupted: 1 of {data['planned']} plans finished" in text and "kept in v.json" in text
    assert f"resume with: dnnplan {' '.join(args)}" in text


@pytest.mark.slow
def test_sigterm_in_profile_saves_what_was_measured_and_says_how_to_resume(tmp_path):
    args = ["profile", "lenet5", "--devices", "1", "--batch", "1024", "--out", "T.json"]
    proc, lines = _start(args, tmp_path)
    assert lines.wait_for(lambda l: " kernel shapes measured" in l, START_S, proc), lines.join()
    seen = proc_table.tree(proc.pid)
    out = _stopped(proc, lines, seen, signal.SIGTERM)
    assert proc.returncode == 143, out
    text = " ".join(out.split())
    assert "interrupted:" in text and "resume with: dnnplan profile lenet5 --batch 1024 --out T.json" in text
    assert json.loads((tmp_path / "T.json").read_text())["entries"] and "Traceback" not in out
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".tmp", ".lock"))]


@pytest.mark.mpi
@pytest.mark.slow
def test_sigterm_in_profile_comm_ends_its_mpi_job(tmp_path):
    proc, lines = _start(["profile-comm", "--ranks", "2", "--out", "c.json"], tmp_path)
    seen = _tree_with(proc, "profiler.comm.bench", 2)
    out = _stopped(proc, lines, seen, signal.SIGTERM)
    assert proc.returncode == 143 and "Traceback" not in out, out
    assert "interrupted by SIGTERM: the benchmark's MPI job was ended; nothing is kept" in out
    assert "run it again with: dnnplan profile-comm --out c.json" in out and not (tmp_path / "c.json").exists()
