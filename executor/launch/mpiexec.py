"""Starting the ranks: ``mpiexec -n P python -m executor.launch.worker ...``, or the MPI job we are in.

* :func:`inside_mpi_job` tells whether this process is already one rank of an ``mpiexec`` /
  ``srun`` job (then the CLI runs the plan on that job's ranks instead of launching).
* :func:`profiler.probes.launch.find_mpiexec` looks next to the running Python first (the ``mpich``
  wheel installs its ``mpiexec`` there, matching the MPI that mpi4py loads), then on ``PATH``.
* :func:`threads_per_rank` gives each rank ``cores // P`` BLAS/OpenMP threads (at least 1) so the
  ranks do not oversubscribe the cores.
* :func:`launch` runs the job in its own session (lifecycle.jobs: ended whole, every rank with it,
  should anything stop dnnplan, and its ranks exit should dnnplan die), forwards its output
  without MPI's abort noise, kills the whole job when it outlives the timeout, and turns a
  failure into one line:
  :class:`RunFailed` carries the failing rank's message and the exit code. A rank that ends
  without a word (killed by a signal, say) is named with the signal or exit status and the step,
  layer and phase it last started: the ranks keep those in a progress folder
  (executor.runtime.timers.ProgressFile), and :class:`FirstExit` watches which rank's process ends first.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ContextManager

from costmodel.machine.loading import NODE_CORES_ENV, usable_cores
from executor.runtime.timers import FINISH, SETUP, RankProgress, read_progress
from networks.errors import DnnplanError
from networks.writing import EXIT_SYSTEM, SYSTEM_FAILED
from profiler.probes.launch import THREAD_VARS
from lifecycle.jobs import end_group, job

JOB_ENV = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_RANK")
EXIT_TIMEOUT = 124
KILL_GRACE_S = 5.0
#: The module each rank runs (``python -m``); tests put a stand-in runtime behind it.
WORKER_MODULE = "executor.launch.worker"

_RANK_LINE = re.compile(r"^rank (\d+): (.*)$")
_NOISE = re.compile(
    r"^(=+\s*$|=\s|Abort\(\d+\) on node|.*application called MPI_Abort|YOUR APPLICATION TERMINATED|"
    r"This typically refers to a problem|Please see the FAQ|\[mpiexec@|\[proxy:|\[unset\]:)")
#: What MPI says of a process that died: MPICH's Hydra ("PID 123 RUNNING AT host", "EXIT STRING:
#: Killed (signal 9)"; its PID may be another rank it killed), Open MPI ("process rank 1 with PID 123")
_BANNER_PID = re.compile(r"^=\s+PID (\d+) RUNNING AT")
_EXIT_SIGNAL = re.compile(r"EXIT STRING: .*\(signal (\d+)\)|exited on signal (\d+)")
_OMPI_RANK = re.compile(r"process rank (\d+) with PID (\d+)")


class RunFailed(DnnplanError):
    """The job failed or timed out; ``str()`` is the one line to show, ``exit_code`` the status."""

    def __init__(self, message: str, exit_code: int, output: str = ""):
        super().__init__(message)
        self.exit_code = exit_code
        self.output = output


def env_says_mpi_job(environ=None) -> bool:
    env = os.environ if environ is None else environ
    if any(env.get(v) for v in JOB_ENV):
        return True
    return bool(env.get("SLURM_PROCID") is not None and env.get("SLURM_NTASKS") and env.get("SLURM_STEP_ID"))


def inside_mpi_job(environ=None) -> bool:
    """Whether this process is one rank of an MPI job of more than one rank (or of exactly one
    rank started by mpiexec/srun).

    The environment a launcher sets is the first hint (PMI_RANK/PMI_SIZE of MPICH's Hydra and of
    Slurm's PMI, OMPI_COMM_WORLD_SIZE, SLURM_PROCID with SLURM_NTASKS inside a job step,
    MPI_LOCALNRANKS); MPI's own world size decides. Without any hint MPI is not initialised here
    unless it already was.
    """
    if env_says_mpi_job(environ):
        from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
        return True if MPI.COMM_WORLD.Get_size() > 1 else _started_by_launcher(environ)
    if "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
        return MPI.Is_initialized() and MPI.COMM_WORLD.Get_size() > 1
    return False


def _started_by_launcher(environ=None) -> bool:
    env = os.environ if environ is None else environ
    return env.get("PMI_SIZE") == "1" or env.get("OMPI_COMM_WORLD_SIZE") == "1"


def world():
    """``COMM_WORLD`` of the MPI job this process is one rank of."""
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py initialises MPI, only for a job
    return MPI.COMM_WORLD


def threads_per_rank(ranks: int, cores: int | None = None) -> int:
    """BLAS/OpenMP threads per rank so P ranks fill, and do not oversubscribe, the cores."""
    return max(1, (usable_cores() if cores is None else cores) // max(ranks, 1))


def thread_env(threads: int, base=None) -> dict:
    env = dict(os.environ if base is None else base)
    for var in THREAD_VARS:
        env[var] = str(threads)
    return env


def worker_command(mpiexec: str, ranks: int, plan_path: str, result_path: str, *, steps: int, warmup: int,
                   check: bool, trace: bool, threads: int, timeout_s: float, seed: int = 0,
                   time_kernels: str | None = None, progress_dir: str | None = None,
                   array_backend: str = "numpy", profile: str | None = None,
                   graphs: bool | None = None) -> list[str]:
    """The mpiexec command line of a run. ``progress_dir``: where the ranks keep their progress
    records [default: ``RESULT.progress``, beside the result]; :func:`launch` creates it."""
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", WORKER_MODULE, plan_path,
           "--result", result_path, "--steps", str(steps), "--warmup", str(warmup),
           "--threads", str(threads), "--seed", str(seed),
           # the ranks' own watchdog: a backstop should this process itself die
           "--timeout", str(timeout_s + 2 * KILL_GRACE_S),
           "--progress", progress_dir or f"{result_path}.progress"]
    if check:
        cmd.append("--check")
    if trace:
        cmd.append("--trace")
    if time_kernels:
        cmd += ["--time-kernels", time_kernels]
    if array_backend != "numpy":  # GPUs: the worker's device, and the table whose engines it pins
        cmd += ["--backend", array_backend] + (["--profile", profile] if profile else [])
    if graphs is not None:  # else each rank replays where the plan allows it
        cmd += ["--graphs", "on" if graphs else "off"]
    return cmd


def _pump(stream, sink, lines: list, state: dict) -> None:
    for raw in iter(stream.readline, ""):
        line = raw.rstrip("\n")
        lines.append(line)
        m = _RANK_LINE.match(line)
        if m and state.get("failure") is None:
            state["failure"] = line
        if m or state.get("failure") is not None or _NOISE.match(line):
            continue
        print(line, file=sink, flush=True)
    stream.close()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the launcher's process group (mpiexec tears down its ranks), then SIGKILL what is left."""
    end_group(proc, KILL_GRACE_S)


