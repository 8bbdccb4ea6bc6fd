"""A plan's collectives timed in their step's context before the run, on its ranks (``mpiexec``).

The collectives' counterpart of the kernels' step context (profiler.in_step.before_run): the planning
process cannot time a collective alone, so ``dnnplan`` launches ``mpiexec -n P python -m
executor.probes.comm_context CALLS RESULT`` (profiler.probes.comm_context), whose ranks make each collective of
the plan's step as ``--fresh-profile`` makes it between a run's steps
(:class:`profiler.in_step.collectives.InRunComm`: a cold call right after the kernels the step runs just
before it, a barrier, the one call), a warm-up round and then ``--rounds`` samples of each, and
rank 0 writes per call the slowest rank's samples (a pickled dict, call key -> seconds). No
training step runs: the prediction still prices isolated collectives of the step's sizes, timed
before the run.

Without it a collective on `local` is priced by the machine's default link (1 us a message) or by
a communication profile's fits, timed in a loop (warm) or after a pass over the whole last-level
cache (cold); in lenet5's steps on two ranks (batch 64) a few-hundred-byte allreduce took 25-55 us
after the step's kernels, and an allgather of fc1's output about 100 us, against 1-5 us priced
(2026-11-26, the 2-core development VM).
"""

from __future__ import annotations

import argparse
import pickle
import sys

from executor.launch.worker import abort_with, set_threads, write_result
from kernels.allocator import keep_freed_memory
from profiler.in_step.kernels import InRunTimer, merge_samples
from profiler.in_step.collectives import InRunComm
from lifecycle.jobs import watch_launcher
from profiler.in_step.before_run import ROUNDS  # as many rounds as the kernels' step context


def time_calls(calls, comm, rounds: int = ROUNDS) -> dict[str, list[float]] | None:
    """Rank 0: per call key, the slowest rank's sample of each round (others: None)."""
    timer = InRunComm(calls, comm, InRunTimer(()))
    for i in range(rounds + 1):
        timer.round(comm.Barrier, keep=i > 0)
    samples = comm.gather(timer.samples, root=0)
    return merge_samples(samples) if comm.Get_rank() == 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executor.probes.comm_context", description=__doc__.splitlines()[0])
    ap.add_argument("calls", help="a pickled list of costmodel.step.collective_calls.CommCall")
    ap.add_argument("result", help="where rank 0 writes the pickled samples")
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    watch_launcher()  # ends itself should dnnplan die without a word
    set_threads(args.threads)
    keep_freed_memory()
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
    comm = MPI.COMM_WORLD
    try:
        with open(args.calls, "rb") as fh:
            calls = pickle.load(fh)
        samples = time_calls(calls, comm, max(args.rounds, 1))
        if samples is not None:
            write_result(args.result, samples)
        comm.Barrier()
    except BaseException as err:  # noqa: BLE001 - one rank's failure must end every rank
        abort_with(comm, err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
