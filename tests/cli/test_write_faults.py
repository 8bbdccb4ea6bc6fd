"""Failures of the system around the tool while it writes, and files it shares: every write is
atomic and checked (a full disk, a file too large, a device that refuses it: one line, exit 74, the
old file intact), files get the user's umask, a FIFO, socket or device given as input is refused
without blocking, and runs sharing a profile table merge into it under a lock."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import resource
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dnnplan.cli import app, EXIT_SYSTEM
from networks import writing
from networks.errors import DnnplanError
from networks.reading import read_text
from networks.writing import SystemFailure, write_file
from profiler.tables import lock as table_lock
from profiler.tables.store import read_table

from tests.support.paths import ROOT
from tests.support.processes import dnnplan_env
from tests.support.validate_runs import ARGS, FakeRuns

runner = CliRunner()


def _dnnplan(args: list[str], cwd: Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dnnplan", *args], cwd=cwd, env=dnnplan_env(cwd), capture_output=True,
                          text=True, timeout=timeout, **kw)


def _one_error_line(out: str) -> str:
    lines = [l for l in out.splitlines() if l.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in out, out
    return lines[0]


# --- the writer ----------------------------------------------------------------------------------

def test_a_write_is_atomic_with_the_users_umask(tmp_path):
    target = tmp_path / "p.yaml"
    old = os.umask(0o027)
    try:
        write_file(target, "a: 1\n")
    finally:
        os.umask(old)
    assert target.read_text() == "a: 1\n" and stat.S_IMODE(target.stat().st_mode) == 0o640
    write_file(target, b"b: 2\n")
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~old and os.listdir(tmp_path) == ["p.yaml"]


def test_a_new_output_made_by_another_process_meanwhile_is_kept(tmp_path, monkeypatch):
    """Without --force an output is new: a file another command wrote there while this one worked is
    kept and this one is refused (two plans given one new --out each said they wrote it, the first's
    lost). Where the file system takes no hard links, the last look before the rename does it."""
    out = tmp_path / "plan.yaml"
    out.write_text("theirs\n")
    with pytest.raises(DnnplanError, match="was made by another process while this one worked: it is kept"):
        write_file(out, "mine\n", replace=False)
    assert out.read_text() == "theirs\n" and [p.name for p in tmp_path.iterdir()] == ["plan.yaml"]
    write_file(tmp_path / "new.yaml", "mine\n", replace=False)
    assert (tmp_path / "new.yaml").read_text() == "mine\n" and len(list(tmp_path.iterdir())) == 2
    monkeypatch.setattr(writing.os, "link", lambda a, b: (_ for _ in ()).throw(OSError(errno.EPERM, "no links")))
    with pytest.raises(DnnplanError, match="was made by another process"):
        write_file(out, "mine\n", replace=False)
    write_file(tmp_path / "third.yaml", "mine\n", replace=False)
    assert (tmp_path / "third.yaml").read_text() == "mine\n" and len(list(tmp_path.iterdir())) == 3


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO])
def test_a_failed_write_leaves_the_old_file_and_says_why(tmp_path, monkeypatch, code):
    target = tmp_path / "t.json"
    target.write_text("old")

    def refuse(fd, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(writing.os, "write", refuse)
    with pytest.raises(SystemFailure) as info:
        write_file(target, "new")
    line = str(info.value)
    assert line.startswith(f"{target}: could not be written: writing it failed: {os.strerror(code)} "
                           f"({errno.errorcode[code]})") and "\n" not in line, line
    assert "previous file there is unchanged" in line
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]  # no temporary left


def test_a_failed_rename_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "t.json"
    target.write_text("old")
    monkeypatch.setattr(writing.os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(SystemFailure, match=r"renaming it into place failed: I/O error \(EIO\)"):
        write_file(target, "new")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["t.json"]


def test_dev_full_is_written_through_and_its_enospc_reported():
    with pytest.raises(SystemFailure, match=r"/dev/full: could not be written: writing it \(a character device\) "
                                            r"failed: No space left on device \(ENOSPC\)"):
        write_file("/dev/full", "x")
    write_file("/dev/null", "x")  # a device that takes it: written through, nothing replaced


def test_a_fifo_target_is_written_through_and_one_nobody_reads_is_not_waited_on(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(SystemFailure, match=r"opening it \(a FIFO\) failed: .*ENXIO.*no process is reading"):
        write_file(fifo, "x")
    assert time.monotonic() - start < 5
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while True:  # cat opens the FIFO for reading when it gets the CPU
        try:
            write_file(fifo, '{"x": 1}')
            break
        except SystemFailure:
            assert time.monotonic() < deadline, "cat never opened the FIFO"
            time.sleep(0.05)
    assert reader.communicate(timeout=30)[0] == '{"x": 1}' and stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_socket_target_is_refused(tmp_path):
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(DnnplanError, match="it is a socket, not a file"):
            write_file(path, "x")


# --- special files as input ----------------------------------------------------------------------

def test_a_fifo_socket_or_device_as_input_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "net.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(DnnplanError, match=r"net.yaml: is a FIFO, not a network spec file"):
        read_text(fifo, "network spec")
    with pytest.raises(DnnplanError, match=r"/dev/zero: is a character device, not a plan file"):
        read_text("/dev/zero", "plan")
    assert time.monotonic() - start < 5
    r = _dnnplan(["plan", str(fifo), "--devices", "2"], tmp_path, timeout=60)  # nobody writes: open would block
    assert r.returncode == 2 and "is a FIFO, not a network spec file" in _one_error_line(r.stderr), r.stderr


# --- the commands on a full device or a file-size limit ------------------------------------------

def test_plan_out_dev_full_is_exit_74_in_one_line(tmp_path):
    r = _dnnplan(["plan", "lenet5", "--devices", "2", "--machine", "dgx-a100", "--out", "/dev/full"], tmp_path)
    assert r.returncode == EXIT_SYSTEM, r.stderr
    assert "/dev/full: could not be written" in _one_error_line(r.stderr) and "ENOSPC" in r.stderr
    assert "step " in r.stdout  # the plan the search found is shown all the same, not lost


def test_a_full_standard_output_is_named_as_the_file_refused(tmp_path):
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "dnnplan", "info", "lenet5"], cwd=tmp_path, env=dnnplan_env(tmp_path),
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == EXIT_SYSTEM, r.stderr
    assert "standard output: the system refused: No space left on device" in _one_error_line(r.stderr)


@pytest.mark.parametrize("args", [["--help"], [], ["--version"]])
def test_the_help_and_version_to_a_full_standard_output_are_one_line_too(tmp_path, args):
    """Printed before any command runs (the help, with no command too, and --version): the same line
    and exit 74 as a command's output to a full disk, no traceback."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "dnnplan", *args], cwd=tmp_path, env=dnnplan_env(tmp_path),
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == EXIT_SYSTEM, r.stderr
    assert "standard output: the system refused: No space left on device" in _one_error_line(r.stderr)


