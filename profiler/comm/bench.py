"""Communication micro-benchmarks, run under ``mpiexec -n P python -m profiler.comm.bench``.

Each rank times sendrecv (ranks paired 0-1, 2-3, ...) and each collective (allreduce, allgather,
reduce_scatter, broadcast, alltoall) on float32 buffers of each size, as a training step makes
them: samples of ONE operation after a pass over a buffer and a barrier; a sample's time is the
slowest rank's, and the median over samples is kept (:func:`_bench`). Every (collective, size) is
measured in ``--rounds`` rounds spread over the whole run (all sizes, then all sizes again),
keeping the fastest round's median: a slow spell of a shared machine lasts seconds, and the
rounds spread it over the sizes instead of one size taking it all. Sizes mean what :mod:`costmodel.comm.collectives` means
(allgather: the gathered total; reduce_scatter and alltoall: a rank's whole input).

Two cache states (:data:`STATES`), each a full set of measurements:

- ``warm``: after a 4 MiB pass (larger than a core's L2 cache), as a collective that follows
  another one finds the caches (a step's weight-gradient allreduces run back to back);
- ``cold``: after a pass over the last-level cache, as a collective that follows a layer's kernels
  finds them (reshards, halo exchanges, partial sums, statistics).

The two differ by a factor of two or more for the same call (figures: docs/profiler.md,
"Communication").

With ``--device cupy`` the buffers are GPU arrays and every collective is staged through the host
(copied out, made by MPI, copied back): the path of ranks that share one GPU, so its fits price
that staging from the link measured end to end (copies included).

Rank 0 writes ``{"ranks", "measurements": {state: [[collective, nbytes, seconds], ...]}}`` as
JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kernels.cuda import libs
from networks.writing import write_file
from profiler.timing.harness import DISTURB_ELEMS, last_level_cache_bytes  # the kernels' cache passes
from lifecycle.jobs import watch_launcher

ITEM = 4
#: How the collectives are timed, recorded with their fits (``comm["bench"]``): 1, after a 4 MiB
#: pass only; 2, also after a pass over the last-level cache (``cold``).
BENCH_REVISION = 2
STATES = ("warm", "cold")
_PASS: dict[str, np.ndarray] = {}


def pass_elems(state: str) -> int:
    """float32 elements of the pass before each sample in ``state``."""
    return DISTURB_ELEMS if state == "warm" else max(DISTURB_ELEMS, last_level_cache_bytes() // ITEM)


def cache_pass(state: str = "warm") -> None:
    """Stream the state's buffer through the caches (made on first use)."""
    buf = _PASS.get(state)
    if buf is None:
        buf = _PASS[state] = np.ones(pass_elems(state), dtype=np.float32)
    np.maximum(buf, 0.5, out=buf)


def _bench(comm, op, min_samples: int = 5, cap_s: float = 0.3, state: str = "warm") -> float:
    """The median of single ``op()`` calls, each after the state's cache pass and a barrier; a
    sample is the slowest rank's. One call at a time, as a training step makes them between its
    layers' work: after the pass the library's code and buffers are no longer in the L2 cache
    (``warm``) or in any cache (``cold``), as after a layer's kernels. Loops of back-to-back calls
    would keep everything hot and price small collectives several times below what they take
    between the layers of a step."""
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py.MPI initialises MPI: only under mpiexec
    op()
    op()
    samples = []
    start = time.perf_counter()
    while True:
        cache_pass(state)
        comm.Barrier()
        t0 = MPI.Wtime()
        op()
        samples.append(comm.allreduce(MPI.Wtime() - t0, op=MPI.MAX))
        done = len(samples) >= min_samples and (time.perf_counter() - start > cap_s or len(samples) >= 30)
        if comm.bcast(done, root=0):  # rank 0 decides for everyone, so no rank waits alone
            break
    return float(np.median(samples))


