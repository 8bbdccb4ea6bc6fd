"""Cost of one edge between two strategies (pure): the reshard from the producer's layout to the
consumer's, forward and backward (halo exchanges included), and the block copies around its
messages (docs/costmodel.md, "The layout algebra", "Per layer").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.comm.collectives import alltoallv_s
from costmodel.compute.model import ComputeModel
from costmodel.calls.layer_calls import dtype_for_itemsize
from costmodel.parallel.shard import input_layout, output_layout
from costmodel.parallel.layout import Layout, copy_run, reshard_peaks
from costmodel.machine.model import Machine
from costmodel.parallel.strategy import Strategy
from networks.ir import DTYPE_BYTES, Layer


@dataclass(frozen=True)
class EdgeEstimate:
    """A reshard on one edge, forward and backward (zero when the layouts match).

    ``fwd_s``/``bwd_s`` are the messages (Alltoallv on the link); the block copies around them
    (``fwd_copy``/``bwd_copy``: elements written, elements received, contiguous run) are priced by
    the compute model, :meth:`copy_s`, since they are kernels of this device (``reshard.copy``).
    """

    fwd_s: float
    bwd_s: float
    fwd_bytes: int  # the most any rank receives
    bwd_bytes: int
    halo: bool  # the layouts differ only by halos (a halo exchange)
    fwd_copy: tuple[int, int, int] = (0, 0, 1)
    bwd_copy: tuple[int, int, int] = (0, 0, 1)
    dtype: str = "float32"

    def copy_s(self, compute: ComputeModel | None) -> tuple[float, float]:
        """Seconds of the forward and backward block copies on ``compute``."""
        return (reshard_copy_s(compute, *self.fwd_copy, self.dtype, False),
                reshard_copy_s(compute, *self.bwd_copy, self.dtype, True))


def reshard_copy_s(compute: ComputeModel | None, written: int, recv: int, run: int, dtype: str,
                   backward: bool) -> float:
    """The executor's block copies in one reshard on its busiest rank (``executor.comm.reshard.reshard``):
    every element of the destination block written once (copied from the rank's own block or from
    the receive buffer; added, backward), and the packing of what it sends (taken as much as it
    receives, as the messages are). Zero when no rank receives anything (then the executor, at
    most, slices its own block; not counted). ``written`` and ``recv`` are maxima over ranks, so
    this is an upper bound when the busiest writer and receiver differ."""
    if compute is None or recv <= 0:
        return 0.0
    return compute.copy_s(written, run, dtype, backward) + compute.copy_s(recv, run, dtype, False)


def _strip_windows(layout: Layout) -> Layout:
    return Layout(layout.shape, layout.strategy,
                  tuple(None if a is None else a.__class__(a.dim, a.degree, a.extent if a.window is None
                                                           else layout.shape[i]) for i, a in enumerate(layout.axes)))


def _reshard_dims(src: Layout, dst: Layout) -> tuple[str, ...]:
    """The ranks one rank exchanges with in a reshard lie in the group of the dimensions either
    layout splits."""
    return tuple(sorted(set(src.split_dims()) | set(dst.split_dims())))


def reshard_exchange(src: Layout, dst: Layout, backward: bool, itemsize: int) -> tuple[int, int]:
    """``(bytes, group size)`` of a reshard's Alltoallv: the most bytes any rank receives, and the
    ranks of the group it exchanges in (``Machine.measured`` keys ``("alltoallv", bytes, group,
    "cold")``)."""
    return reshard_peaks(src, dst, backward)[0] * itemsize, _exchange_group(src, dst, _reshard_dims(src, dst))


def _exchange_group(src: Layout, dst: Layout, dims: tuple[str, ...]) -> int:
    """The larger of the two strategies' groups along ``dims`` (a replicated consumer of a
    sample-split producer gathers from the producer's group, its own being one rank)."""
    if not dims:
        return dst.strategy.p
    return max(src.strategy.group_size(dims), dst.strategy.group_size(dims))


def _reshard_time(src: Layout, dst: Layout, backward: bool, itemsize: int, machine: Machine) -> tuple[float, int]:
    recv, messages, _ = reshard_peaks(src, dst, backward)
    nbytes = recv * itemsize
    if nbytes == 0:
        return 0.0, 0
    dims = _reshard_dims(src, dst)
    link = _link(dst.strategy, dims, machine)
    if link is None:  # inside one node: the Alltoallv timed in the run (Machine.measured), else the
        got = machine.measured_s("alltoallv", nbytes, _exchange_group(src, dst, dims), True)
        if got is not None:
            return got, nbytes
        # fitted alltoall link of this message size, when measured, after a layer's kernels (cold)
        link = machine.link_for_collective("alltoall", nbytes, cold=True)
    # sends are spread over replicas as evenly as receives (assumed; the executor measures it)
    return alltoallv_s(nbytes, nbytes, messages, link), nbytes


@lru_cache(maxsize=None)
def _link(strategy: Strategy, dims: tuple[str, ...], machine: Machine):
    """The link of rank 0's group along ``dims`` (every rank when ``dims`` is empty), memoised;
    None inside one node, where a reshard (an Alltoallv) is costed by the message's size."""
    link = machine.link_for(strategy.group_array(0, dims) if dims else np.arange(strategy.p))
    return None if link is machine.intra else link


@lru_cache(maxsize=None)
def edge_estimate(producer: Layer, pstrat: Strategy, consumer: Layer, cstrat: Strategy, slot: int,
                  batch: int, machine: Machine) -> EdgeEstimate:
    return layout_edge(output_layout(producer, pstrat, batch), input_layout(consumer, cstrat, batch, slot),
                       DTYPE_BYTES.get(producer.dtype, 4), machine)


def layout_edge(src: Layout, dst: Layout, itemsize: int, machine: Machine) -> EdgeEstimate:
    """The reshard from ``src`` (owned blocks) to ``dst`` (needed blocks), its gradient summed back."""
    fwd_s, fwd_b = _reshard_time(src, dst, False, itemsize, machine)
    bwd_s, bwd_b = _reshard_time(dst, src, True, itemsize, machine)
    halo = bool(fwd_b) and reshard_peaks(src, _strip_windows(dst))[0] == 0
    run = copy_run(src, dst)
    (f_recv, _, f_written), (b_recv, _, b_written) = reshard_peaks(src, dst, False), reshard_peaks(dst, src, True)
    return EdgeEstimate(fwd_s, bwd_s, fwd_b, bwd_b, halo, (f_written, f_recv, run), (b_written, b_recv, run),
                        dtype_for_itemsize(itemsize))
