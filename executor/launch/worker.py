"""The per-rank entry point: ``python -m executor.launch.worker PLAN --result FILE [...]``.

``dnnplan execute`` starts one of these per rank under ``mpiexec``; inside an existing MPI job
the CLI calls :func:`run_job` on the job's ranks directly. Every rank reads the plan, limits its
BLAS/OpenMP threads, waits at a barrier (the common start of the trace), runs the plan
(:func:`executor.runtime.run.run_plan`) and sends its timers to rank 0, which writes the result.

Faults: an exception on any rank prints ``rank R: <message>`` on stderr and aborts the whole job
(``MPI_Abort`` with 2 for a mistake the user can fix, :class:`DnnplanError`; 1 otherwise), so no
rank waits forever for a dead peer. A watchdog aborts a rank that outlives ``--timeout``. With
``--progress DIR`` every rank keeps its pid and the step, layer and phase it last started in
``DIR/rank-R`` (executor.runtime.timers.ProgressFile), so a rank killed from outside can be named with
where it was (executor.launch.mpiexec).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import sys
import threading
import time
import traceback
from dataclasses import dataclass

from threadpoolctl import threadpool_limits

from costmodel.step.collective_calls import CommCall
from costmodel.machine.loading import NODE_CORES_ENV
from executor.report.collect import gather
from executor.launch.abort import abort
from executor.launch.node import share_node_cores
from executor.backend.cuda import local_rank
from executor.backend.select import engine_pins, select_backend
from executor.runtime.run import run_plan
from executor.probes.step_kernels import in_step
from executor.runtime.timers import FINISH, SETUP, ProgressFile, Timers
from kernels.allocator import keep_freed_memory
from networks.errors import DnnplanError
from networks.writing import SYSTEM_FAILED, SystemFailure, reason, write_file
from planner.plan.plan_file import read_plan
from profiler.probes.launch import THREAD_VARS
from profiler.in_step.kernels import InRunTimer, merge_samples
from profiler.in_step.collectives import InRunComm
from lifecycle.jobs import watch_launcher
from profiler.tables.store import load_table

ABORT_USER = 2
ABORT_INTERNAL = 1
ABORT_TIMEOUT = 124


#: ``--graphs`` of the worker: run_plan's ``graphs``
GRAPH_FLAGS = {"auto": None, "on": True, "off": False}


@dataclass(frozen=True)
class JobResult:
    """What rank 0 knows after a run: every rank's timings, the loss and the check."""

    ranks: list  # list[RankTimes]
    loss: float
    check: object  # executor.check.gradients.CheckResult or None
    threads: int
    kernel_samples: dict | None = None  # call key -> the slowest rank's seconds per timed step (--fresh-profile;
    # collectives' keys too, costmodel.step.collective_calls)
    losses: tuple = ()  # every step's loss, warm-up first
    device: dict | None = None  # a GPU run: the GPU, its precision, whether collectives were staged (CudaBackend.describe)
    steps_mode: dict | None = None  # how the timed steps ran: {"mode": "eager" or "graphs", "reason": why eager}


def first_non_finite(losses) -> int | None:
    """Index of the first step whose loss is NaN or infinite, else None."""
    return next((i for i, v in enumerate(losses) if not math.isfinite(v)), None)


def set_threads(threads: int) -> None:
    """Limit BLAS and OpenMP pools of this process (environment for children, threadpoolctl now)."""
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    threadpool_limits(limits=threads)


def run_job(plan_path: str, comm, *, steps: int, warmup: int, check: bool, keep_spans: bool,
            threads: int, seed: int = 0, kernel_calls: list | None = None,
            progress: ProgressFile | None = None, array_backend: str = "numpy",
            profile: str | None = None, graphs: bool | None = None) -> JobResult | None:
    """Run the plan on ``comm``'s ranks; rank 0 gets the :class:`JobResult`, others None.
    ``kernel_calls``: time each once after every step, on every rank (profiler.in_step.kernels; the rounds
    after warm-up steps are dropped); collectives among them (costmodel.step.collective_calls.CommCall) by
    profiler.in_step.collectives. ``progress``: where this rank records each span it starts."""
    set_threads(threads)
    keep_freed_memory()  # as the profiler does when it times the kernels (kernels.allocator)
    rank = comm.Get_rank()
    plan, net = read_plan(plan_path)
    if plan.devices != comm.Get_size():
        raise DnnplanError(f"the plan is for {plan.devices} devices but the job has {comm.Get_size()} ranks",
                           file=plan_path, hint=f"run it with --ranks {plan.devices}")
    timers = Timers(keep_spans=keep_spans, progress=progress)
    timed = []  # what --fresh-profile times after every step: the kernels, then the collectives
    if kernel_calls:
        kernels = [c for c in kernel_calls if not isinstance(c, CommCall)]
        collectives = [c for c in kernel_calls if isinstance(c, CommCall)]
        todo = in_step(net, plan, kernels)  # each in every context the step makes it in
        # also runs the kernels the collectives follow
        kernel_timer = InRunTimer(todo.calls, todo.before, updates=todo.updates)
        if kernels:
            timed.append(kernel_timer)
        if collectives:
            timed.append(InRunComm(collectives, comm, kernel_timer))
    comm.Barrier()
    t0 = time.perf_counter()  # the common start: every rank leaves the barrier together

    def after_step(i: int) -> None:
        for timer in timed:
            timer.round(comm.Barrier, keep=i >= 0)

    hook = {"after_step": after_step} if timed else {}
    backend = _backend(plan, comm, array_backend, profile)
    result = run_plan(plan, net, comm, steps=steps, warmup=warmup, check=check, seed=seed, timers=timers,
                      backend=backend, graphs=graphs, **hook)
    if progress is not None:
        progress.mark(None, "", FINISH)
    ranks = gather(comm, timers, t0, result.peak_bytes)
    samples = None if not timed else comm.gather({k: v for t in timed for k, v in t.samples.items()}, root=0)
    if rank != 0:
        return None
    if samples is not None:
        samples = merge_samples(samples)
    return JobResult(ranks, float(result.loss), result.check, threads, samples,
                     tuple(float(v) for v in result.losses),
                     backend.describe() if hasattr(backend, "describe") else None, result.mode.as_json())


