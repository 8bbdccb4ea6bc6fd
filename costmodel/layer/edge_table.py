"""Many reshards at once: the same numbers as :func:`costmodel.parallel.layout.reshard_volume` and
:func:`costmodel.layer.edge.edge_estimate`, vectorised over (source, destination) layout pairs.

The planner needs the reshard cost of every (producer candidate, consumer candidate) pair of every
edge: thousands of pairs, too many to price one by one through :func:`reshard_volume` at large p
(its time per pair is in docs/costmodel.md, "The layout algebra"). Two exact steps make that cheap:

1. **Batch reduction.** The sample dimension N is outermost in the grid (docs/costmodel.md,
   "Strategies and the grid"), so rank ``r`` has N coordinate ``r // m`` with ``m = p / n``. When
   both layouts split the batch axis by N with degrees ``n_s``, ``n_d`` that divide the batch, and
   ``m_s``, ``m_d`` nest (one divides the other; always so for powers of two), shifting ``r`` by
   ``L = max(m_s, m_d)`` shifts both batch blocks by the same ``B L / p`` samples and leaves every
   other coordinate unchanged.
   Every per-rank quantity is invariant under that shift, so the maxima over all ``p`` ranks equal
   the maxima over the first ``L`` ranks: the same reshard of a ``B L / p``-sample tensor over ``L``
   ranks with N degrees ``L / m_s`` and ``L / m_d`` (inner strides are unchanged).
2. **Vectorisation.** Pairs with the same (reduced) rank count and rank are evaluated together with
   per-axis overlap tables ``T[pair, dst block, src block]`` gathered by each rank's coordinates,
   exactly as :func:`reshard_volume` does per pair (same integer formulas, same windows). Each
   distinct axis spec's table has its own size (:class:`AxisTables`), and an axis neither side
   splits gives a pair one factor for all its ranks.
3. **Layouts that reshard alike.** Strategies that split a tensor the same way over the same ranks
   (differing only in dims it is replicated over) give layouts with equal features
   (:attr:`LayoutTable.feature`); their pairs are priced once.

The link a reshard uses is found without listing the group: rank 0's group along ``dims`` stays
inside link domain 0 (node 0, or the NVLink domain holding it: ``Machine.domain_size``) iff its largest
member, ``sum (degree - 1) * stride``, is below the domain's size.
``tests/unit/planner/problem/test_planner_core.py`` checks all of it against the per-pair functions.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from costmodel.parallel.layout import Layout, first_extents, reducible, reshard_peaks
from costmodel.calls.layer_calls import dtype_for_itemsize
from costmodel.layer.edge import reshard_copy_s
from costmodel.machine.model import Machine
from costmodel.parallel.axes import N, GRID_ORDER
from costmodel.parallel.strategy import composite

TABLE_LIMIT = 1 << 15  # largest per-pair overlap table (dst blocks x src blocks) vectorised
CHUNK_ELEMS = 1 << 22  # pairs x ranks x blocks per numpy batch


# --- vectorised evaluation -------------------------------------------------------------------------

DIM_BIT = {d: 1 << i for i, d in enumerate(GRID_ORDER[:-1])}


class LayoutTable:
    """Per-layout features as arrays, so that any set of pairs is evaluated without Python loops.

    All layouts share the rank count ``p``. Axes are padded to the largest tensor rank with neutral
    axes (one block of extent 1).
    """

    def __init__(self, layouts: Sequence[Layout]):
        self.layouts = list(layouts)
        n = len(self.layouts)
        self.p = self.layouts[0].p if n else 1
        if any(lay.p != self.p for lay in self.layouts):
            raise ValueError("a LayoutTable holds layouts of one rank count")
        axes = max((len(lay.shape) for lay in self.layouts), default=1)
        self.ndim = np.array([len(lay.shape) for lay in self.layouts], np.int64)
        self.deg = np.ones((n, axes), np.int64)
        self.ext = np.ones((n, axes), np.int64)
        self.hasw = np.zeros((n, axes), bool)
        self.win = np.zeros((n, axes, 5), np.int64)
        self.radix = np.ones((n, axes), np.int64)
        self.stride = np.ones((n, axes), np.int64)
        self.batch = np.ones(n, np.int64)
        self.span = np.full(n, self.p, np.int64)  # ranks per N block (p / N degree)
        self.reducible = np.zeros(n, bool)
        self.dimmask = np.zeros(n, np.int64)
        self.contrib = np.zeros((n, len(DIM_BIT)), np.int64)  # (degree - 1) * stride per dim
        self.spec = np.zeros((n, axes), np.int64)  # id of (degree, extent, window) per axis
        self.first = np.ones((n, axes), np.int64)  # rank 0's block extents (copy_run)
        shapes = np.zeros((n, axes), np.int64)
        specs: dict[tuple, int] = {}
        for i, lay in enumerate(self.layouts):
            strat = lay.strategy
            shapes[i, :len(lay.shape)] = lay.shape
            for a, size in enumerate(lay.shape):
                split = lay.axes[a]
                if split is None:
                    self.ext[i, a] = size
                    continue
                self.deg[i, a], self.ext[i, a] = split.degree, split.extent
                self.radix[i, a], self.stride[i, a] = strat.radix_stride(split.dim)
                for d in composite(split.dim):
                    self.dimmask[i] |= DIM_BIT[d]
                if split.window is not None:
                    w = split.window
                    self.hasw[i, a] = True
                    self.win[i, a] = (w.kernel, w.stride, w.pad_lo, w.dilation, w.in_size)
            for d, bit in DIM_BIT.items():
                g = GRID_ORDER.index(d)
                self.contrib[i, bit.bit_length() - 1] = (strat.radix[g] - 1) * strat.strides[g]
            for a in range(axes):
                key = (int(self.deg[i, a]), int(self.ext[i, a]), bool(self.hasw[i, a]),
                       tuple(int(x) for x in self.win[i, a]))
                self.spec[i, a] = specs.setdefault(key, len(specs))
            if self.hasw[i].any():
                self.first[i, :len(lay.shape)] = first_extents(lay)
            else:
                self.first[i] = self.ext[i] // self.deg[i]
            if lay.shape:
                self.batch[i] = lay.shape[0]
            self.span[i] = self.p // strat.degree(N)
            self.reducible[i] = bool(lay.shape) and reducible(lay)
        rows = np.concatenate([shapes, self.ndim[:, None], self.spec, self.radix, self.stride, self.batch[:, None],
                               self.span[:, None], self.reducible[:, None]], axis=1)  # spec: degree, extent, window
        # layouts with equal rows reshard alike: other strategies can split a tensor the same way
        # over the same ranks (dims it is replicated over); their pairs are priced once
        self.feature = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1) if n else np.zeros(0, np.int64)


def _intervals_v(deg, ext, hasw, win, width):
    """(lo, hi) of blocks 0..width-1 per pair, shape (pairs, width); blocks >= deg are empty."""
    c = np.arange(width, dtype=np.int64)[None, :]
    d, e = deg[:, None], ext[:, None]
    lo, hi = (c * e) // d, ((c + 1) * e) // d
    if hasw.any():
        k, s, pad, dil, size = (win[:, j][:, None] for j in range(5))
        a = lo * s - pad
        b = (hi - 1) * s - pad + dil * (k - 1) + 1
        empty = hi <= lo
        a = np.clip(a, 0, size)
        b = np.clip(b, 0, size)
        wlo, whi = np.where(empty, 0, a), np.where(empty, 0, np.maximum(a, b))
        lo = np.where(hasw[:, None], wlo, lo)
        hi = np.where(hasw[:, None], whi, hi)
    valid = c < d
    return np.where(valid, lo, 0), np.where(valid, hi, 0)


def _side(t: LayoutTable, ids, ranks, ok):
    """Axis parameters of one side of each pair, with the batch axis reduced where ``ok``."""
    deg, ext, radix, stride = t.deg[ids].copy(), t.ext[ids].copy(), t.radix[ids].copy(), t.stride[ids].copy()
    span = t.span[ids]
    n_new = ranks // span
    red = ok
    deg[red, 0] = n_new[red]
    ext[red, 0] = t.batch[ids][red] * ranks[red] // t.p
    radix[red, 0] = n_new[red]
    stride[red, 0] = np.where(n_new[red] > 1, span[red], 1)
    code = t.spec[ids].copy()  # reduced batch axes get negative codes of (extent, degree)
    code[red, 0] = -1 - (ext[red, 0] * (t.p + 1) + n_new[red])
    return deg, ext, t.hasw[ids], t.win[ids], radix, stride, code


class AxisTables:
    """Per distinct (source axis, destination axis) spec, its overlap table ``T[dst block, src
    block]`` and per destination block its size, the summed overlaps and how many source blocks
    overlap it, each spec's flattened into one array at its own offset (specs of one shape are
    computed together: padded to the widest spec, a table of thousands of blocks would make every
    other spec's as large)."""

    def __init__(self, slo, shi, dlo, dhi, sdeg, ddeg):
        n = len(sdeg)
        width_d, width_s = np.maximum(ddeg, 1), np.maximum(sdeg, 1)
        self.src_blocks = width_s
        self.row_at = np.zeros(n, np.int64)  # offset of each spec's rows (need, summed, count)
        self.table_at = np.zeros(n, np.int64)  # offset of each spec's table
        self.row_at[1:] = np.cumsum(width_d)[:-1]
        self.table_at[1:] = np.cumsum(width_d * width_s)[:-1]
        self.need = np.zeros(int(width_d.sum()), np.int64)
        self.summed = np.zeros_like(self.need)
        self.count = np.zeros_like(self.need)
        self.table = np.zeros(int((width_d * width_s).sum()), np.int64)
        shapes = width_d * (int(width_s.max()) + 1) + width_s
        for shape in np.unique(shapes):
            ids = np.nonzero(shapes == shape)[0]
            nd, ns = int(width_d[ids[0]]), int(width_s[ids[0]])
            table = np.maximum(0, np.minimum(dhi[ids, :nd, None], shi[ids, None, :ns])
                               - np.maximum(dlo[ids, :nd, None], slo[ids, None, :ns]))  # (spec, dst, src)
            rows = self.row_at[ids, None] + np.arange(nd)
            self.need[rows] = dhi[ids, :nd] - dlo[ids, :nd]
            self.summed[rows] = table.sum(axis=2)
            self.count[rows] = (table > 0).sum(axis=2)
            self.table[(self.table_at[ids, None] + np.arange(nd * ns)).reshape(-1)] = table.reshape(-1)


