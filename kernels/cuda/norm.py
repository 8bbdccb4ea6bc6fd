"""Batch and layer normalisation on the GPU: one fused pass per stage (kernels.norm's stages and
signatures; statistics accumulate in double for batch norm, float for layer norm).

Batch norm: the per-channel sums are one pass (``chan_sums``: grid of channels x parts, each
block's double sum added atomically), the apply one pass writing ``y`` and ``xhat`` (kept for
backward, as kernels.norm keeps it), the backward sums one pass over ``dy`` and ``xhat``, the
backward apply one pass. Layer norm: one block per row forward (mean, then variance of the
centred row, then the output) and backward (the two row means, then ``dx``); the parameter
gradients are column sums in row chunks. The cache keeps the input and each row's mean and
1/std instead of ``xhat`` (the same bytes; ``xhat`` is recomputed in backward, as frameworks do).
"""

from __future__ import annotations

from typing import Callable

import numpy

from kernels.cuda import libs
from kernels.cuda.launch import f32, fits, from_float32, i32, i64, run, run_grid, to_float32
from kernels.cuda.reduce import channel_layout, channel_sums, column_sums

def bn_local_sums(x, *, fallback: Callable):
    if not fits(x) or x.ndim < 2:
        return fallback(x)
    s, ss = channel_sums(x, squares=True)
    return s, ss, x.size // x.shape[1]


def bn_forward_apply(x, mean, var, gamma, beta, eps=1e-5, *, fallback: Callable):
    if not fits(x, gamma, beta):
        return fallback(x, mean, var, gamma, beta, eps)
    cp = libs.cupy()
    _, c, inner = channel_layout(x)
    invstd = (1.0 / cp.sqrt(var + eps)).astype(cp.float32)
    y, xhat = cp.empty_like(x), cp.empty_like(x)
    run("bn_apply", x.dtype.name, x.size,
        (x, mean.astype(cp.float32), invstd, gamma, beta, y, xhat, i64(x.size), i64(inner), i32(c)))
    return y, {"xhat": xhat, "invstd": invstd, "gamma": gamma}


def bn_backward_local_sums(dy, cache, *, fallback: Callable):
    if not fits(dy, cache["xhat"]):
        return fallback(dy, cache)
    return channel_sums(dy, cache["xhat"])


def bn_backward_apply(dy, cache, sum_dy, sum_dy_xhat, count, gamma, *, fallback: Callable):
    xhat = cache["xhat"]
    if not fits(dy, xhat) or cache["invstd"].dtype != numpy.float32:
        return fallback(dy, cache, sum_dy, sum_dy_xhat, count, gamma)
    cp = libs.cupy()
    _, c, inner = channel_layout(dy)
    scale = to_float32(gamma) * cache["invstd"]
    mdy = (sum_dy / count).astype(cp.float32)
    mdyx = (sum_dy_xhat / count).astype(cp.float32)
    dx = cp.empty_like(dy)
    run("bn_bwd_apply", dy.dtype.name, dy.size, (dy, xhat, scale, mdy, mdyx, dx, i64(dy.size), i64(inner), i32(c)))
    return dx


def _row_threads(d: int) -> int:
    """Threads of a one-block-per-row kernel: a multiple of 32 up to 1024, about d/4 each."""
    return int(min(1024, max(32, ((d // 4 + 31) // 32) * 32)))


def layernorm_forward(x, gamma, beta, eps=1e-5, *, fallback: Callable):
    if not fits(x, gamma, beta):
        return fallback(x, gamma, beta, eps)
    cp = libs.cupy()
    d = int(x.shape[-1])
    rows = x.size // d
    y = cp.empty_like(x)
    mean, rstd = cp.empty(rows, dtype=cp.float32), cp.empty(rows, dtype=cp.float32)
    run_grid("ln_fwd", x.dtype.name, (rows,), (_row_threads(d),), (x, gamma, beta, y, mean, rstd, i32(d), f32(eps)))
    return y, {"x": x, "mean": mean, "rstd": rstd, "gamma": gamma}


def layernorm_backward(dy, cache, *, fallback: Callable):
    if "x" not in cache or not fits(dy, cache["x"], cache["gamma"]):
        return fallback(dy, cache)
    cp = libs.cupy()
    x, gamma, mean, rstd = cache["x"], cache["gamma"], cache["mean"], cache["rstd"]
    d = int(x.shape[-1])
    dx = cp.empty_like(dy)
    run_grid("ln_bwd", dy.dtype.name, (x.size // d,), (_row_threads(d),), (dy, x, gamma, mean, rstd, dx, i32(d)))
    dbeta, dgamma = column_sums(dy, x, mean, rstd)
    return dx, from_float32(dgamma, dy.dtype), from_float32(dbeta, dy.dtype)