@pytest.mark.parametrize("closed", [1, 2])
def test_a_standard_stream_the_caller_closed_is_written_nowhere(tmp_path, closed):
    """``>&-`` or ``2>&-``: what would go there goes nowhere, and the command's status is its own
    (the plan written with --out, exit 0), not an internal error or a failed exit."""
    out = tmp_path / "plan.yaml"
    r = subprocess.run([sys.executable, "-m", "dnnplan", "plan", "lenet5", "--devices", "2", "--machine", "dgx-a100",
                        "--out", str(out)], cwd=tmp_path, env=dnnplan_env(tmp_path), capture_output=closed == 1,
                       text=True, timeout=300, preexec_fn=lambda: os.close(closed))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert out.exists()
    if closed == 1:
        assert "error" not in r.stderr and "Traceback" not in r.stderr


def _file_size_limit(limit: int):
    def limit_it():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail with EFBIG
    return limit_it


def test_a_plan_over_a_file_size_limit_keeps_the_old_plan(tmp_path):
    made = _dnnplan(["plan", "lenet5", "--devices", "2", "--machine", "dgx-a100", "--out", "p.yaml"], tmp_path)
    assert made.returncode == 0, made.stderr
    before = (tmp_path / "p.yaml").read_text()
    r = _dnnplan(["plan", "resnet50", "--devices", "2", "--machine", "dgx-a100", "--out", "p.yaml", "--force"],
                 tmp_path, preexec_fn=_file_size_limit(1000))
    assert r.returncode == EXIT_SYSTEM, r.stderr
    assert "p.yaml: could not be written: writing it failed: File too large (EFBIG)" in _one_error_line(r.stderr)
    assert (tmp_path / "p.yaml").read_text() == before and not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_profile_out_dev_full_is_refused_before_any_work(tmp_path):
    r = _dnnplan(["profile", "gemm", "--sizes", "16", "--quick", "--out", "/dev/full"], tmp_path, timeout=120)
    assert r.returncode == 2 and "/dev/full: is a character device, not a profile table file" in \
        _one_error_line(r.stderr), r.stderr


