"""numpy models of fused GPU passes (kernels/cuda/cu/), run by tests/support/doubles/fake_cupy.py on a
kernel's own arguments, so the passes' arithmetic is checked on a computer without a GPU.

Each model follows its kernel's algorithm, not only its result: the same grid (channels x parts),
the same share of elements per block (block ``p`` of a channel walks ``k`` with
``(k // threads) % parts == p``), partials written per block, the last block's in-order sum, the
per-channel counter that must be zero when a launch starts and is zero again when it ends, float32
arithmetic where the kernel computes in float and float64 where it accumulates in double. What it
cannot model is the order of additions inside a block (a tree on the GPU): results agree to
rounding, not bit for bit.
"""

from __future__ import annotations

import numpy as np

from tests.support.doubles.fake_cupy import at

F32 = np.float32


def _channels(a, n_img: int, c: int, inner: int):
    """(C, n_img * inner) view of an (N, C, inner) array, in the kernels' element order k."""
    return np.asarray(a).reshape(n_img, c, inner).transpose(1, 0, 2).reshape(c, n_img * inner)


def _parts_of(total: int, parts: int, threads: int):
    return (np.arange(total) // threads) % parts


def _reduce_by_parts(a, b, part, done, parts: int, threads: int):
    """Per-block partials of a and b (C, total) into ``part``, then each channel's in-order sum;
    checks and resets the counters as the kernel's last block does."""
    c, total = a.shape
    if np.any(np.asarray(done)[:c] != 0):
        raise AssertionError("a batch-norm counter was not zero when the launch started: no block would be last")
    owner = _parts_of(total, parts, threads)
    pa = np.stack([a[:, owner == p].sum(axis=1) for p in range(parts)], axis=1)  # (C, parts)
    pb = np.stack([b[:, owner == p].sum(axis=1) for p in range(parts)], axis=1)
    view = np.asarray(part)[:2 * c * parts].reshape(c, parts, 2)
    view[:, :, 0], view[:, :, 1] = pa, pb
    done[:c] = 0  # each channel's last block resets its counter
    return view[:, :, 0].sum(axis=1), view[:, :, 1].sum(axis=1)


def _moments(stats, c: int, eps):
    cnt = stats[2 * c]
    m = stats[:c] / cnt
    v = np.maximum(stats[c:2 * c] / cnt - m * m, 0.0)
    return m.astype(F32), (1.0 / np.sqrt(v + float(eps))).astype(F32), cnt


def bn_stats(grid, block, args, dtype=None):
    x, stats, part, done, n_img, c, inner = args
    xs = _channels(x, int(n_img), int(c), int(inner)).astype(F32).astype(np.float64)
    s, q = _reduce_by_parts(xs, xs * xs, part, done, grid[1], block[0])
    stats[:c], stats[c:2 * c], stats[2 * c] = s, q, xs.shape[1]


def bn_fwd(grid, block, args, dtype=None):
    x, stats, gamma, beta, y, n_img, c, inner, eps = args
    m, r, _ = _moments(stats, int(c), eps)
    xs = np.asarray(x).reshape(int(n_img), int(c), int(inner)).astype(F32)
    h = (xs - m[None, :, None]) * r[None, :, None]
    out = h * gamma.astype(F32)[None, :, None] + beta.astype(F32)[None, :, None]
    np.asarray(y).reshape(out.shape)[...] = out


def bn_bwd_sums(grid, block, args, dtype=None):
    dy, x, stats, sums, dgamma, dbeta, part, done, n_img, c, inner, eps = args
    n_img, c, inner = int(n_img), int(c), int(inner)
    m, r, _ = _moments(stats, c, eps)
    g = _channels(dy, n_img, c, inner).astype(F32)
    h = (_channels(x, n_img, c, inner).astype(F32) - m[:, None]) * r[:, None]
    a, b = _reduce_by_parts(g.astype(np.float64), g.astype(np.float64) * h.astype(np.float64), part, done,
                            grid[1], block[0])
    sums[:c], sums[c:] = a, b
    dgamma[...], dbeta[...] = b.astype(F32), a.astype(F32)


def bn_bwd(grid, block, args, dtype=None):
    dy, x, stats, sums, gamma, dx, n_img, c, inner, eps = args
    n_img, c, inner = int(n_img), int(c), int(inner)
    m, r, cnt = _moments(stats, c, eps)
    mdy, mdyx = (sums[:c] / cnt).astype(F32), (sums[c:] / cnt).astype(F32)
    shape = (n_img, c, inner)
    h = (np.asarray(x).reshape(shape).astype(F32) - m[None, :, None]) * r[None, :, None]
    scale = gamma.astype(F32) * r
    out = scale[None, :, None] * (np.asarray(dy).reshape(shape).astype(F32) - mdy[None, :, None]
                                  - h * mdyx[None, :, None])
    np.asarray(dx).reshape(shape)[...] = out


#: kernel name -> model
BATCH_NORM = {"bn_stats": bn_stats, "bn_fwd": bn_fwd, "bn_bwd_sums": bn_bwd_sums, "bn_bwd": bn_bwd}


def sgd_many(grid, block, args, dtype=np.float32):
    """kernels/cuda/cu/multi_tensor.cu: the table's tensors, each updated as sgd_same (or sgd_mixed)
    does; checks that the grid is the table's block count and every block lies in one tensor."""
    meta, n, chunk, lr, mom, mixed = args
    n, chunk = int(n), int(chunk)
    sizes, first = meta[4 * n:5 * n], meta[5 * n:6 * n + 1]
    if grid[0] != first[n] or np.any(first[1:] - first[:-1] != -(-sizes // chunk)):
        raise AssertionError("the grid or the first blocks do not match the sizes")
    for t in range(n):
        if sizes[t] == 0:
            continue
        w = at(meta[t], sizes[t], dtype)
        g = at(meta[3 * n + t], sizes[t], dtype).astype(F32)
        if mixed:
            v, master = at(meta[n + t], sizes[t], F32), at(meta[2 * n + t], sizes[t], F32)
            v[...] = F32(mom) * v + g
            master[...] = master - F32(lr) * v
            w[...] = master.astype(dtype)
        else:
            v = at(meta[n + t], sizes[t], dtype)
            m = F32(mom) * v.astype(F32) + g
            v[...] = m.astype(dtype)
            w[...] = (w.astype(F32) - F32(lr) * m).astype(dtype)


def sgd_same(grid, block, args, dtype=None):
    """kernels/cuda/cu/elementwise.cu's one-weight update, float arithmetic, stored in the format."""
    w, v, g, n, lr, mom = args
    m = F32(mom) * v.astype(F32) + g.astype(F32)
    v[...] = m.astype(v.dtype)
    w[...] = (w.astype(F32) - F32(lr) * m).astype(w.dtype)


def sgd_mixed(grid, block, args, dtype=None):
    w, master, v, g, n, lr, mom = args
    v[...] = F32(mom) * v + g.astype(F32)
    master[...] = master - F32(lr) * v
    w[...] = master.astype(w.dtype)


#: kernel name -> model
UPDATE = {"sgd_many": sgd_many, "sgd_same": sgd_same, "sgd_mixed": sgd_mixed}
