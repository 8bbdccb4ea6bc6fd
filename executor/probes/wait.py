"""Ranks waiting for each other (``wait``), measured on the executor's probe network.

Every collective the executor runs is preceded by a barrier (executor.comm.collectives.wait_for): the ranks
leave it together, so the step advances at each one by the slowest rank's time since the last.
On a computer the ranks share, their speeds differ from moment to moment (the operating system,
the other rank's memory traffic, a virtual machine's host), so every rank spends part of its step
waiting, and the step is longer than any rank's own work by that much. No kernel timing contains
it: a kernel is timed on one process. On the 2-core development VM it was 3.6% to 6.5% of the
measured step of lenet5, and ResNet-18 at 64x64, each on two ranks (docs/executor.md, "Waiting
for other ranks").

:func:`measure` runs the dispatch probe (``executor/probes/dispatch.yaml``, a small residual CNN
that is not one of the networks the accuracy bench predicts) data parallel on the ranks of
``comm``, its batch-norm statistics and gradients summed over them (a barrier before each), and
returns per timed step the seconds waited per second of work: the ranks' mean time in ``wait``
spans over their mean step time outside them. The profiler runs it under ``mpiexec -n P`` for a
table of P ranks (profiler.probes.rank_wait) and stores it as the table's ``wait/p<P>`` executor entry; a
prediction for P ranks then adds that fraction of the step's work as the time its ranks wait
(``StepPrediction.wait_s``; executor.session.execute.predict). The same job then measures the executor's
code around one collective (executor.probes.collective_code), printed as ``collective_code``.

    mpiexec -n P python -m executor.probes.wait [--batch 8] [--steps 21] [--warmup 2] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys

from executor.probes import collective_code
from executor.probes.dispatch import PROBE, probe_plan
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers
from executor.launch.worker import set_threads
from kernels.allocator import keep_freed_memory
from networks.loader import load_network
from lifecycle.jobs import watch_launcher

#: Samples a rank: the probe's kernels move about a megabyte per pass, as the dispatch probe's smaller batch.
PER_RANK_BATCH = 8


def wait_and_work(timers: Timers, steps) -> list[tuple[float, float]]:
    """Per step, (seconds in ``wait`` spans, the step's other seconds) on this rank."""
    waited: dict[int, float] = {}
    for (step, _layer, phase), seconds in timers.totals.items():
        if phase == "wait":
            waited[step] = waited.get(step, 0.0) + seconds
    return [(waited.get(s, 0.0), timers.step_wall[s] - waited.get(s, 0.0)) for s in steps]


def wait_fractions(per_rank: list[list[tuple[float, float]]]) -> list[float]:
    """Per step, the ranks' mean wait over their mean work (``per_rank[r][step] = (wait, work)``)."""
    out = []
    for step in zip(*per_rank):
        wait = sum(w for w, _ in step) / len(step)
        work = sum(b for _, b in step) / len(step)
        out.append(wait / work if work > 0 else 0.0)
    return out


def measure(comm, steps: int = 21, warmup: int = 2, per_rank: int = PER_RANK_BATCH) -> list[float]:
    """Seconds waited per second of work, one per timed step (every rank returns them)."""
    ranks = comm.Get_size()
    net = load_network(str(PROBE))
    plan = probe_plan(net, per_rank * ranks, ranks)
    timers = Timers()
    run_plan(plan, net, comm, steps=steps, warmup=warmup, timers=timers, measure_memory=False)
    return wait_fractions(comm.allgather(wait_and_work(timers, range(steps))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executor.probes.wait", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=21)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=PER_RANK_BATCH, help="samples a rank")
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or args.batch < 1:
        ap.error("--steps, --threads and --batch must be positive, --warmup not negative")
    watch_launcher()  # ends itself should dnnplan die without a word
    set_threads(args.threads)
    keep_freed_memory()
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
    comm = MPI.COMM_WORLD
    samples = measure(comm, args.steps, args.warmup, args.batch)
    code = collective_code.measure(comm)
    if comm.Get_rank() == 0:
        print(json.dumps({"ranks": comm.Get_size(), "batch_per_rank": args.batch, "wait_per_work": samples,
                          "collective_code": code}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
