"""The layout algebra against an element-by-element brute force on small grids and odd shapes."""

import random

import numpy as np
import pytest

from costmodel.parallel.layout import AxisSplit, Layout, block, reshard_volume, same_blocks, transfers
from costmodel.parallel.axes import GRID_ORDER
from costmodel.parallel.strategy import Strategy, make_strategy, parse_degrees
from networks.errors import DnnplanError
from networks.ops.base import Window


def masks(layout):
    """Boolean mask of the tensor region each rank holds, by direct element enumeration."""
    out = []
    for r in range(layout.p):
        m = np.zeros(layout.shape, dtype=bool)
        m[tuple(slice(lo, hi) for lo, hi in block(layout, r))] = True
        out.append(m)
    return out


def random_strategy(rng, p):
    dims = list(GRID_ORDER[:-1])
    degrees = {}
    left = p
    for d in rng.sample(dims, len(dims)):
        divs = [k for k in range(1, left + 1) if left % k == 0]
        k = rng.choice(divs)
        if k > 1:
            degrees[d] = k
            left //= k
    return make_strategy(p, degrees)


def random_layout(rng, shape, strat, windows=False):
    axes = []
    dims = [d for d, _ in strat.degrees]
    rng.shuffle(dims)
    for a, n in enumerate(shape):
        if dims and rng.random() < 0.7:
            d = dims.pop()
            k = strat.degree(d)
            if windows and a >= 2 and rng.random() < 0.6:
                kern, stride, dil = rng.choice([1, 2, 3]), rng.choice([1, 2]), rng.choice([1, 2])
                pad = rng.randrange(0, kern)
                span = dil * (kern - 1) + 1
                out = (n + 2 * pad - span) // stride + 1
                if out >= k:
                    axes.append(AxisSplit(d, k, out, Window(kern, stride, pad, dil, n)))
                    continue
            if n >= k:
                axes.append(AxisSplit(d, k, n))
                continue
        axes.append(None)
    return Layout(tuple(shape), strat, tuple(axes))


CASES = []
_rng = random.Random(1234)
for _ in range(150):
    p = _rng.choice([1, 2, 3, 4, 6, 8, 12])
    shape = tuple(_rng.choice([1, 2, 3, 5, 7, 8, 9]) for _ in range(_rng.choice([2, 3, 4])))
    src = random_layout(_rng, shape, random_strategy(_rng, p))
    dst = random_layout(_rng, shape, random_strategy(_rng, p), windows=True)
    CASES.append((src, dst))


@pytest.mark.parametrize("src,dst", CASES)
def test_forward_reshard_matches_brute_force(src, dst):
    own, need = masks(src), masks(dst)
    vol = reshard_volume(src, dst)
    pieces = transfers(src, dst)
    for d in range(dst.p):
        brute = int((need[d] & ~own[d]).sum())
        assert vol.recv_elems[d] == brute
        got = np.zeros(dst.shape, dtype=np.int64)
        remote = 0
        for piece in (q for q in pieces if q.dst == d):
            sl = tuple(slice(lo, hi) for lo, hi in piece.region)
            assert own[piece.src][sl].all(), "a sender must hold what it sends"
            got[sl] += 1
            if piece.src != d:
                remote += piece.size
        assert np.array_equal(got, need[d].astype(np.int64)), "each needed element arrives exactly once"
        assert remote == brute
        senders = {q.src for q in pieces if q.dst == d and q.src != d}
        assert vol.messages[d] == len(senders)  # one message from each remote rank that holds a needed piece


@pytest.mark.parametrize("src,dst", CASES)
def test_backward_reshard_matches_brute_force(src, dst):
    # gradients flow from the consumer's needed blocks back to the producer's owned blocks
    need, own = masks(dst), masks(src)
    vol = reshard_volume(dst, src, backward=True)
    pieces = transfers(dst, src, backward=True)
    classes = {}
    for r in range(dst.p):
        classes.setdefault(block(dst, r), r)
    for d in range(src.p):
        contrib = sum(int((m & own[d]).sum()) for m in (need[r] for r in classes.values()))
        mine = int((need[d] & own[d]).sum())
        assert vol.recv_elems[d] == contrib - mine
        remote = sum(q.size for q in pieces if q.dst == d and q.src != d)
        assert remote == contrib - mine
        acc = np.zeros(src.shape, dtype=np.int64)
        for q in (q for q in pieces if q.dst == d):
            acc[tuple(slice(lo, hi) for lo, hi in q.region)] += 1
        coverage = sum(need[r].astype(np.int64) for r in classes.values()) * own[d]
        assert np.array_equal(acc, coverage), "every overlapping contribution is summed once"


def test_p1_moves_nothing():
    s = Strategy(1)
    a = Layout((4, 3, 8, 8), s, (None,) * 4)
    b = Layout((4, 3, 8, 8), s, (None, None, None, None))
    assert reshard_volume(a, b).max_recv == 0
    assert all(q.src == q.dst for q in transfers(a, b))