def _arg(cmd: list[str], flag: str) -> str | None:
    """The value after ``flag`` in a command line, or None."""
    return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else None


class FirstExit(threading.Thread):
    """Which rank's process ended first while the job ran. The ranks' pids come from their progress
    records; a pidfd per rank (Linux) wakes this thread the moment one ends, before MPI tears down
    the others, which MPI's own report cannot tell apart from it (Hydra reports one pid, often of a
    rank it killed itself). ``first`` stays None where that cannot be told."""

    def __init__(self, folder: str, ranks: int):
        super().__init__(daemon=True)
        self.folder, self.ranks = folder, ranks
        self.first: int | None = None
        #: several ranks were seen ended at once (the launcher ended the others before this thread
        #: woke): which ended first cannot be told, and MPI's own report is not taken for it
        self.together = False
        self._done = threading.Event()

    def run(self) -> None:
        if not hasattr(os, "pidfd_open"):
            return
        pids: dict[int, int] = {}
        while len(pids) < self.ranks and not self._done.wait(0.05):
            pids = {r: p.pid for r, p in read_progress(self.folder).items()}
        fds: dict[int, int] = {}
        gone = []
        try:
            for rank, pid in pids.items():
                try:
                    fds[os.pidfd_open(pid)] = rank
                except ProcessLookupError:
                    gone.append(rank)
            while not gone and fds and not self._done.is_set():
                gone = [fds[fd] for fd in select.select(list(fds), [], [], 0.2)[0]]
        except OSError:
            return
        finally:
            for fd in fds:
                os.close(fd)
        self.first = gone[0] if len(gone) == 1 else None
        self.together = len(gone) > 1

    def stop(self) -> int | None:
        self._done.set()
        self.join(1.0)
        return self.first


def _signal_name(n: int) -> str:
    try:
        return f"{signal.Signals(n).name} (signal {n})"
    except ValueError:
        return f"signal {n}"


def _where(rec: RankProgress, cmd: list[str]) -> str:
    """Where a rank was, from its progress record: step, layer and phase."""
    if rec.phase == SETUP:
        return "while starting (before its first layer)"
    if rec.phase == FINISH:
        return "after its last step (while the timings were gathered)"
    warmup, steps = int(_arg(cmd, "--warmup") or 0), _arg(cmd, "--steps") or "?"
    step = rec.step if rec.step is not None else 0
    when = f"warm-up step {warmup + step + 1} of {warmup}" if step < 0 else f"timed step {step + 1} of {steps}"
    return f"in {when}, layer '{rec.layer}', phase {rec.phase}"


def _dead_rank(lines: list[str], records: dict[int, RankProgress], first: int | None,
               together: bool = False) -> int | None:
    """The rank that died first: seen by :class:`FirstExit`, else named by MPI's report, unless the
    watch saw several end at once (``together``): MPI's report then names whichever it reaped first,
    often one it ended itself."""
    if first is not None:
        return first
    if together:
        return None
    for line in lines:
        if m := _OMPI_RANK.search(line):
            return int(m.group(1))
        if m := _BANNER_PID.match(line):
            return next((r for r, rec in records.items() if rec.pid == int(m.group(1))), None)
    return None


