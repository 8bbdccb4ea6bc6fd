"""Communication for the executor: cached group communicators, in-place allreduce, and reshards.

Reshards move exactly the pieces :func:`costmodel.layout.transfers` lists (the cost model's
layout algebra, docs/architecture.md): this module only turns them into one ``Alltoallv`` (counts and displacements, each piece packed
contiguous in list order, which sender and receiver compute identically). The copies around it
(the local piece, packing, unpacking) are the ``reshard.copy``/``reshard.add`` kernels (kernels.reshard),
which the cost model prices (``costmodel.layer_cost.reshard_copy_s``). Forward, each rank's
needed block is assembled from its pieces; backward (halo accumulation), the pieces a producer
rank receives are summed into its owned block.

Arrays are numpy (host) arrays; a cupy backend would stage through the host (not done yet).
mpi4py is imported on first use (:func:`mpi`): importing ``mpi4py.MPI`` initialises MPI, which a
process that only plans or launches the ranks must not do.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.layout import Layout, Region, block, same_blocks, transfers
from costmodel.strategy import Strategy
from kernels.reshard import add_block, copy_block



def mpi():
    """mpi4py's ``MPI`` module."""
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
    return MPI


@lru_cache(maxsize=None)
def mpi_type(dtype):
    """The MPI datatype of a float32 or float64 numpy dtype (looked up once per dtype: every
    collective of a step asks)."""
    MPI = mpi()
    return {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE}[np.dtype(dtype)]


@lru_cache(maxsize=None)
def mpi_op(op: str):
    """MPI's reduction of ``op`` ("sum" or "max")."""
    MPI = mpi()
    return {"sum": MPI.SUM, "max": MPI.MAX}[op]


class GroupComms:
    """Sub-communicators of ``comm``, one per distinct partition of the ranks into groups.

    ``get(strategy, dims)`` returns the communicator of the ranks that differ from this rank only
    along ``dims`` (``Strategy.group``), or None when that group is this rank alone. Creating one
    is collective over ``comm``: every rank must call ``get`` with the same arguments in the same
    order (the runtime does so once, at setup, layer by layer). Partitions are cached, so two
    layers with equal groups share a communicator.
    """

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self._cache: dict[tuple, object] = {}

    def get(self, strategy: Strategy, dims) -> object | None:
        dims = tuple(d for d in dims if strategy.degree(d) > 1)
        if not dims:
            return None
        partition = tuple(sorted({strategy.group(r, dims) for r in range(strategy.p)}))
        if partition not in self._cache:
            mine = strategy.group(self.rank, dims)
            self._cache[partition] = self.comm.Split(partition.index(mine), self.rank)
        return self._cache[partition]

    def free(self) -> None:
        for sub in self._cache.values():
            sub.Free()
        self._cache.clear()


#: Seconds a failing rank waits after writing its message and before MPI_Abort: the launcher's
#: proxy forwards rank output through pipes and can be torn down by the abort before it has read
#: them (seen with MPICH's Hydra: the message of a failing rank lost in about 1 run in 50).
ABORT_GRACE_S = 0.3


def abort(comm, code: int) -> None:
    """Abort the whole job after giving the launcher time to forward this rank's output."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)


def wait_for(sub, timers=None, layer: str = "") -> None:
    """Barrier on ``sub`` (None: nothing), timed as ``wait`` so that waiting for a slower rank is
    not charged to the collective that follows."""
    if sub is None:
        return
    if timers is None:
        sub.Barrier()
        return
    with timers.span(layer, "wait"):
        sub.Barrier()


def allreduce_(sub, arr: np.ndarray, op: str = "sum") -> np.ndarray:
    """Sum (``op="max"``: take the maximum of) ``arr`` in place over the communicator ``sub``
    (None: nothing to do). Returns ``arr``."""
    if sub is None:
        return arr
    if not arr.flags.c_contiguous:
        raise ValueError("allreduce_ needs a contiguous array")
    sub.Allreduce(mpi().IN_PLACE, [arr, mpi_type(arr.dtype)], op=mpi_op(op))
    return arr


def _rel(region: Region, base: Region) -> tuple[slice, ...]:
    return tuple(slice(lo - b0, hi - b0) for (lo, hi), (b0, _) in zip(region, base))


def _shape(region: Region) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in region)


@dataclass(frozen=True)
class ReshardPlan:
    """One rank's part of a reshard: what it copies locally, sends and receives (in piece order)."""

    out_shape: tuple[int, ...]
    local: tuple[tuple[tuple[slice, ...], tuple[slice, ...]], ...]  # (from my src block, into my dst block)
    sends: tuple[tuple[int, tuple[slice, ...], int], ...]  # (dst rank, slice of my src block, size)
    recvs: tuple[tuple[int, tuple[slice, ...], tuple[int, ...], int], ...]  # (src rank, slice of my dst block, shape, size)
    send_counts: tuple[int, ...]
    recv_counts: tuple[int, ...]
    send_displs: tuple[int, ...]
    recv_displs: tuple[int, ...]
    any_remote: bool  # any rank sends anything (all ranks agree: the piece list is global)
    identity: bool  # every rank already holds exactly its block (either direction)

    @property
    def send_elems(self) -> int:
        return sum(self.send_counts)

    @property
    def recv_elems(self) -> int:
        return sum(self.recv_counts)