def run(sizes: list[int], collectives: list[str], cap_s: float,
        rounds: int = 1, xp=None) -> dict[str, list[tuple[str, int, float]]]:
    """Per state (:data:`STATES`), ``(collective, bytes, seconds)`` of each measured point
    (``xp``: cupy, to time collectives of GPU buffers staged through the host)."""
    best: dict[tuple[str, str, int], float] = {}
    for _ in range(max(1, rounds)):
        for key, t in _round(sizes, collectives, cap_s / max(1, rounds), xp):
            best[key] = min(t, best.get(key, t))
    return {st: [(c, nb, t) for (s, c, nb), t in best.items() if s == st] for st in STATES}


def staged(op, device_bufs: list, host_bufs: list, xp):
    """``op`` on host buffers between copies from and back to the GPU, as ranks that share one GPU
    make every collective (executor.backend.staging): what `profile-comm --backend cupy` times."""
    def run_staged():
        for d, h in zip(device_bufs, host_bufs):
            d.get(out=h)
        op()
        for d, h in zip(device_bufs, host_bufs):
            d.set(h)
        xp.cuda.get_current_stream().synchronize()
    return run_staged


def measured_bytes(nbytes: int, ranks: int) -> int:
    """The bytes a message of ``nbytes`` is measured at: whole float32 elements, a multiple of the
    ranks' count (each rank's part of a reduce-scatter or allgather is whole), at least one each."""
    return max(ranks, nbytes // ITEM // ranks * ranks) * ITEM


def _round(sizes: list[int], collectives: list[str], cap_s: float,
           xp=None) -> list[tuple[tuple[str, str, int], float]]:
    from mpi4py import MPI  # noqa: PLC0415 - initialises MPI: only under mpiexec
    comm = MPI.COMM_WORLD
    p, rank = comm.Get_size(), comm.Get_rank()
    out = []
    for nbytes in sizes:
        nb = measured_bytes(nbytes, p)
        n = nb // ITEM
        send = np.random.default_rng(rank).standard_normal(n).astype(np.float32)
        recv = np.empty_like(send)
        part = np.empty(n // p, dtype=np.float32)
        ops = {
            "sendrecv": lambda: comm.Sendrecv(send, dest=rank ^ 1, recvbuf=recv, source=rank ^ 1)
            if (rank ^ 1) < p else None,
            "allreduce": lambda: comm.Allreduce(send, recv, op=MPI.SUM),
            "allgather": lambda: comm.Allgather(send[: n // p], recv),
            "reduce_scatter": lambda: comm.Reduce_scatter_block(send, part, op=MPI.SUM),
            "broadcast": lambda: comm.Bcast(send, root=0),
            "alltoall": lambda: comm.Alltoall(send, recv),
        }
        if xp is not None:  # GPU buffers, each collective staged through these host ones
            bufs = [send, recv, part]
            dev = [xp.asarray(b) for b in bufs]
            ops = {c: staged(op, dev, bufs, xp) for c, op in ops.items()}
        for c in collectives:
            for st in STATES:  # side by side, so a slow spell hits both states alike
                out.append(((st, c, nb), _bench(comm, ops[c], cap_s=cap_s, state=st)))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", required=True, help="comma-separated byte counts")
    ap.add_argument("--collectives", default="sendrecv,allreduce,allgather,reduce_scatter,broadcast,alltoall")
    ap.add_argument("--cap", type=float, default=0.3, help="seconds per (collective, size, state), all rounds together")
    ap.add_argument("--rounds", type=int, default=3, help="passes over every size; the fastest is kept")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="numpy", choices=("numpy", "cupy"),
                    help="cupy: GPU buffers (device local rank mod GPUs), staged through the host")
    args = ap.parse_args(argv)
    watch_launcher()  # ends itself should dnnplan die without a word
    from mpi4py import MPI  # noqa: PLC0415 - initialises MPI: only under mpiexec
    xp = None
    if args.device == "cupy":
        xp = libs.cupy()
        xp.cuda.Device(MPI.COMM_WORLD.Get_rank() % xp.cuda.runtime.getDeviceCount()).use()
    res = run([int(s) for s in args.sizes.split(",")], args.collectives.split(","), args.cap, args.rounds, xp)
    if MPI.COMM_WORLD.Get_rank() == 0:
        write_file(args.out, json.dumps({"ranks": MPI.COMM_WORLD.Get_size(), "measurements": res}))


if __name__ == "__main__":
    main()