def test_a_profile_table_over_a_file_size_limit_keeps_the_old_table(tmp_path):
    args = ["profile", "gemm", "--quick", "--out", "t.json", "--json"]
    assert _dnnplan([*args, "--sizes", "16"], tmp_path).returncode == 0
    before = (tmp_path / "t.json").read_text()
    r = _dnnplan([*args, "--sizes", "32,48,64"], tmp_path, preexec_fn=_file_size_limit(len(before) + 100))
    assert r.returncode == EXIT_SYSTEM and "t.json: could not be written" in _one_error_line(r.stderr), r.stderr
    assert (tmp_path / "t.json").read_text() == before


@pytest.mark.mpi
def test_execute_json_dev_full_is_exit_74_in_one_line(tmp_path):
    made = _dnnplan(["plan", "lenet5", "--devices", "1", "--batch", "8", "--machine", "dgx-a100", "--out", "p.yaml"],
                    tmp_path)
    assert made.returncode == 0, made.stderr
    r = _dnnplan(["execute", "p.yaml", "--ranks", "1", "--steps", "1", "--warmup", "0", "--no-step-context",
                  "--json", "/dev/full"], tmp_path)
    assert r.returncode == EXIT_SYSTEM, r.stdout + r.stderr
    assert "/dev/full: could not be written" in _one_error_line(r.stderr) and "ENOSPC" in r.stderr


def test_validate_report_on_a_full_disk_is_exit_74_in_one_line(tmp_path, monkeypatch):
    from executor.session import validate as validation  # noqa: PLC0415
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(validation, "measure_both", FakeRuns())
    real = os.write

    def full(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path / "out")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(writing.os, "write", full)
    r = runner.invoke(app, [*ARGS, "--report", "out"])
    assert r.exit_code == EXIT_SYSTEM, r.output
    assert "could not be written: writing it failed: No space left on device (ENOSPC)" in _one_error_line(r.output)
    assert not [p for p in os.listdir(tmp_path / "out") if p.endswith(".tmp")]
    r = runner.invoke(app, [*ARGS, "--report", "/dev/full", "--force"])
    assert r.exit_code == 2 and "is a file, not a folder" in r.output, r.output


# --- tables shared by several runs ---------------------------------------------------------------