@lru_cache(maxsize=4096)
def reshard_plan(src: Layout, dst: Layout, backward: bool, rank: int) -> ReshardPlan:
    """Turn the layout algebra's pieces into this rank's copies, sends and receives."""
    pieces = transfers(src, dst, backward)
    mine_src, mine_dst = block(src, rank), block(dst, rank)
    local, sends, recvs = [], [], []
    send_counts, recv_counts = [0] * src.p, [0] * src.p
    any_remote = False
    for pc in pieces:
        if pc.size == 0:
            continue
        if pc.src != pc.dst:
            any_remote = True
        if pc.src == rank and pc.dst == rank:
            local.append((_rel(pc.region, mine_src), _rel(pc.region, mine_dst)))
        elif pc.src == rank:
            sends.append((pc.dst, _rel(pc.region, mine_src), pc.size))
            send_counts[pc.dst] += pc.size
        elif pc.dst == rank:
            recvs.append((pc.src, _rel(pc.region, mine_dst), _shape(pc.region), pc.size))
            recv_counts[pc.src] += pc.size
    sends.sort(key=lambda s: s[0])  # stable: piece order kept within one destination
    recvs.sort(key=lambda r: r[0])
    identity = same_blocks(src, dst)  # each rank holds exactly its block: nothing moves, no sum
    return ReshardPlan(_shape(mine_dst), tuple(local), tuple(sends), tuple(recvs), tuple(send_counts),
                       tuple(recv_counts), tuple(displacements(send_counts)), tuple(displacements(recv_counts)),
                       any_remote, identity)


def displacements(counts) -> list[int]:
    """Each part's offset in a buffer of consecutive parts of ``counts`` elements (MPI's displs)."""
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def reshard(comm, local: np.ndarray, src: Layout, dst: Layout, backward: bool = False) -> np.ndarray:
    """Move ``local`` (this rank's block of ``src``) to this rank's block of ``dst``.

    Forward: returns the needed block. When every rank already holds its block, the same array
    comes back in either direction (callers never write into it in place). Backward: ``local`` is
    this rank's gradient of the consumer's needed block (``src``) and the result is the summed
    gradient of its owned producer block (``dst``); regions no consumer reads stay zero.
    Collective over ``comm`` whenever any rank has something to send.
    """
    rp = reshard_plan(src, dst, backward, comm.Get_rank())
    if rp.identity:
        return local
    dtype = local.dtype
    put = add_block if backward else copy_block  # the kernels the cost model prices (one kernel set)
    out = (np.zeros if backward else np.empty)(rp.out_shape, dtype=dtype)
    for s_sl, d_sl in rp.local:
        put(out[d_sl], local[s_sl])
    if not rp.any_remote:
        return out
    sendbuf = np.empty(rp.send_elems, dtype=dtype)
    pos = 0
    for _, sl, size in rp.sends:
        piece = local[sl]
        copy_block(sendbuf[pos:pos + size].reshape(piece.shape), piece)
        pos += size
    recvbuf = np.empty(rp.recv_elems, dtype=dtype)
    mtype = mpi_type(dtype)
    comm.Alltoallv([sendbuf, (rp.send_counts, rp.send_displs), mtype],
                   [recvbuf, (rp.recv_counts, rp.recv_displs), mtype])
    pos = 0
    for _, sl, shape, size in rp.recvs:  # sizes from the plan: np.prod of each shape here took 8-31 us a reshard
        put(out[sl], recvbuf[pos:pos + size].reshape(shape))
        pos += size
    return out