def lost_rank_message(returncode: int, lines: list[str], records: dict[int, RankProgress],
                      first: int | None, cmd: list[str], together: bool = False) -> str:
    """One line for a job that failed without any rank saying why: which rank ended, by which
    signal or with which exit status, and the step, layer and phase it last started; ``together``:
    the ranks were seen ended at once, so which one first is not told (:func:`_dead_rank`)."""
    if returncode < 0:
        return f"mpiexec was killed by {_signal_name(-returncode)} (all ranks stopped)"
    sig = next((int(m.group(1) or m.group(2)) for line in lines if (m := _EXIT_SIGNAL.search(line))), None)
    how = f"was killed by {_signal_name(sig)}" if sig else f"exited with status {returncode}"
    rank = _dead_rank(lines, records, first, together)
    if rank is None and sig:
        return (f"a rank {how}; which one could not be told ("
                + ("the ranks ended together; " if together else "") + f"the MPI job failed with exit status {returncode})")
    if rank is None:
        tail = next((l for l in reversed(lines) if l.strip() and not _NOISE.match(l)), "")
        return f"the MPI job failed with exit status {returncode}" + (f": {tail}" if tail else "")
    rec = records.get(rank)
    where = f" (pid {rec.pid}) {how} {_where(rec, cmd)}" if rec else f" {how}"
    return f"rank {rank}{where}; the other ranks were stopped"


def _start(cmd: list[str], threads: int, cwd: str | None) -> ContextManager[subprocess.Popen]:
    """The job started in its own session, its whole group ended should the block that follows it
    be interrupted (lifecycle.jobs.job: a stop signal between the start and the block included)."""
    env = thread_env(threads)
    env.setdefault("PYTHONUNBUFFERED", "1")
    # the ranks size machine `local` as this process did, whatever cores MPI binds each one to
    env[NODE_CORES_ENV] = str(usable_cores())
    root = str(Path(__file__).resolve().parents[2])  # so `-m executor.launch.worker` finds this checkout
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return job(cmd, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, bufsize=1)


def launch(cmd: list[str], threads: int, timeout_s: float, *, cwd: str | None = None) -> None:
    """Run ``cmd`` (an mpiexec command line) to completion or raise :class:`RunFailed`.

    Output is forwarded as it comes, minus MPI's abort banners; the first ``rank R: ...`` line a
    rank prints is the failure reported, else the rank that ended first (:func:`lost_rank_message`).
    Exit codes: 2 for a mistake the user can fix (the rank raised a DnnplanError), 1 for an
    internal error or a lost rank, 124 for a timeout. The progress folder named by ``--progress``
    in ``cmd`` is created here, and removed at the end.
    """
    folder = _arg(cmd, "--progress")
    if folder:
        shutil.rmtree(folder, ignore_errors=True)  # no record of an earlier run may be read as this one's
        os.makedirs(folder)
    try:
        _launch(cmd, threads, timeout_s, cwd, folder)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)


def _launch(cmd: list[str], threads: int, timeout_s: float, cwd: str | None, folder: str | None) -> None:
    with _start(cmd, threads, cwd) as proc:
        _follow(proc, cmd, timeout_s, folder)


def _follow(proc: subprocess.Popen, cmd: list[str], timeout_s: float, folder: str | None) -> None:
    out_lines: list[str] = []
    err_lines: list[str] = []
    state: dict = {"failure": None}
    pumps = [threading.Thread(target=_pump, args=(proc.stdout, sys.stdout, out_lines, state), daemon=True),
             threading.Thread(target=_pump, args=(proc.stderr, sys.stderr, err_lines, state), daemon=True)]
    watch = FirstExit(folder, int(_arg(cmd, "-n") or 0)) if folder else None
    for t in pumps + ([watch] if watch else []):
        t.start()
    started = time.monotonic()
    timed_out = False
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except KeyboardInterrupt:
        _kill_group(proc)
        raise
    finally:
        first = watch.stop() if watch else None
        together = watch.together if watch else False
    for t in pumps:
        t.join(2.0)
    output = "\n".join(out_lines + err_lines)
    if os.environ.get("DNNPLAN_DEBUG") and (timed_out or proc.returncode):
        print(output, file=sys.stderr)
    if timed_out:
        raise RunFailed(f"the run exceeded --timeout {timeout_s:g} s and was stopped after "
                        f"{time.monotonic() - started:.1f} s (all ranks killed); raise --timeout or run "
                        "fewer --steps", EXIT_TIMEOUT, output)
    if proc.returncode != 0:
        failure = state["failure"]
        if failure is None:
            records = read_progress(folder) if folder else {}
            raise RunFailed(lost_rank_message(proc.returncode, err_lines + out_lines, records, first, cmd, together),
                            1, output)
        msg = _RANK_LINE.match(failure).group(2)
        code = EXIT_TIMEOUT if msg.startswith("timed out") else 1 if msg.startswith("internal error") else \
            EXIT_SYSTEM if msg.startswith(SYSTEM_FAILED) else 2
        raise RunFailed(failure, code, output)