def test_halo_exchange_is_a_reshard_with_overlapping_needed_blocks():
    # 3x3 conv, stride 1, pad 1, H split in 4 over 16 rows: interior ranks need one row each side
    s = Strategy.of(4, H=4)
    own = Layout((1, 2, 16, 5), s, (None, None, AxisSplit("H", 4, 16), None))
    need = Layout((1, 2, 16, 5), s, (None, None, AxisSplit("H", 4, 16, Window(3, 1, 1, 1, 16)), None))
    vol = reshard_volume(own, need)
    row = 2 * 5
    assert list(vol.recv_elems) == [row, 2 * row, 2 * row, row]
    assert list(vol.messages) == [1, 2, 2, 1]
    assert not same_blocks(own, need)


def test_a_dimension_given_twice_is_refused_not_the_last_taken():
    with pytest.raises(DnnplanError, match="gives N twice"):
        parse_degrees("N=8, n=1", 8)


def test_grid_mapping_order_and_groups():
    s = parse_degrees("N=2,H=2,F=2", 16)
    assert s.replication == 2 and s.label == "N=2,H=2,F=2,R=2"
    # R innermost, then F, ..., N outermost
    assert [s.coord(r, "R") for r in range(4)] == [0, 1, 0, 1]
    assert [s.coord(r, "F") for r in range(4)] == [0, 0, 1, 1]
    assert s.coord(8, "N") == 1 and s.coord(7, "N") == 0
    assert s.group(0, ["F"]) == (0, 2)
    assert s.group(0, ["N"]) == (0, 8)
    assert len(s.group(5, ["N", "H", "R"])) == 8


@pytest.mark.parametrize("seed", range(40))
def test_binary_search_aggregates_equal_the_overlap_matrix(seed):
    """The O(k log k) path used for large degrees against the dense overlap matrix."""
    from costmodel.parallel.layout import _interval_aggregates, axis_intervals
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    def intervals(windowed):
        k = rng.randint(1, n)
        win = None
        if windowed:
            kern, stride, dil = rng.choice([1, 3, 5]), rng.choice([1, 2]), rng.choice([1, 2])
            pad = rng.randrange(0, kern)
            out = (n + 2 * pad - dil * (kern - 1) - 1) // stride + 1
            if out >= 1:
                k = min(k, out)
                win = Window(kern, stride, pad, dil, n)
                grid = Strategy.of(k, N=k) if k > 1 else Strategy(1)
                return axis_intervals(Layout((n,), grid, (AxisSplit("N", k, out, win) if k > 1 else None,)), 0)
        return axis_intervals(Layout((n,), Strategy.of(k, N=k) if k > 1 else Strategy(1),
                                     (AxisSplit("N", k, n) if k > 1 else None,)), 0)
    slo, shi = intervals(rng.random() < 0.5)
    dlo, dhi = intervals(rng.random() < 0.5)
    fast = _interval_aggregates(slo, shi, dlo, dhi, dense_limit=0)
    dense = _interval_aggregates(slo, shi, dlo, dhi, dense_limit=10**9)
    assert np.array_equal(fast[0], dense[0])
    assert np.array_equal(fast[1], dense[1])


def _run_in(region, blk) -> int:
    """Elements per contiguous run of ``region`` inside an array holding ``blk`` (C order)."""
    run = 1
    for (lo, hi), (blo, bhi) in zip(reversed(region), reversed(blk)):
        run *= hi - lo
        if hi - lo != bhi - blo:
            break
    return run


def test_copy_run_is_the_run_of_rank_zeros_own_piece():
    """copy_run is what the executor's local copy on rank 0 moves per contiguous run (the
    cost model prices a reshard's copies with it), checked on nested splits: a halo, a filter
    split feeding a sample split, a channel slice, equal layouts."""
    from costmodel.parallel.layout import copy_run
    s = make_strategy(4, {"N": 2, "H": 2})
    shape = (4, 6, 8, 5)
    own = Layout(shape, s, (AxisSplit("N", 2, 4), None, AxisSplit("H", 2, 8), None))
    halo = Layout(shape, s, (AxisSplit("N", 2, 4), None, AxisSplit("H", 2, 8, Window(3, 1, 1, 1, 8)), None))
    f = make_strategy(4, {"F": 4})
    fsplit = Layout(shape, f, (None, AxisSplit("F", 4, 6), None, None))
    cases = [(own, halo), (halo, own), (fsplit, own), (own, fsplit), (own, own)]
    for src, dst in cases:
        mine = [pc for pc in transfers(src, dst) if pc.src == 0 and pc.dst == 0]
        assert mine, "rank 0 keeps part of its block in each case"
        want = min(min(_run_in(pc.region, block(src, 0)), _run_in(pc.region, block(dst, 0))) for pc in mine)
        assert copy_run(src, dst) == want == copy_run(dst, src), (src, dst)
    assert copy_run(own, halo) == 4 * 5  # own rows x width: the halo rows cut the run
    assert copy_run(fsplit, own) == 4 * 5  # the H split cuts first (own rows x width)
