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


def min_plus(a: np.ndarray, c: np.ndarray, b: np.ndarray,
             executor: Executor | None = None, workers: int = 1) -> np.ndarray:
    """``out[i, k] = min_j a[i, j] + c[j] + b[j, k]``, optionally split over ``workers`` threads."""
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


def fold(m: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``out[i] = min_j m[i, j] + c[j]``: a leaf ``v`` (cost ``c``) folded into its neighbour."""
    return (m + c[None, :]).min(axis=1)
