"""The layout algebra: which block of a tensor each rank holds, and what a reshard moves.

Shared by the cost model (which counts what moves) and the executor (which moves it with
``Alltoallv``), so that prediction and reality move the same blocks (docs/costmodel.md, "The layout
algebra (shared with the executor)").

A :class:`Layout` says, for each axis of a batched tensor, which grid dimension of a strategy cuts
it (or none). Axis ``a`` cut by dimension ``d`` of degree ``k`` gives the rank with coordinate
``c`` the interval ``[c*n//k, (c+1)*n//k)`` (blocks differ by at most one when ``k`` does not
divide ``n``). A *needed* layout may carry a :class:`~networks.ops.base.Window` on an axis: the
interval then partitions the consumer's output extent and maps to the input rows it reads, so
neighbouring blocks overlap by the halo. A halo exchange is a reshard whose needed blocks overlap.

Forward, rank ``d`` receives ``|need_d| - |need_d ∩ own_d|`` elements, each from one replica of
the producer block that holds it. Backward, the gradient flows the other way and overlapping
contributions are summed: producer rank ``d`` receives, from every distinct consumer block ``B``
other than its own, ``|B ∩ own_d|`` elements. Both are products over axes, so they vectorise over
all ranks at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.parallel.axes import N
from costmodel.parallel.strategy import Strategy, composite, make_strategy
from networks.ops.base import Window

Region = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class AxisSplit:
    """One axis cut by grid dimension ``dim`` into ``degree`` parts of ``extent``; with ``share``
    > 1, into ``degree / share`` parts, each held by ``share`` neighbouring coordinates (a weight's
    whole groups replicated when the split exceeds them: ``DimSplit.weight_units``; weights only,
    never resharded)."""

    dim: str
    degree: int
    extent: int
    window: Window | None = None
    share: int = 1


@dataclass(frozen=True)
class Layout:
    shape: tuple[int, ...]
    strategy: Strategy
    axes: tuple[AxisSplit | None, ...]

    @property
    def p(self) -> int:
        return self.strategy.p

    def split_dims(self) -> tuple[str, ...]:
        """The grid dimensions that cut an axis (a composite ``"H*F"`` names both)."""
        return tuple(d for a in self.axes if a is not None for d in composite(a.dim))


def interval(extent: int, degree: int, c):
    """The part of ``[0, extent)`` coordinate ``c`` owns (works on arrays too)."""
    return (c * extent) // degree, ((c + 1) * extent) // degree


def axis_intervals(layout: Layout, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct intervals along one axis, indexed by coordinate: (lo[k], hi[k])."""
    split = layout.axes[axis]
    if split is None:
        return np.array([0]), np.array([layout.shape[axis]])
    c = np.arange(split.degree)
    lo, hi = interval(split.extent, split.degree // split.share, c // split.share)
    if split.window is not None:
        return _apply_window(split.window, lo, hi)
    return lo, hi


def _apply_window(win: Window, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = lo * win.stride - win.pad_lo
    b = (hi - 1) * win.stride - win.pad_lo + win.dilation * (win.kernel - 1) + 1
    empty = hi <= lo
    a = np.clip(a, 0, win.in_size)
    b = np.clip(b, 0, win.in_size)
    return np.where(empty, 0, a), np.where(empty, 0, np.maximum(a, b))


def rank_axis_coords(layout: Layout, axis: int) -> np.ndarray:
    """Coordinate of every rank along the grid dimension that cuts ``axis`` (zeros if none)."""
    split = layout.axes[axis]
    if split is None:
        return np.zeros(layout.p, dtype=np.int64)
    return layout.strategy.coords_all(split.dim)


def rank_intervals(layout: Layout, axis: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = axis_intervals(layout, axis)
    c = rank_axis_coords(layout, axis)
    return lo[c], hi[c]


def block(layout: Layout, rank: int) -> Region:
    """The region of the tensor rank ``rank`` holds (owned) or reads (needed)."""
    out = []
    for axis in range(len(layout.shape)):
        lo, hi = axis_intervals(layout, axis)
        c = 0 if layout.axes[axis] is None else layout.strategy.coord(rank, layout.axes[axis].dim)
        out.append((int(lo[c]), int(hi[c])))
    return tuple(out)


def region_size(region: Region) -> int:
    n = 1
    for lo, hi in region:
        n *= max(0, hi - lo)
    return n


def max_block_extents(layout: Layout) -> tuple[int, ...]:
    """The largest block extent along each axis (the straggler's local shape).

    Without a window the blocks ``[c*n//k, (c+1)*n//k)`` are ``floor`` or ``ceil(n/k)`` long, so the
    largest is ``ceil(n/k)`` (no arrays needed); windowed blocks are measured.
    """
    out = []
    for a, split in enumerate(layout.axes):
        if split is None:
            out.append(int(layout.shape[a]))
        elif split.window is None:
            out.append(-(-int(split.extent) // (int(split.degree) // split.share)))
        else:
            lo, hi = axis_intervals(layout, a)
            out.append(int(np.max(hi - lo)))
    return tuple(out)


def same_blocks(a: Layout, b: Layout) -> bool:
    """True when every rank holds the same region under both layouts (so nothing moves)."""
    if a.shape != b.shape or a.p != b.p:
        return False
    for axis in range(len(a.shape)):
        la, ha = rank_intervals(a, axis)
        lb, hb = rank_intervals(b, axis)
        if not (np.array_equal(la, lb) and np.array_equal(ha, hb)):
            return False
    return True


def _overlap(lo1, hi1, lo2, hi2):
    return np.maximum(0, np.minimum(hi1, hi2) - np.maximum(lo1, lo2))


def _interval_aggregates(slo, shi, dlo, dhi, dense_limit: int = 4096):
    """For each receiving interval [a, b): how many sending intervals overlap it, and the sum of
    the overlaps. Sending intervals are sorted (lo and hi non-decreasing, as every layout's are),
    so the overlapping ones are a contiguous run found by binary search and the sum comes from
    prefix sums: O((k + k') log k) instead of a k x k' matrix (used when the matrix is small)."""
    if len(slo) * len(dlo) <= dense_limit:
        ov = _overlap(slo[:, None], shi[:, None], dlo[None, :], dhi[None, :])
        return (ov > 0).sum(axis=0), ov.sum(axis=0)
    nonempty = shi > slo
    if not nonempty.all():  # drop empty intervals (more parts than elements) before searching
        slo, shi = slo[nonempty], shi[nonempty]
    start = np.searchsorted(shi, dlo, side="right")  # first with hi > a
    end = np.searchsorted(slo, dhi, side="left")  # one past the last with lo < b
    end = np.maximum(end, start)
    count = np.where(dhi > dlo, end - start, 0)
    hi_pre = np.concatenate(([0], np.cumsum(shi)))
    lo_pre = np.concatenate(([0], np.cumsum(slo)))
    # sum of min(hi_k, b): hi_k for hi_k <= b, else b
    j = np.clip(np.searchsorted(shi, dhi, side="right"), start, end)
    sum_min_hi = hi_pre[j] - hi_pre[start] + (end - j) * dhi
    # sum of max(lo_k, a): a for lo_k <= a, else lo_k
    i = np.clip(np.searchsorted(slo, dlo, side="right"), start, end)
    sum_max_lo = (i - start) * dlo + lo_pre[end] - lo_pre[i]
    covered = np.where(count > 0, sum_min_hi - sum_max_lo, 0)
    return count, covered


@dataclass(frozen=True)
class ReshardVolume:
    """Per-rank receive volume and message count of one reshard (elements, not bytes)."""

    recv_elems: np.ndarray  # per rank
    messages: np.ndarray  # per rank (remote senders)
    written_elems: np.ndarray | None = None  # per rank: elements written into its destination block

    @property
    def max_written(self) -> int:
        w = self.written_elems
        return int(w.max()) if w is not None and w.size else 0

    @property
    def max_recv(self) -> int:
        return int(self.recv_elems.max()) if self.recv_elems.size else 0

    @property
    def max_messages(self) -> int:
        return int(self.messages.max()) if self.messages.size else 0

    @property
    def total_recv(self) -> int:
        return int(self.recv_elems.sum())


# --- reduction over the batch dimension -----------------------------------------------------------

def reducible(layout: Layout) -> bool:
    n = layout.strategy.degree(N)
    if n == 1:
        return True
    ax = layout.axes[0] if layout.axes else None
    if ax is None or ax.dim != N or ax.degree != n or ax.window is not None:
        return False
    if ax.extent != layout.shape[0] or layout.shape[0] % n:
        return False
    return all(a is None or a.dim != N for a in layout.axes[1:])


def _shrink(layout: Layout, span: int, ranks: int) -> Layout:
    """The layout restricted to the first ``ranks`` ranks (``span`` = its ranks per N block)."""
    degrees = {d: k for d, k in layout.strategy.degrees if d != N}
    n_new = ranks // span
    if n_new > 1:
        degrees[N] = n_new
    strat = make_strategy(ranks, degrees)
    batch = layout.shape[0] * ranks // layout.p
    axes = list(layout.axes)
    axes[0] = AxisSplit(N, n_new, batch) if n_new > 1 else None
    return Layout((batch, *layout.shape[1:]), strat, tuple(axes))


def reduce_pair(src: Layout, dst: Layout) -> tuple[Layout, Layout]:
    """An equivalent pair over fewer ranks, or the pair itself.

    N is outermost in the grid, so rank ``r`` has N coordinate ``r // m`` with ``m = p / n``. When
    both layouts cut the batch axis by N with degrees that divide the batch and ``m_src``, ``m_dst``
    nest (one divides the other; always so for powers of two), shifting ``r`` by
    ``L = max(m_src, m_dst)`` shifts both batch blocks by the same ``B L / p`` samples and leaves
    every other coordinate unchanged. Every per-rank quantity of a reshard is invariant under that
    shift, so the first ``L`` ranks, as a reshard of a ``B L / p``-sample tensor over ``L`` ranks,
    say everything (the rest repeats them).
    """
    p = src.p
    if dst.p != p or src.shape != dst.shape or not src.shape:
        return src, dst
    if not (reducible(src) and reducible(dst)):
        return src, dst
    ms, md = p // src.strategy.degree(N), p // dst.strategy.degree(N)
    big, small = max(ms, md), min(ms, md)
    if big == p or big % small:
        return src, dst
    return _shrink(src, ms, big), _shrink(dst, md, big)


@lru_cache(maxsize=None)
def _axis_info(layout: Layout, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lo, hi = axis_intervals(layout, axis)
    return lo, hi, rank_axis_coords(layout, axis)


@lru_cache(maxsize=65536)
def reshard_volume(src: Layout, dst: Layout, backward: bool = False) -> ReshardVolume:
    """What a reshard moves, per rank, computed axis by axis (pure; memoised by its arguments).

    Forward (``backward=False``): ``src`` is the producer's owned layout, ``dst`` the consumer's
    needed layout. Backward: gradients go from the consumer's needed layout ``src`` back to the
    producer's owned layout ``dst``, overlapping pieces summed on arrival. Overlaps are computed
    between distinct intervals (a small matrix per axis), then gathered per rank by coordinates.
    Pairs that :func:`reduce_pair` shrinks are computed over the first ``L`` ranks and tiled.
    """
    rsrc, rdst = reduce_pair(src, dst)
    if rsrc is not src:
        small = reshard_volume(rsrc, rdst, backward)
        reps = src.p // rsrc.p
        return ReshardVolume(np.tile(small.recv_elems, reps), np.tile(small.messages, reps),
                             np.tile(small.written_elems, reps))
    return reshard_volume_unreduced(src, dst, backward)


@lru_cache(maxsize=65536)
def reshard_peaks(src: Layout, dst: Layout, backward: bool = False) -> tuple[int, int, int]:
    """``(max_recv, max_messages, max_written)`` of :func:`reshard_volume`, memoised without its
    per-rank arrays (a million ranks' arrays per pair would not fit in memory for long). Tiling
    the reduced pair changes no maximum, so the reduced pair is enough."""
    rsrc, rdst = reduce_pair(src, dst)
    vol = reshard_volume_unreduced(rsrc, rdst, backward)
    return vol.max_recv, vol.max_messages, vol.max_written


def reshard_volume_unreduced(src: Layout, dst: Layout, backward: bool = False) -> ReshardVolume:
    """:func:`reshard_volume` over all ``p`` ranks, without the batch reduction (the reference)."""
    p = src.p
    total = np.ones(p, dtype=np.int64)
    local = np.ones(p, dtype=np.int64)
    pieces = np.ones(p, dtype=np.int64)
    for axis in range(len(src.shape)):
        slo, shi, sc = _axis_info(src, axis)  # distinct sending intervals, each rank's coordinate
        dlo, dhi, dc = _axis_info(dst, axis)  # distinct receiving intervals, each rank's coordinate
        count, covered = _interval_aggregates(slo, shi, dlo, dhi)
        if backward:
            total *= covered[dc]  # every distinct consumer block contributes, overlaps summed
        else:
            total *= (dhi - dlo)[dc]  # each needed element arrives once
        pieces *= count[dc]
        local *= _overlap(slo[sc], shi[sc], dlo[dc], dhi[dc])
    has_local = (local > 0).astype(np.int64)
    return ReshardVolume(total - local, np.maximum(pieces - has_local, 0), total)


@lru_cache(maxsize=65536)
def copy_run(src: Layout, dst: Layout) -> int:
    """Elements per contiguous run of the pieces a reshard copies, from rank 0's blocks: trailing
    axes on which both blocks agree are whole in every piece; the first axis (from the end) on
    which they differ cuts the run at the smaller extent. Symmetric in ``src`` and ``dst``."""
    run = 1
    for s, d in zip(reversed(first_extents(src)), reversed(first_extents(dst))):
        run *= max(1, min(s, d))
        if s != d:
            break
    return run


@lru_cache(maxsize=65536)
def first_extents(layout: Layout) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in block(layout, 0))


@dataclass(frozen=True)
class Piece:
    """One block that moves: from ``src`` rank to ``dst`` rank (equal ranks: a local copy)."""

    src: int
    dst: int
    region: Region

    @property
    def size(self) -> int:
        return region_size(self.region)


def _class_ranks(layout: Layout, coords: tuple[int, ...]) -> np.ndarray:
    """Ranks whose coordinates along every splitting axis equal ``coords``."""
    mask = np.ones(layout.p, dtype=bool)
    for axis, c in enumerate(coords):
        if layout.axes[axis] is not None:
            mask &= rank_axis_coords(layout, axis) == c
    return np.nonzero(mask)[0]


def _nearest(candidates: np.ndarray, rank: int) -> int:
    """The replica a rank reads from: nearest in rank order (same node first), lower on ties."""
    return int(candidates[np.argmin(np.abs(candidates - rank) * 2 + (candidates > rank))])


def transfers(src: Layout, dst: Layout, backward: bool = False) -> tuple[Piece, ...]:
    """Every block a reshard moves, rank by rank: what the executor turns into Alltoallv counts.

    Forward: each rank gets each part of its needed region from one holder (itself if it can).
    Backward: each producer rank gets, from one replica of every distinct consumer block that
    overlaps its owned region, that overlap (to be summed).
    """
    ndim = len(src.shape)
    senders, receivers = (src, dst)
    out: list[Piece] = []
    ints = [axis_intervals(senders, a) for a in range(ndim)]
    for d in range(dst.p):
        want = block(receivers, d)
        mine = tuple(0 if senders.axes[a] is None else senders.strategy.coord(d, senders.axes[a].dim)
                     for a in range(ndim))
        per_axis = []
        for a in range(ndim):
            lo, hi = ints[a]
            ks = [k for k in range(len(lo)) if min(hi[k], want[a][1]) > max(lo[k], want[a][0])]
            per_axis.append(ks)
        for combo in _product(per_axis):
            region = tuple((max(int(ints[a][0][k]), want[a][0]), min(int(ints[a][1][k]), want[a][1]))
                           for a, k in enumerate(combo))
            if combo == mine:
                out.append(Piece(d, d, region))
            else:
                out.append(Piece(_nearest(_class_ranks(senders, combo), d), d, region))
    return tuple(out)


def _product(lists):
    if not lists:
        yield ()
        return
    for k in lists[0]:
        for rest in _product(lists[1:]):
            yield (k,) + rest
