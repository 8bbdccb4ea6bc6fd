"""The min-plus kernels graph reduction spends its time in.

``min_plus(a, c, b)[i, k] = min_j a[i, j] + c[j] + b[j, k]`` eliminates a node ``v`` between ``u``
and ``w`` (``a``: edge u-v, ``c``: cost of v, ``b``: edge v-w). It is cubic; the work is done in row
blocks (a ``(rows, J, K)`` temporary that stays in cache) that may run on several threads, since
numpy releases the GIL inside its loops.
"""

from __future__ import annotations

from concurrent.futures import Executor

import numpy as np

_BLOCK_ELEMENTS = 1 << 18  # elements of the (rows, J, K) temporary: ~2 MiB of float64


def _rows(a2: np.ndarray, b: np.ndarray, out: np.ndarray, lo: int, hi: int) -> None:
    j, k = b.shape
    step = max(1, _BLOCK_ELEMENTS // max(1, j * k))
    tmp = np.empty((min(step, hi - lo), j, k))
    for s in range(lo, hi, step):
        e = min(s + step, hi)
        t = tmp[: e - s]
        np.add(a2[s:e, :, None], b[None, :, :], out=t)
        t.min(axis=1, out=out[s:e])


def min_plus_dense(a: np.ndarray, c: np.ndarray, b: np.ndarray,
                   executor: Executor | None = None, workers: int = 1) -> np.ndarray:
    """``out[i, k] = min_j a[i, j] + c[j] + b[j, k]`` over every ``j`` (the reference kernel)."""
    a2 = a + c[None, :]
    rows = a2.shape[0]
    out = np.empty((rows, b.shape[1]))
    if executor is None or workers <= 1 or rows < 2 * workers:
        _rows(a2, b, out, 0, rows)
        return out
    bounds = np.linspace(0, rows, workers + 1).astype(int)
    futures = [executor.submit(_rows, a2, b, out, int(lo), int(hi))
               for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    for f in futures:
        f.result()
    return out


def min_plus(a: np.ndarray, c: np.ndarray, b: np.ndarray,
             executor: Executor | None = None, workers: int = 1) -> np.ndarray:
    """``out[i, k] = min_j a[i, j] + c[j] + b[j, k]``, skipping ``j`` that provably cannot win.

    Each row ``i`` visits ``j`` in increasing ``a[i, j] + c[j]`` (blocks of doubling width) and
    stops once ``a[i, j] + c[j] + min_j' b[j', k]`` of the next ``j`` is no less than every
    ``out[i, k]`` found so far: every later ``j`` is at least that large (floating-point addition
    is monotone), so the result equals :func:`min_plus_dense` exactly. Falls back to the dense
    kernel when little can be skipped. ``executor``/``workers`` apply to that fallback only.
    """
    a2 = a + c[None, :]
    rows_n, inner = a2.shape
    cols = b.shape[1]
    if inner <= 16 or rows_n * inner * cols <= 1 << 15:
        return min_plus_dense(a, c, b, executor, workers)
    order = np.argsort(a2, axis=1, kind="stable")
    ordered = np.take_along_axis(a2, order, axis=1)
    col_min = b.min(axis=0)
    out = np.full((rows_n, cols), np.inf)
    rows = np.arange(rows_n)
    start, width = 0, 16
    while rows.size and start < inner:
        stop = min(start + width, inner)
        chunk = max(1, _BLOCK_ELEMENTS // ((stop - start) * cols))
        for lo in range(0, rows.size, chunk):
            r = rows[lo:lo + chunk]
            idx = order[r, start:stop]
            block = np.take(b, idx.ravel(), axis=0).reshape(idx.shape + (cols,))  # gather rows
            block += ordered[r, start:stop, None]
            out[r] = np.minimum(out[r], block.min(axis=1))
        start = stop
        if start < inner:
            bound = ordered[rows, start][:, None] + col_min[None, :]
            rows = rows[(bound < out[rows]).any(axis=1)]
        width *= 2
    return out


def fold(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``out[i] = min_j m[i, j] + c[j]``: a leaf ``v`` (cost ``c``) folded into its neighbour."""
    return (m + c[None, :]).min(axis=1)