def _axis_tables(scode, dcode, sdeg, sext, shasw, swin, ddeg, dext, dhasw, dwin):
    """The :class:`AxisTables` of the distinct (source axis, destination axis) specs among the
    pairs, and ``inverse`` (pair -> distinct spec); ``scode``/``dcode`` identify each side's axis spec."""
    _, rs = np.unique(scode, return_inverse=True)
    _, rd = np.unique(dcode, return_inverse=True)
    _, first, inverse = np.unique(rs.reshape(-1) * (int(rd.max()) + 1) + rd.reshape(-1), return_index=True,
                                  return_inverse=True)
    inverse = inverse.reshape(-1)
    us = sdeg[first], sext[first], shasw[first], swin[first]
    ud = ddeg[first], dext[first], dhasw[first], dwin[first]
    slo, shi = _intervals_v(*us, int(us[0].max()))
    dlo, dhi = _intervals_v(*ud, int(ud[0].max()))
    return inverse, AxisTables(slo, shi, dlo, dhi, us[0], ud[0])


def _coordinate(ranks: np.ndarray, stride: np.ndarray, radix: np.ndarray) -> np.ndarray:
    """Each pair's block coordinate of each rank, ``(rank // stride) % radix``; by shifts and masks
    where every stride and radix is a power of two (the same integers, in a fraction of the time)."""
    if not ((stride & (stride - 1)).any() or (radix & (radix - 1)).any()):
        shift = np.log2(stride).astype(np.int64)
        return (ranks >> shift[:, None]) & (radix - 1)[:, None]
    return (ranks // stride[:, None]) % radix[:, None]


def _evaluate(sides, backward: bool, nranks: int):
    """Maxima over ``nranks`` ranks for pairs with prepared parameters (see :func:`_side`). An axis
    neither side splits over these ranks (radix 1: every rank in block 0) gives each pair one
    factor, not one per rank; the others gather from their specs' flattened tables."""
    (sdeg, sext, shasw, swin, srad, sstr, scode), (ddeg, dext, dhasw, dwin, drad, dstr, dcode) = sides
    npairs, axes = sdeg.shape
    ranks = np.arange(nranks, dtype=np.int64)[None, :]
    total = np.ones((npairs, 1), np.int64)  # widened to (pairs, ranks) by the first split axis
    local = np.ones((npairs, 1), np.int64)
    pieces = np.ones((npairs, 1), np.int64)
    for a in range(axes):
        inv, t = _axis_tables(scode[:, a], dcode[:, a], sdeg[:, a], sext[:, a], shasw[:, a], swin[:, a],
                              ddeg[:, a], dext[:, a], dhasw[:, a], dwin[:, a])
        got = t.summed if backward else t.need
        rows, tables = t.row_at[inv][:, None], t.table_at[inv][:, None]
        if not ((srad[:, a] > 1).any() or (drad[:, a] > 1).any()):
            total = total * got[rows]
            pieces = pieces * t.count[rows]
            local = local * t.table[tables]
            continue
        dc, sc = _coordinate(ranks, dstr[:, a], drad[:, a]), _coordinate(ranks, sstr[:, a], srad[:, a])
        at = rows + dc
        total = total * got.take(at)
        pieces = pieces * t.count.take(at)
        local = local * t.table.take(tables + dc * t.src_blocks[inv][:, None] + sc)
    total, local, pieces = np.broadcast_arrays(total, local, pieces)
    return (total - local).max(axis=1), np.maximum(pieces - (local > 0), 0).max(axis=1), total.max(axis=1)


def reshard_maxima_ids(t: LayoutTable, src, dst, backward: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``max_recv`` and ``max_messages`` of :func:`reshard_volume` for layout pairs given by index
    into ``t`` (``src[k] -> dst[k]``)."""
    recv, msgs, _ = _maxima_ids(t, src, dst, backward)
    return recv, msgs


class PricingStopped(Exception):
    """The caller's ``stop`` said to stop while pairs were being priced (a search past its deadline)."""


def _maxima_ids(t: LayoutTable, src, dst, backward: bool, stop=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``max_recv``, ``max_messages`` and ``max_written`` of :func:`reshard_volume` per pair;
    ``stop()`` (optional) is asked between pieces of work, and :class:`PricingStopped` raised when
    it says so."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if len(src) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, first, inverse = np.unique(t.feature[src] * len(t.layouts) + t.feature[dst], return_index=True,
                                  return_inverse=True)
    if len(first) < len(src):  # pairs of layouts that reshard alike (LayoutTable.feature) priced once
        return tuple(x[inverse.reshape(-1)] for x in _maxima_ids(t, src[first], dst[first], backward, stop))
    recv = np.zeros(len(src), np.int64)
    msgs = np.zeros(len(src), np.int64)
    written = np.zeros(len(src), np.int64)
    big = np.maximum(t.span[src], t.span[dst])
    small = np.minimum(t.span[src], t.span[dst])
    ok = t.reducible[src] & t.reducible[dst] & (big % small == 0) & (big < t.p)
    ranks = np.where(ok, big, t.p)
    width = np.max(t.deg[src] * t.deg[dst], axis=1)  # widest table before reduction (an upper bound)
    slow = (width > TABLE_LIMIT) & ~ok
    for k in np.nonzero(slow)[0]:
        if stop is not None and stop():
            raise PricingStopped
        recv[k], msgs[k], written[k] = reshard_peaks(t.layouts[src[k]], t.layouts[dst[k]], backward)
    for nranks in np.unique(ranks[~slow]):
        idx = np.nonzero((ranks == nranks) & ~slow)[0]
        s_side = _side(t, src[idx], ranks[idx], ok[idx])
        d_side = _side(t, dst[idx], ranks[idx], ok[idx])
        step = max(1, CHUNK_ELEMS // (int(nranks) * 8))
        for start in range(0, len(idx), step):
            if stop is not None and stop():
                raise PricingStopped
            part = slice(start, start + step)
            r, m, w = _evaluate((tuple(x[part] for x in s_side), tuple(x[part] for x in d_side)), backward,
                                int(nranks))
            recv[idx[part]], msgs[idx[part]], written[idx[part]] = r, m, w
    return recv, msgs, written


def reshard_copy_times_ids(t: LayoutTable, src, dst, backward: bool, dtype: str, compute) -> np.ndarray:
    """Seconds of each reshard's block copies, as :meth:`EdgeEstimate.copy_s` computes them
    (:func:`costmodel.layer.edge.reshard_copy_s` on the maxima and :func:`copy_run` of the pair)."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    if compute is None or len(src) == 0:
        return np.zeros(len(src))
    recv, _, written = _maxima_ids(t, src, dst, backward)
    return _copy_times(t, src, dst, recv, written, backward, dtype, compute)


def copy_runs_ids(t: LayoutTable, src, dst) -> np.ndarray:
    """:func:`costmodel.parallel.layout.copy_run` of each pair, vectorised over rank 0's block extents."""
    es, ed = t.first[src], t.first[dst]
    diff = es != ed
    axes = es.shape[1]
    last = np.where(diff.any(axis=1), axes - 1 - np.argmax(diff[:, ::-1], axis=1), 0)
    keep = np.arange(axes)[None, :] >= last[:, None]
    return np.prod(np.where(keep, np.maximum(1, np.minimum(es, ed)), 1), axis=1)


def _copy_times(t, src, dst, recv, written, backward, dtype, compute) -> np.ndarray:
    out = np.zeros(len(src))
    moving = np.nonzero(recv > 0)[0]
    if len(moving) == 0:
        return out
    keys = np.stack([written[moving], recv[moving], copy_runs_ids(t, src[moving], dst[moving])], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    secs = np.array([reshard_copy_s(compute, int(w), int(r), int(run), dtype, backward) for w, r, run in uniq])
    out[moving] = secs[inverse.reshape(-1)]
    return out


def reshard_times_ids(t: LayoutTable, src, dst, backward: bool, itemsize: int, machine: Machine,
                      compute=None, stop=None) -> np.ndarray:
    """Seconds of each reshard ``t.layouts[src[k]] -> t.layouts[dst[k]]``, as ``edge_estimate``
    computes them (``alltoallv_s`` on the link of the destination strategy's group), plus, given a
    compute model, the block copies (:meth:`EdgeEstimate.copy_s`); ``stop``: as :func:`_maxima_ids`."""
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    recv, msgs, written = _maxima_ids(t, src, dst, backward, stop)
    copies = 0.0
    if compute is not None and len(src):
        copies = _copy_times(t, src, dst, recv, written, backward, dtype_for_itemsize(itemsize), compute)
    union = t.dimmask[src] | t.dimmask[dst]
    bits = (union[:, None] >> np.arange(len(DIM_BIT))[None, :]) & 1
    top = np.where(union > 0, (bits * t.contrib[dst]).sum(axis=1), t.p - 1)
    intra = top < machine.domain_size
    nbytes = recv * itemsize
    # reshards are Alltoallv: inside a node, the alltoall fit of the message's size regime, cold
    # as a reshard follows a layer's kernels (as _reshard_time)
    regimes = machine.collective_regimes("alltoall", cold=True)
    k = np.minimum(np.searchsorted(np.array([u for u, _ in regimes]), nbytes, side="left"), len(regimes) - 1)
    alpha = np.where(intra, np.array([l.alpha_s for _, l in regimes])[k], machine.inter.alpha_s)
    beta = np.where(intra, np.array([l.beta_s_per_byte for _, l in regimes])[k], machine.inter.beta_s_per_byte)
    secs = msgs * alpha + nbytes * beta
    return np.where((nbytes == 0) | (msgs == 0), 0.0, secs) + copies


def reshard_maxima(pairs: Sequence[tuple[Layout, Layout]], backward: bool = False) -> list[tuple[int, int]]:
    """``(max_recv, max_messages)`` of :func:`reshard_volume` for each ``(src, dst)`` pair."""
    out = []
    for src, dst in pairs:
        t = LayoutTable([src, dst])
        r, m = reshard_maxima_ids(t, [0], [1], backward)
        out.append((int(r[0]), int(m[0])))
    return out


def reshard_times(pairs: Sequence[tuple[Layout, Layout]], backward: bool, itemsize: int,
                  machine: Machine) -> np.ndarray:
    """Seconds of each reshard ``src -> dst`` (``backward``: gradients from needed to owned)."""
    if not pairs:
        return np.zeros(0)
    ids: dict[Layout, int] = {}
    for s, d in pairs:
        ids.setdefault(s, len(ids))
        ids.setdefault(d, len(ids))
    t = LayoutTable(list(ids))
    return reshard_times_ids(t, [ids[s] for s, _ in pairs], [ids[d] for _, d in pairs], backward,
                             itemsize, machine)
