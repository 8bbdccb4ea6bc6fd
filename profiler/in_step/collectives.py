"""Timing the prediction's collectives inside a run, between its timed steps (``--fresh-profile``).

The collectives' counterpart of :mod:`profiler.in_step.kernels`: with ``--fresh-profile`` every rank, after
each step and outside its clock, makes each collective the prediction prices
(:func:`costmodel.step.collective_calls.step_collectives`) ONCE, as :mod:`profiler.comm.bench` times one:
float32 buffers of the call's bytes, the pass of the call's cache state before it
(:func:`profiler.comm.bench.cache_pass`: the last-level cache for ``cold``, 4 MiB for ``warm``),
or, for a cold call, the kernels the step runs just before it (:meth:`InRunComm.round`), a
barrier, then the one call. A group smaller than the job is a block of consecutive ranks, all
blocks at once, as the step runs its groups side by side. A reshard's ``alltoallv`` sends the
call's bytes spread evenly over the other ranks of the group, nothing to itself, as
``executor.comm.reshard.reshard`` does when its pieces are balanced; an expert split's ``alltoall``
sends 1/g of the call's bytes to every rank of the group, itself included, as
``executor.comm.collectives.alltoall_`` does.

The prediction then prices each collective with the median over steps of the slowest rank's
sample (``Machine.measured``): an isolated collective of the step's size, never the step's own
communication spans; only the moments it is timed at are the run's.
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import numpy as np

from costmodel.step.collective_calls import CommCall
from profiler.comm.bench import cache_pass
from profiler.in_step.kernels import InRunTimer

ITEM = 4


class InRunComm:
    """Times ``calls`` once per :meth:`round` on ``comm`` (every rank calls it with the same calls)."""

    def __init__(self, calls: Iterable[CommCall], comm, kernels: InRunTimer | None = None):
        self.comm = comm
        self._kernels = kernels if kernels is not None else InRunTimer(())
        p, rank = comm.Get_size(), comm.Get_rank()
        self.calls = tuple(dict.fromkeys(calls))
        self._subs = {}
        for g in sorted({c.group for c in self.calls}):
            if 1 < g <= p and p % g == 0:
                self._subs[g] = comm if g == p else comm.Split(rank // g, rank)
        self.calls = tuple(c for c in self.calls if c.group in self._subs)
        self.samples: dict[str, list[float]] = {c.key: [] for c in self.calls}
        self._ops: dict[str, Callable[[], object]] = {}

    def _op(self, call: CommCall) -> Callable[[], object]:
        got = self._ops.get(call.key)
        if got is None:
            got = self._ops[call.key] = collective_op(self._subs[call.group], call)
            got()  # first use: the library sets up its buffers for this size and group
        return got

    def round(self, barrier: Callable[[], None] = lambda: None, keep: bool = True) -> None:
        """One sample of every call; ``keep=False``: a warm-up round, its samples dropped.

        A cold call with known kernels before it (:attr:`CommCall.after`) is timed right after
        those kernels run (untimed, on the kernel timer's operands, their outputs alive), as
        profiler.in_step.kernels times a kernel after the calls before it; any other call after its
        state's cache pass. The kernels, not the pass, because a pass over the whole last-level
        cache (which sysfs can give as hundreds of MiB) leaves the caches colder than a layer's
        kernels do, and prices a small collective after a small layer (a batch normalisation's
        statistics allreduce) well above its time in the step (docs/executor.md)."""
        for call in self.calls:
            op = self._op(call)
            replay = call.after if call.state == "cold" else ()
            if not replay:
                cache_pass(call.state)
            outputs = [self._kernels.run(k) for k in replay]
            barrier()
            t0 = time.perf_counter()
            op()
            t = time.perf_counter() - t0
            del outputs
            if keep:
                self.samples[call.key].append(t)


def collective_op(sub, call: CommCall) -> Callable[[], object]:
    """``call`` on the communicator ``sub`` (its group), on buffers made here."""
    from mpi4py import MPI  # noqa: PLC0415 - importing mpi4py.MPI initialises MPI: only in a run
    g, rank = sub.Get_size(), sub.Get_rank()
    n = max(g, call.nbytes // ITEM)
    rng = np.random.default_rng(rank)
    buf = rng.standard_normal(n).astype(np.float32)
    if call.collective == "allreduce":  # in place, as the executor sums
        return lambda: sub.Allreduce(MPI.IN_PLACE, [buf, MPI.FLOAT], op=MPI.SUM)
    if call.collective == "allgather":  # bytes: the gathered total
        part = buf[: n // g].copy()
        out = np.empty(n // g * g, dtype=np.float32)
        return lambda: sub.Allgather([part, MPI.FLOAT], [out, MPI.FLOAT])
    if call.collective == "reduce_scatter":  # bytes: a rank's whole input
        full = buf[: n // g * g]
        part = np.empty(n // g, dtype=np.float32)
        return lambda: sub.Reduce_scatter_block([full, MPI.FLOAT], [part, MPI.FLOAT], op=MPI.SUM)
    if call.collective == "broadcast":
        return lambda: sub.Bcast([buf, MPI.FLOAT], root=0)
    if call.collective == "alltoallv":  # bytes: what a rank receives, from the others
        each = max(1, n // (g - 1))
        counts = [0 if r == rank else each for r in range(g)]
        displs = [sum(counts[:r]) for r in range(g)]
        send = rng.standard_normal(each * (g - 1)).astype(np.float32)
        recv = np.empty_like(send)
        return lambda: sub.Alltoallv([send, (counts, displs), MPI.FLOAT], [recv, (counts, displs), MPI.FLOAT])
    if call.collective == "alltoall":  # bytes: a rank's whole send buffer, 1/g to every rank, itself too,
        part = n // g  # as executor.comm.collectives.alltoall_ sends an expert split's rows
        send = buf[: part * g]
        recv = np.empty_like(send)
        counts, displs = [part] * g, [r * part for r in range(g)]
        return lambda: sub.Alltoallv([send, (counts, displs), MPI.FLOAT], [recv, (counts, displs), MPI.FLOAT])
    raise ValueError(f"no in-run timing for collective {call.collective!r}")
