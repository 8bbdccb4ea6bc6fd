"""Child jobs (``mpiexec`` and its ranks, probes) that end when the command that started them ends.

* :func:`job` starts a command in its own session (so a terminal's Ctrl-C reaches only dnnplan,
  which ends the job in order) and, should anything interrupt the block it guards, a stop signal
  included, ends the job's whole process group (:func:`end_group`). A stop signal landing between
  the start and the block is deferred until the block guards the job: no window in which the
  job could be left running.
* :func:`launcher_env` names this process to the job (``DNNPLAN_LAUNCHER``: pid and start time);
  each rank and probe calls :func:`watch_launcher` at start, and exits within a second of the
  launcher's end however it ended (``kill -9`` included), so nothing is left running.
* Once the job has ended, the MPI shared-memory files its stopped ranks left are removed
  (:mod:`lifecycle.shm_leftovers`), and a rank whose launcher is gone removes those it maps
  before it exits: a stopped job leaves nothing in memory either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from networks.errors import DnnplanError
from lifecycle import scratch, shm_leftovers
from lifecycle.stops import sigint_handled_by

LAUNCHER_ENV = "DNNPLAN_LAUNCHER"
#: After SIGTERM, how long the group has to end before SIGKILL [s]
GRACE_S = 5.0
#: How often a rank looks for its launcher [s]
WATCH_S = 0.5
#: Exit status of a rank that ended because its launcher was gone
EXIT_ORPHANED = 3


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` (clock ticks after boot, from /proc); None when it is gone or a
    zombie (ended, not yet reaped), or /proc has no such file."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return None
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else None


def launcher_env(env: dict | None = None) -> dict:
    """``env`` (default: this process's) naming this process as the launcher of a job."""
    out = dict(os.environ if env is None else env)
    out[LAUNCHER_ENV] = f"{os.getpid()}:{start_time(os.getpid()) or ''}"
    return out


def launcher_alive(pid: int, started: str) -> bool:
    """Whether the launcher ``pid`` (started at ``started``, "" unknown) still runs (a zombie, ended
    but not yet reaped, does not)."""
    if os.path.isdir("/proc/self"):
        now = start_time(pid)
        return now is not None and (not started or now == started)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_launcher(environ: dict | None = None, every_s: float = WATCH_S) -> threading.Thread | None:
    """In a rank or probe: a daemon thread that exits this process (status :data:`EXIT_ORPHANED`)
    once the launcher named in ``DNNPLAN_LAUNCHER`` is gone; None when no launcher is named (the
    process was started by hand or by another MPI job)."""
    named = (os.environ if environ is None else environ).get(LAUNCHER_ENV, "")
    pid_text, _, started = named.partition(":")
    if not pid_text.isdigit():
        return None
    pid = int(pid_text)

    def watch() -> None:
        while launcher_alive(pid, started):
            time.sleep(every_s)
        try:
            print(f"dnnplan (pid {pid}) that started this process is gone; exiting", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        shm_leftovers.remove_own()  # its job is over: nobody is left to remove them after it
        os._exit(EXIT_ORPHANED)

    thread = threading.Thread(target=watch, name="launcher-watch", daemon=True)
    thread.start()
    return thread


def session_members(sid: int) -> list[int]:
    """The running processes of session ``sid`` (from /proc; none where there is no /proc)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] not in ("Z", "X"):
            out.append(int(name))
    return out


def end_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """End the job ``proc`` leads, all of it: SIGTERM to its process group (mpiexec passes it on
    to its ranks), then, once ``proc`` ended or ``grace_s`` passed, SIGKILL to every process
    still in its session (MPICH's Hydra puts each proxy and rank in a process group of its own,
    but they stay in the session :func:`job` started)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    while session_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass


@contextmanager
def job(cmd: list[str], env: dict | None = None, **popen) -> Iterator[subprocess.Popen]:
    """``cmd`` started in its own session, this process named as its launcher; the whole group
    is ended if the block raises (Ctrl-C, SIGTERM, a timeout, an error), and once it has ended, the
    MPI shared memory and scratch folders (lifecycle.scratch) its stopped processes left are removed.
    ``popen``: more arguments of :class:`subprocess.Popen`. A command that cannot be started is a
    DnnplanError."""
    proc = None
    deferred: list[int] = []
    earlier = shm_leftovers.before()
    try:
        with sigint_handled_by(lambda signum, frame: deferred.append(signum)):
            try:
                proc = subprocess.Popen(cmd, env=launcher_env(env), start_new_session=True, **popen)
            except OSError as err:
                raise DnnplanError(f"cannot start {cmd[0]}: {err.strerror or err}") from None
        if deferred:
            signal.raise_signal(deferred[0])  # taken now, as the handler restored takes it
        yield proc
    except BaseException:
        if proc is not None:
            end_group(proc)
        raise
    finally:
        if proc is not None and proc.poll() is not None:  # ended: what its stopped ranks left
            shm_leftovers.remove_left(earlier)
            scratch.remove_orphans()


def run_job(cmd: list[str], timeout_s: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """:func:`job` run to its end, output captured (as :func:`subprocess.run`);
    :class:`subprocess.TimeoutExpired` after ending the group when it outlives ``timeout_s``."""
    with job(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        out, err = proc.communicate(timeout=timeout_s)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
