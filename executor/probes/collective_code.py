"""The executor's own code around each collective of a step (``collective``), measured on P ranks.

Every collective the runtime makes runs inside Python of its own (executor.runtime.stage, executor.ops):
``wait_for``'s barrier in a ``wait`` span, a second span for the collective, each span's start
written to the progress file, and, for a reshard, its plan looked up, its buffers allocated and its
counts handed to MPI. None of it is inside a kernel's or an isolated collective's timing, and the
time after a layer pass (executor.probes.dispatch, measured on one rank) has no collective in it. After
a kernel that moved megabytes that code comes from memory: on the 2-core development VM one
allreduce's code took 5 us after no pass and 13-14 us after a 16 MiB one, beyond the one span a
pass opens anyway (2026-11-26).

:func:`measure` times it on the ranks of ``comm``, for an allreduce and for a reshard (a gather
of a data-parallel linear's output to a filter-split one's whole input, as between lenet5's
fully connected layers), after passes over buffers of :data:`PASS_BYTES` (untimed, then a
barrier): per sample, the seconds from before ``wait_for`` to after the collective's span, less
the seconds inside the MPI calls (the barrier, the collective: their own time is the wait and
the collective's price), less the same for one empty span after the same pass. Each kind's
median per pass size is a ``collective/p<P>/<kind>/b<bytes>`` executor entry of a P-rank table
(profiler.probes.rank_wait); a prediction adds, for each barrier its plan makes, the entry of its kind at
the bytes of the pass before it (costmodel.step.barriers, executor.session.execute.predict).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from costmodel.parallel.shard import input_layout, output_layout
from costmodel.parallel.layout import block
from costmodel.frameworks.uniform import uniform_strategies
from executor.backend.host import HOST
from executor.comm.collectives import allreduce_, wait_for
from executor.comm.reshard import reshard
from executor.probes.dispatch import PROBE
from executor.runtime.timers import ProgressFile, Timers
from networks.loader import load_network
from lifecycle.scratch import scratch_folder

#: The passes before a sample: none, about L2's size, and two beyond it (the bytes a zoo layer moves).
PASS_BYTES = (0, 1 << 20, 4 << 20, 16 << 20)
KINDS = ("allreduce", "reshard")


class _Timed:
    """``comm`` (mpi4py) whose MPI calls add their seconds to :attr:`inside` (the host backend's
    communicator makes its calls through it, executor.backend.host)."""

    def __init__(self, comm):
        self.comm = comm
        self.inside = 0.0

    def _call(self, fn, *args, **kwargs):
        t0 = time.perf_counter()
        fn(*args, **kwargs)
        self.inside += time.perf_counter() - t0

    def Barrier(self):  # noqa: N802 - mpi4py's names
        self._call(self.comm.Barrier)

    def Allreduce(self, *args, **kwargs):  # noqa: N802
        self._call(self.comm.Allreduce, *args, **kwargs)

    def Alltoallv(self, *args, **kwargs):  # noqa: N802
        self._call(self.comm.Alltoallv, *args, **kwargs)

    def Get_rank(self):  # noqa: N802
        return self.comm.Get_rank()

    def Get_size(self):  # noqa: N802
        return self.comm.Get_size()


def _units(comm, timers: Timers):
    """Each kind's collective as the runtime makes it (``comm``: the host backend's communicator),
    and the one empty span it is weighed against."""
    ranks = comm.size
    net = load_network(str(PROBE))
    by_name = {layer.name: layer for layer in net.layers}
    data, _ = uniform_strategies(net, ranks, ranks, "data")
    split, _ = uniform_strategies(net, ranks, ranks, "filter")
    src = output_layout(by_name["r4"], data["r4"], ranks)
    dst = input_layout(by_name["fc"], split["fc"], ranks, 0)
    local = np.ones(tuple(hi - lo for lo, hi in block(src, comm.rank)), np.float32)
    small = np.ones(64, np.float32)

    def allreduce_unit():
        wait_for(comm, timers, "probe")
        with timers.span("probe", "fwd_comm"):
            allreduce_(comm, small)

    def reshard_unit():
        wait_for(comm, timers, "probe")
        with timers.span("probe", "fwd_comm"):
            reshard(comm, local, src, dst)

    def empty():
        with timers.span("probe", "fwd_compute"):
            pass

    return {"allreduce": allreduce_unit, "reshard": reshard_unit, "": empty}


def measure(comm, samples: int = 41, warmup: int = 5) -> list[tuple[str, int, float]]:
    """(kind, pass bytes, median seconds of the executor's code around one collective) for each
    kind and pass size, over ``samples`` samples each after ``warmup`` (every rank returns them:
    the slowest rank's median)."""
    with scratch_folder("collective") as folder:
        progress = ProgressFile(folder, comm.Get_rank())  # as `dnnplan execute`'s ranks record spans
        try:
            return _measure(comm, Timers(progress=progress), samples, warmup)
        finally:
            progress.close()


def _measure(comm, timers: Timers, samples: int, warmup: int) -> list[tuple[str, int, float]]:
    timed = _Timed(comm)
    timers.begin_step(0)
    units = _units(HOST.communicator(timed), timers)
    out = []
    for nbytes in PASS_BYTES:
        buf = np.ones(max(nbytes // 4, 1), np.float32)
        got = {kind: [] for kind in units}
        for i in range(warmup + samples):
            for kind, unit in units.items():  # interleaved: a drift falls on every kind alike
                if nbytes:
                    buf += 1.0
                comm.Barrier()
                timed.inside = 0.0
                t0 = time.perf_counter()
                unit()
                if i >= warmup:
                    got[kind].append(time.perf_counter() - t0 - timed.inside)
        base = statistics.median(got[""])
        for kind in KINDS:
            mine = max(statistics.median(got[kind]) - base, 0.0)
            out.append((kind, nbytes, max(comm.allgather(mine))))
    return out
