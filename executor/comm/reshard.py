"""Reshards: a tensor moved from one layout to another over the ranks of a communicator.

Reshards move exactly the pieces :func:`costmodel.parallel.layout.transfers` lists (the cost model's
layout algebra, docs/architecture.md): this module only turns them into one ``Alltoallv`` (counts and displacements, each piece packed
contiguous in list order, which sender and receiver compute identically). The copies around it
(the local piece, packing, unpacking) are the ``reshard.copy``/``reshard.add`` kernels (kernels.reshard),
which the cost model prices (``costmodel.layer.edge.reshard_copy_s``). Forward, each rank's
needed block is assembled from its pieces; backward (halo accumulation), the pieces a producer
rank receives are summed into its owned block.

Arrays are the backend's (executor.backend.device): the buffers are allocated with the module of
the array resharded, and the ``Alltoallv`` is the communicator's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from costmodel.parallel.layout import Layout, Region, block, same_blocks, transfers
from executor.backend.device import Array, Communicator
from executor.comm.collectives import displacements
from kernels.reshard import add_block, copy_block
from kernels.xp import module_of


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


def reshard(comm: Communicator, local: Array, src: Layout, dst: Layout, backward: bool = False) -> Array:
    """Move ``local`` (this rank's block of ``src``) to this rank's block of ``dst``.

    Forward: returns the needed block. When every rank already holds its block, the same array
    comes back in either direction (callers never write into it in place). Backward: ``local`` is
    this rank's gradient of the consumer's needed block (``src``) and the result is the summed
    gradient of its owned producer block (``dst``); regions no consumer reads stay zero.
    Collective over ``comm`` whenever any rank has something to send.
    """
    rp = reshard_plan(src, dst, backward, comm.rank)
    if rp.identity:
        return local
    dtype, xp = local.dtype, module_of(local)
    put = add_block if backward else copy_block  # the kernels the cost model prices (one kernel set)
    out = (xp.zeros if backward else xp.empty)(rp.out_shape, dtype=dtype)
    for s_sl, d_sl in rp.local:
        put(out[d_sl], local[s_sl])
    if not rp.any_remote:
        return out
    sendbuf = xp.empty(rp.send_elems, dtype=dtype)
    pos = 0
    for _, sl, size in rp.sends:
        piece = local[sl]
        copy_block(sendbuf[pos:pos + size].reshape(piece.shape), piece)
        pos += size
    recvbuf = xp.empty(rp.recv_elems, dtype=dtype)
    comm.alltoallv(sendbuf, rp.send_counts, rp.send_displs, recvbuf, rp.recv_counts, rp.recv_displs)
    pos = 0
    for _, sl, shape, size in rp.recvs:  # sizes from the plan: np.prod of each shape here took 8-31 us a reshard
        put(out[sl], recvbuf[pos:pos + size].reshape(shape))
        pos += size
    return out