def _backend(plan, comm, array_backend: str, profile: str | None):
    """This rank's device (executor.backend.select): a GPU run pins the engines its table recorded."""
    if array_backend == "numpy":
        return select_backend(plan)
    pins = engine_pins(load_table(profile)) if profile else {}
    return select_backend(plan, array_backend, local_rank(comm), pins)


def abort_with(comm, err: BaseException) -> None:
    """Print this rank's one-line message and end the whole job (never returns)."""
    rank = comm.Get_rank()
    if isinstance(err, DnnplanError):
        msg, code = str(err), ABORT_USER
    elif isinstance(err, MemoryError):  # the plan's arrays need more than this computer has: the plan's to change
        what = f" ({err})" if str(err) else ""
        msg, code = (f"out of memory: the plan's arrays need more memory than this computer has{what} (plan a "
                     "smaller --batch, or run it on more --ranks)"), ABORT_USER
    elif isinstance(err, (SystemFailure, OSError)):  # a full disk, say: the launcher exits with EXIT_SYSTEM
        where = f"{err.filename}: " if isinstance(err, OSError) and err.filename else ""
        msg = SYSTEM_FAILED + (str(err) if isinstance(err, SystemFailure) else f"{where}{reason(err)}")
        code = ABORT_INTERNAL
    else:
        msg, code = f"internal error: {type(err).__name__}: {err}", ABORT_INTERNAL
        if os.environ.get("DNNPLAN_DEBUG"):
            traceback.print_exception(err, file=sys.stderr)
    sys.stderr.write(f"rank {rank}: {msg}\n")  # one write: two ranks' lines do not run together
    sys.stderr.flush()
    abort(comm, code)


def start_watchdog(comm, timeout_s: float) -> threading.Timer:
    """Abort the job if this rank is still running after ``timeout_s`` (a hung collective included)."""
    def fire():
        print(f"rank {comm.Get_rank()}: timed out after {timeout_s:g} s", file=sys.stderr, flush=True)
        abort(comm, ABORT_TIMEOUT)
    timer = threading.Timer(timeout_s, fire)
    timer.daemon = True
    timer.start()
    return timer


def write_result(path: str, result: object) -> None:
    """``result`` pickled to ``path``, all or nothing (networks.writing): the launcher never sees a
    partial result."""
    write_file(path, pickle.dumps(result))


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m executor.launch.worker", description=__doc__.splitlines()[0])
    ap.add_argument("plan")
    ap.add_argument("--result", required=True, help="where rank 0 writes the pickled JobResult")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--trace", action="store_true", help="keep every span for a trace")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=0.0, help="watchdog seconds (0: none)")
    ap.add_argument("--time-kernels", default=None, help="a pickled list of KernelCall to time once "
                    "after every step (profiler.in_step.kernels)")
    ap.add_argument("--backend", default="numpy", choices=("numpy", "cupy"), help="the ranks' arrays: numpy (host) "
                    "or cupy (one GPU per local rank)")
    ap.add_argument("--graphs", default="auto", choices=tuple(GRAPH_FLAGS),
                    help="replay the timed steps as a CUDA graph: on, off, or where the plan allows it (auto)")
    ap.add_argument("--profile", default=None, help="the profile table whose cuDNN engines a GPU run pins")
    ap.add_argument("--progress", default=None, help="a folder (it exists) where each rank keeps its pid and "
                    "the step, layer and phase it last started, in rank-R")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    watch_launcher()  # this rank ends itself should dnnplan die without a word (kill -9)
    set_threads(args.threads)
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py initialises MPI, only in a rank
    comm = MPI.COMM_WORLD
    if args.timeout > 0:
        start_watchdog(comm, args.timeout)
    try:
        progress = None
        if args.progress:
            progress = ProgressFile(args.progress, comm.Get_rank())
            progress.mark(None, "", SETUP)
        if not os.environ.get(NODE_CORES_ENV):  # set by dnnplan's launcher; else agree on it here
            share_node_cores(comm)
        calls = None
        if args.time_kernels:
            with open(args.time_kernels, "rb") as fh:
                calls = pickle.load(fh)
        result = run_job(args.plan, comm, steps=args.steps, warmup=args.warmup, check=args.check,
                         keep_spans=args.trace, threads=args.threads, seed=args.seed, kernel_calls=calls,
                         progress=progress, array_backend=args.backend, profile=args.profile,
                         graphs=GRAPH_FLAGS[args.graphs])
        if result is not None:
            write_result(args.result, result)
        comm.Barrier()  # nobody exits before rank 0 has written the result
    except BaseException as err:  # noqa: BLE001 - one rank's failure must end every rank
        abort_with(comm, err)
    return 0


if __name__ == "__main__":
    # run the module's importable copy so pickled results name executor.launch.worker, not __main__
    from executor.launch.worker import main as _main
    sys.exit(_main())