def test_two_profiles_into_one_table_keep_both_entry_sets(tmp_path):
    """10 times: two `dnnplan profile` started together into one table; every entry of both stays."""
    env = dnnplan_env(tmp_path)
    for rep in range(10):
        table = tmp_path / f"t{rep}.json"
        procs = [subprocess.Popen([sys.executable, "-m", "dnnplan", "profile", "gemm", "--sizes", sizes, "--quick",
                                   "--out", str(table), "--json"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for sizes in ("16,24,32", "40,48,56")]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        entries = read_table(table).entries
        for sizes in ((16, 24, 32), (40, 48, 56)):
            for n in sizes:
                assert any(f"|{n},{n},{n}," in key for key in entries), (rep, n, sorted(entries))
        assert sum(json.loads(out)["measured"] for out, _ in outs) == len(entries), (rep, outs)
        assert not [p for p in os.listdir(tmp_path) if p.endswith((".tmp", ".lock"))]


def test_a_lock_held_too_long_is_reported_with_its_holder(tmp_path):
    table = str(tmp_path / "t.json")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, table_lock.lock_path(table)], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with pytest.raises(SystemFailure) as info:
            with table_lock.locked(table, wait_s=0.5):
                pass
        assert 0.4 < time.monotonic() - start < 10
        assert f"another dnnplan (pid {holder.pid}) has been writing this table for more than 0.5 s" in str(info.value)
        assert str(info.value).startswith(f"{table}:")
    finally:
        holder.kill()
        holder.wait()
    with table_lock.locked(table, wait_s=5):  # its holder killed: the lock is let go with it
        pass


HOLD = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, str(int(sys.argv[2]) if len(sys.argv) > 2 else os.getpid()).encode())
print("held", flush=True)
time.sleep(600)
"""


def test_a_stale_lock_whose_recorded_holder_is_gone_is_recovered(tmp_path):
    """The recorded holder is dead, but a process it left keeps the lock's descriptor (a forked
    child, say): the lock is taken as stale after a second and written anyway."""
    table = str(tmp_path / "t.json")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    keeper = subprocess.Popen([sys.executable, "-c", HOLD, table_lock.lock_path(table), str(dead.pid)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert keeper.stdout.readline().strip() == "held"
        start = time.monotonic()
        with table_lock.locked(table, wait_s=30):
            took = time.monotonic() - start
        assert table_lock.STALE_AFTER_S <= took < 20
    finally:
        keeper.send_signal(signal.SIGKILL)
        keeper.wait()


def test_the_lock_serialises_writers(tmp_path):
    table = str(tmp_path / "t.json")
    with table_lock.locked(table):
        fd = os.open(table_lock.lock_path(table), os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
        assert open(table_lock.lock_path(table)).read().strip() == str(os.getpid())
    assert not os.path.exists(table_lock.lock_path(table))


@pytest.mark.mpi
def test_a_rank_that_cannot_write_its_result_is_exit_74(tmp_path):
    from executor.launch import mpiexec as launch  # noqa: PLC0415 - the launcher and its worker command
    from profiler.probes.launch import find_mpiexec  # noqa: PLC0415
    made = _dnnplan(["plan", "lenet5", "--devices", "1", "--batch", "8", "--machine", "dgx-a100", "--out", "p.yaml"],
                    tmp_path)
    assert made.returncode == 0, made.stderr
    cmd = launch.worker_command(find_mpiexec(), 1, str(tmp_path / "p.yaml"), "/dev/full", steps=1, warmup=0,
                                check=False, trace=False, threads=1, timeout_s=300,
                                progress_dir=str(tmp_path / "progress"))
    with pytest.raises(launch.RunFailed) as info:
        launch.launch(cmd, 1, 300)
    assert info.value.exit_code == EXIT_SYSTEM, str(info.value)
    assert str(info.value).startswith("rank 0: the system failed: /dev/full: could not be written") and \
        "ENOSPC" in str(info.value)


def test_two_models_saving_into_the_per_user_cache_keep_both_timings(tmp_path, monkeypatch):
    """The cache `--machine local` fills is a shared table: two processes (here two models, as two
    plans in two terminals) that timed different kernels both keep theirs."""
    from costmodel.machine.loading import load_machine  # noqa: PLC0415
    from costmodel.compute.profile_table import Entry  # noqa: PLC0415
    from tests.support.profile_calls import _two_calls  # noqa: PLC0415
    from profiler.ondemand import local_compute_model  # noqa: PLC0415
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    first, second = (local_compute_model(load_machine("local"), progress=False) for _ in range(2))
    for model, call in zip((first, second), _two_calls()):
        model._keep_timed({call.key: Entry(1e-3, 1e-3, 0.0, 3, call.flops, call.bytes)})
    first.save()
    second.save()  # read the cache before the first saved: it adds to what is there now
    assert set(read_table(first.path).entries) == {c.key for c in _two_calls()}


@pytest.fixture
def small_mount(tmp_path):
    """A 64 KiB tmpfs of its own (needs root and the right to mount; skipped without them)."""
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root and CAP_SYS_ADMIN)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def test_plan_on_a_full_and_on_a_read_only_file_system_keeps_the_old_plan(small_mount, tmp_path):
    plan = small_mount / "p.yaml"
    plan.write_text("old")
    fd = os.open(small_mount / "fill", os.O_WRONLY | os.O_CREAT)
    with pytest.raises(OSError, match="No space left"):  # fill what is left
        while True:
            os.write(fd, b"\0" * 4096)
    os.close(fd)
    args = ["plan", "lenet5", "--devices", "2", "--machine", "dgx-a100", "--out", str(plan), "--force"]
    r = _dnnplan(args, tmp_path)
    assert r.returncode == EXIT_SYSTEM and "No space left on device (ENOSPC)" in _one_error_line(r.stderr), r.stderr
    assert plan.read_text() == "old" and sorted(os.listdir(small_mount)) == ["fill", "p.yaml"]
    os.unlink(small_mount / "fill")
    assert subprocess.run(["mount", "-o", "remount,ro", str(small_mount)], capture_output=True).returncode == 0
    r = _dnnplan(args, tmp_path)
    assert r.returncode == EXIT_SYSTEM and "Read-only file system (EROFS)" in _one_error_line(r.stderr), r.stderr
    assert plan.read_text() == "old"
