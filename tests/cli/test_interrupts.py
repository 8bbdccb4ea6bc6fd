"""Hostile or mistaken input, and runs cut short: Ctrl-C in `dnnplan profile` keeps what was
measured and says how to resume; a rank killed in `dnnplan execute` is named with the signal and
the layer and phase it was in; output files are never put in folders made up on the way, nor
replaced without --force."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app
from dnnplan.commands import execute as execute_cmd
from dnnplan.output import check_output, check_outputs, write_json_file
from dnnplan import output
from networks.writing import SystemFailure
from executor.launch import mpiexec as launch
from executor.runtime.timers import FINISH, SETUP, ProgressFile, RankProgress, Timers, read_progress
from networks.errors import DnnplanError
from networks.loader import load_network
from profiler.tables.fingerprint import fingerprint
from profiler.timing.harness import QUICK
from profiler.run import ProfileInterrupted, profile_calls
from profiler.tables.store import open_for_device, read_table

from tests.support.ctrl_c import default_sigint
from tests.support.paths import ROOT
from tests.support.proc_table import Lines
from tests.support.processes import dnnplan_env
from tests.support.profile_calls import _two_calls

runner = CliRunner()
LENET5_LAYERS = [layer.name for layer in load_network("lenet5").layers]


# --- Ctrl-C in `dnnplan profile` ----------------------------------------------------------------

def test_an_interrupted_profile_saves_its_entries_and_raises():
    calls = _two_calls()
    fp = {"backend": "numpy", "threads": 1, "device": "test"}

    def stop_after_first(done, total, call):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(ProfileInterrupted) as info:
        profile_calls(calls, open_for_device(None, fp), policy=QUICK, progress=stop_after_first)
    run = info.value.run
    assert run.interrupted and list(run.measured) == [calls[0].key] and run.left == calls[1:]
    assert len(run.table.entries) == 1 and isinstance(info.value, DnnplanError)
    assert "not saved" in str(info.value)


def test_an_interrupted_profile_writes_its_table(tmp_path):
    calls = _two_calls()
    fp = fingerprint("numpy", 1)
    path = str(tmp_path / "t.json")

    def stop(done, total, call):
        raise KeyboardInterrupt

    with pytest.raises(ProfileInterrupted) as info:
        profile_calls(calls, open_for_device(path, fp), policy=QUICK, out=path, progress=stop)
    assert info.value.path == path and "saved to" in str(info.value)
    assert list(read_table(path).entries) == [calls[0].key]
    again = profile_calls(calls, open_for_device(path, fp), policy=QUICK, out=path)
    assert again.skipped == 1 and list(again.measured) == [calls[1].key]


@pytest.mark.slow
def test_ctrl_c_in_profile_saves_and_the_same_command_resumes(tmp_path):
    args = ["profile", "lenet5", "--devices", "1", "--batch", "1024", "--out", "T.json"]
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", *args], cwd=tmp_path, env=dnnplan_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint)
    lines = Lines(proc.stdout, proc.stderr)
    # after its first kernel (a fixed wait raced a loaded machine: interrupted before any was timed)
    assert lines.wait_for(lambda l: " kernel shapes measured" in l, 240, proc), lines.join()
    assert proc.poll() is None, "the profile ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    proc.wait(120)
    out = err = lines.join()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    entries = json.loads((tmp_path / "T.json").read_text())["entries"]
    assert len(entries) > 0
    text = " ".join(err.split())
    assert "interrupted:" in text and "resume with: dnnplan profile lenet5 --batch 1024 --out T.json" in text
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]
    again = subprocess.run([sys.executable, "-m", "dnnplan", *args, "--json"], cwd=tmp_path, env=dnnplan_env(tmp_path),
                           capture_output=True, text=True, timeout=1800)  # the rest of the profile, under load
    assert again.returncode == 0, again.stderr
    s = json.loads(again.stdout)
    assert s["resumed"] == len(entries) and s["measured"] == s["entries"] - len(entries) > 0
    assert not s["interrupted"] and s["left"] == 0


# --- Ctrl-C while a companion process is forked --------------------------------------------------

FORKED_UNDER_CTRL_C = """
import multiprocessing, os, signal, sys
from profiler.timing.companions import Companions
os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGINT))  # Ctrl-C as fork begins
try:
    Companions(1)
