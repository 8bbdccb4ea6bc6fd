"""Sums over many elements on the GPU, for the fused passes: per channel of an (N, C, ...) array
(batch norm's statistics, a convolution's bias gradient) and per column of a (rows, d) matrix
(layer norm's and a linear layer's parameter gradients)."""

from __future__ import annotations

from kernels.cuda import libs
from kernels.cuda.launch import THREADS, i32, i64, run_grid

#: Elements of one channel each block of ``chan_sums`` sums at least (more blocks only add atomics)
PER_BLOCK = THREADS * 16


def channel_layout(x) -> tuple[int, int, int]:
    """(images, channels, elements per image and channel) of an (N, C, ...) array."""
    inner = 1
    for s in x.shape[2:]:
        inner *= int(s)
    return int(x.shape[0]), int(x.shape[1]), inner


def channel_sums(x, other=None, squares: bool = False):
    """Per-channel float64 sums of ``x`` and of ``x*x`` (``squares``) or of ``x*other``."""
    cp = libs.cupy()
    n_img, c, inner = channel_layout(x)
    if n_img * inner >= 2 ** 31:
        raise ValueError("a channel of more than 2^31 elements")
    s1, s2 = cp.zeros(c, dtype=cp.float64), cp.zeros(c, dtype=cp.float64)
    parts = max(1, min(65535, -(-n_img * inner // PER_BLOCK)))
    mode = 1 if squares else (2 if other is not None else 0)
    run_grid("chan_sums", x.dtype.name, (c, parts), (THREADS,),
             (x, x if other is None else other, s1, s2, i32(n_img), i32(c), i32(inner), i32(mode)))
    return s1, s2


def column_sums(a, x=None, mean=None, rstd=None):
    """Float32 sums over the rows of ``a`` (rows, d), and of ``a * xhat`` when ``x``, ``mean``
    and ``rstd`` are given (layer norm's parameter gradients)."""
    cp = libs.cupy()
    d = int(a.shape[-1])
    rows = a.size // d
    chunk = 256
    chunks = max(1, -(-rows // chunk))
    p1 = cp.empty((chunks, d), dtype=cp.float32)
    p2 = cp.empty((chunks, d), dtype=cp.float32) if x is not None else p1
    with_xhat = x is not None
    run_grid("col_sums", a.dtype.name, (-(-d // 32), chunks), (32, 8),
             (a, x if with_xhat else a, mean if with_xhat else p1, rstd if with_xhat else p1, p1, p2,
              i64(rows), i32(d), i32(chunk), i32(int(with_xhat))))
    return p1.sum(axis=0), (p2.sum(axis=0) if with_xhat else None)