except KeyboardInterrupt:
    print("interrupted; companions left:", len(multiprocessing.active_children()))
    sys.exit(0)
print("the Ctrl-C was lost")
"""


def test_a_ctrl_c_landing_while_a_companion_is_forked_is_raised_not_lost():
    """Python drops a KeyboardInterrupt raised inside its at-fork hooks ("Exception ignored"): a
    Ctrl-C landing there would let `validate` run on to its end and exit 0."""
    got = subprocess.run([sys.executable, "-c", FORKED_UNDER_CTRL_C], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                         text=True, timeout=60, preexec_fn=default_sigint)
    assert got.stdout.strip() == "interrupted; companions left: 0", got.stdout + got.stderr
    assert "Exception ignored" not in got.stderr and "Traceback" not in got.stderr, got.stderr


# --- a rank killed in `dnnplan execute` ---------------------------------------------------------

def test_progress_records_round_trip(tmp_path):
    rec = ProgressFile(tmp_path, 3)
    rec.mark(None, "", SETUP)
    assert read_progress(tmp_path)[3].phase == SETUP and read_progress(tmp_path)[3].step is None
    timers = Timers(progress=rec)
    timers.begin_step(-1)
    with timers.span("conv 1", "fwd_compute"):
        got = read_progress(tmp_path)[3]
    assert (got.pid, got.step, got.layer, got.phase) == (os.getpid(), -1, "conv 1", "fwd_compute")
    rec.mark(None, "", FINISH)
    rec.close()
    assert read_progress(tmp_path)[3].phase == FINISH
    assert os.path.getsize(tmp_path / "rank-3") == 256  # one record, overwritten in place


def _rec(rank, pid, step, layer, phase="bwd_compute"):
    return RankProgress(rank, pid, step, phase, layer, 0.0)


CMD = ["mpiexec", "-n", "2", "python", "-m", "executor.launch.worker", "p.yaml", "--steps", "200", "--warmup", "2"]
HYDRA = ["=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES", "=   PID 11 RUNNING AT vm",
         "=   EXIT CODE: 9", "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)"]


def test_a_lost_rank_is_named_with_its_signal_and_layer():
    records = {0: _rec(0, 11, 56, "conv2"), 1: _rec(1, 12, 56, "fc1", "wait")}
    msg = launch.lost_rank_message(9, HYDRA, records, 1, CMD)  # the pidfd watch saw rank 1 end first
    assert msg.startswith("rank 1 (pid 12) was killed by SIGKILL (signal 9) in timed step 57 of 200, layer 'fc1'")
    assert launch.lost_rank_message(9, HYDRA, records, None, CMD).startswith("rank 0 (pid 11)")  # Hydra's pid
    warm = launch.lost_rank_message(11, [], {1: _rec(1, 12, -1, "relu1")}, 1, CMD)
    assert "rank 1 (pid 12) exited with status 11 in warm-up step 2 of 2, layer 'relu1'" in warm
    assert "while starting" in launch.lost_rank_message(9, HYDRA, {1: _rec(1, 12, None, "", SETUP)}, 1, CMD)
    assert "a rank was killed by SIGKILL (signal 9); which one could not be told" in \
        launch.lost_rank_message(9, HYDRA, {}, None, CMD)
    # the watch saw both ranks end at once: Hydra's pid (often a rank it killed itself) is not taken
    together = launch.lost_rank_message(9, HYDRA, records, None, CMD, together=True)
    assert together.startswith("a rank was killed by SIGKILL (signal 9); which one could not be told (the ranks "
                               "ended together"), together
    assert "mpiexec was killed by SIGTERM" in launch.lost_rank_message(-15, [], {}, None, CMD)
    ompi = ["mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."]
    assert launch.lost_rank_message(137, ompi, {}, None, CMD).startswith("rank 1 was killed by SIGKILL")


def test_worker_command_names_a_progress_folder():
    cmd = launch.worker_command("mpiexec", 2, "p.yaml", "/tmp/x/r.pkl", steps=3, warmup=1, check=False,
                                trace=False, threads=1, timeout_s=10)
    assert cmd[cmd.index("--progress") + 1] == "/tmp/x/r.pkl.progress"


def _worker_pids(marker: str) -> list[int]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout  # ww: not cut
    return sorted(int(line.split()[0]) for line in out.splitlines()
                  if "executor.launch.worker" in line and marker in line and "mpiexec" not in line)


def _into_the_steps(pids: list[int], deadline: float) -> None:
    """Wait until every rank's progress record (the folder after ``--progress`` in its command
    line) shows it in a layer of a step."""
    with open(f"/proc/{pids[0]}/cmdline", "rb") as fh:
        args = fh.read().decode().split("\0")
    folder = args[args.index("--progress") + 1]
    while time.monotonic() < deadline:
        records = read_progress(folder)
        if len(records) == len(pids) and all(r.step is not None and r.layer for r in records.values()):
            return
        time.sleep(0.1)
    raise AssertionError(f"the ranks never reached a layer: {read_progress(folder)}")


@pytest.mark.mpi
@pytest.mark.slow
def test_a_killed_rank_is_named_with_signal_and_layer(tmp_path):
    env = dnnplan_env(tmp_path)
    plan = tmp_path / "p.yaml"
    made = subprocess.run([sys.executable, "-m", "dnnplan", "plan", "lenet5", "--devices", "2", "--batch", "64",
                           "--machine", "dgx-a100", "--out", str(plan)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "dnnplan", "execute", str(plan), "--ranks", "2", "--steps", "5000",
                             "--json", str(tmp_path / "r.json")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        pids: list[int] = []
        while len(pids) < 2 and time.monotonic() - start < 240 and proc.poll() is None:  # a loaded machine
            time.sleep(0.2)
            pids = _worker_pids(str(plan))
        assert len(pids) == 2, f"the ranks did not start: {proc.poll()} {proc.stdout.read() if proc.poll() else ''}"
        _into_the_steps(pids, time.monotonic() + 240)  # a fixed wait raced a loaded machine (still starting)
        victim = pids[-1]
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - killed < 60  # the lost rank is noticed, not waited out (--steps 5000)
    text = " ".join(out.split())
    assert proc.returncode not in (0, None), text
    assert "Traceback" not in text and "BAD TERMINATION" not in text
    m = re.search(rf"rank ([01]) \(pid {victim}\) was killed by SIGKILL \(signal 9\) in .*layer '([^']+)'", text)
    # on a loaded machine the launcher may end the other rank before the watch wakes: then neither
    # is named (never the wrong one)
    together = "was killed by SIGKILL (signal 9); which one could not be told (the ranks ended together" in text
    assert m or together, text
    assert together or m.group(2) in LENET5_LAYERS
    assert not (tmp_path / "r.json").exists()  # no result that looks complete
    assert _worker_pids(str(plan)) == []


# --- output files -------------------------------------------------------------------------------

def test_check_output(tmp_path):
    check_output(None)
    check_output(str(tmp_path / "new.json"))
    with pytest.raises(DnnplanError, match=r"the folder .*nowhere does not exist"):
        check_output(str(tmp_path / "nowhere" / "p.yaml"))
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(DnnplanError, match="already exists.*pass --force to replace it"):
        check_output(str(tmp_path / "old.json"))
    check_output(str(tmp_path / "old.json"), force=True)
    with pytest.raises(DnnplanError, match="it is a folder"):
        check_output(str(tmp_path), force=True)
    with pytest.raises(DnnplanError, match="--json and --trace name the same file"):
        check_outputs({"--json": str(tmp_path / "a"), "--trace": str(tmp_path / "a")})


def test_a_folder_that_takes_no_new_files_is_refused_before_the_work(tmp_path, monkeypatch):
    """A permission or a read-only mount is found by creating (and removing) a file in the folder
    before the work starts, not when its result is written (which lost a whole run's measurements)."""
    def refused(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(output.tempfile, "mkstemp", refused)
    with pytest.raises(SystemFailure, match=r"cannot write \S*r.json: the folder \S* does not take new files "
                                           r"\(Permission denied \(EACCES\)\)"):
        check_outputs({"--json": str(tmp_path / "r.json")})
    monkeypatch.undo()
    check_outputs({"--json": str(tmp_path / "r.json")})
    assert os.listdir(tmp_path) == []  # the probe is gone


def test_write_json_file_creates_no_folder(tmp_path):
    with pytest.raises(DnnplanError, match="does not exist"):
        write_json_file(str(tmp_path / "a" / "b.json"), {})
    assert not (tmp_path / "a").exists()
    write_json_file(str(tmp_path / "b.json"), {"x": 1})
    assert json.loads((tmp_path / "b.json").read_text()) == {"x": 1} and os.listdir(tmp_path) == ["b.json"]


@pytest.fixture
def no_run(monkeypatch):
    """`execute` stops right after its checks of the command line (nothing is read or launched)."""
    def reached(*a, **k):
        raise DnnplanError("reached prepare")
    monkeypatch.setattr(execute_cmd, "prepare", reached)


@pytest.mark.parametrize("opt", ["--json", "--trace"])
def test_execute_outputs_are_checked_before_the_run(tmp_path, no_run, opt):
    missing = tmp_path / "nonexistent" / "dir" / "r.json"
    r = runner.invoke(app, ["execute", "p.yaml", "--ranks", "2", opt, str(missing)])
    assert r.exit_code == 2 and "does not exist" in r.output and str(missing.parent) in r.output, r.output
    assert not missing.parent.exists()
    old = tmp_path / "old.json"
    old.write_text("{}")
    r = runner.invoke(app, ["execute", "p.yaml", "--ranks", "2", opt, str(old)])
    assert r.exit_code == 2 and "pass --force to replace it" in r.output, r.output
    r = runner.invoke(app, ["execute", "p.yaml", "--ranks", "2", opt, str(old), "--force"])
    assert r.exit_code == 2 and "reached prepare" in r.output, r.output


def test_validate_json_is_checked_before_anything_runs(tmp_path):
    old = tmp_path / "v.json"
    old.write_text("{}")
    r = runner.invoke(app, ["validate", "no-such-network", "--ranks", "2", "--json", str(old)])
    assert r.exit_code == 2 and "pass --force to replace it" in r.output, r.output
    r = runner.invoke(app, ["validate", "lenet5", "--ranks", "2", "--json", str(tmp_path / "x" / "v.json")])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output


def test_profile_out_needs_its_folder_but_resumes_an_existing_table(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "nonexistent" / "g.json"
    r = runner.invoke(app, ["profile", "gemm", "--sizes", "16", "--quick", "--out", str(missing)])
    assert r.exit_code == 2 and "does not exist" in r.output and not missing.parent.exists(), r.output
    out = tmp_path / "g.json"
    for _ in range(2):  # the second run resumes the table: no --force wanted
        r = runner.invoke(app, ["profile", "gemm", "--sizes", "16", "--quick", "--out", str(out), "--json"])
        assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["measured"] == 0
    r = runner.invoke(app, ["profile-comm", "--out", str(missing)])
    assert r.exit_code == 2 and "does not exist" in r.output, r.output


def test_json_to_stdout_moves_the_tables_to_stderr(tmp_path, monkeypatch):
    """--json naming this process's standard output: is_stdout says so (the tables then print on
    stderr, leaving the JSON alone on stdout); another file is not stdout."""
    from dnnplan.output import is_stdout, tables_to_stderr  # noqa: PLC0415 - this test's only use
    from dnnplan.render.terminal.console import Console  # noqa: PLC0415
    out = tmp_path / "out.txt"
    with open(out, "w") as fh:
        saved = os.dup(1)
        os.dup2(fh.fileno(), 1)
        try:
            assert is_stdout(str(out)) and is_stdout("/dev/stdout")
            assert not is_stdout(str(tmp_path / "other.json")) and not is_stdout(None)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
    console = Console()
    tables_to_stderr(console)
    assert console.file is sys.stderr
