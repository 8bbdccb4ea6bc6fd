"""Batch and layer normalisation on the GPU: one fused pass per stage (kernels.norm's stages and
signatures; statistics accumulate in double for batch norm, float for layer norm).

Batch norm is two launches each way (kernels/cuda/cu/batchnorm.cu), each on a grid of channels x
parts: forward, ``bn_stats`` writes this shard's [sum | sum of squares | count] into one float64
buffer (the executor all-reduces it in place), then ``bn_fwd`` forms each channel's mean and
1/std from that buffer inside the pass and writes ``y``; backward, ``bn_bwd_sums`` writes [sum dy |
sum dy*xhat] and this shard's dgamma and dbeta, then ``bn_bwd`` writes ``dx``. The sums need no
zeroed output (each block writes its partials and the channel's last block adds them in order, a
counter per channel telling it, reset by it): no memset, the same sums on every run, and nothing
that a CUDA graph cannot replay. The cache keeps what backward reads: the input, the stats buffer
(2C + 1 doubles) and gamma; ``xhat`` is made again in backward, as frameworks do (the same bytes
as keeping it, one write fewer forward). The partials and counters are one workspace per device,
grown to the largest call, reused by every call in stream order.

Layer norm: one block per row forward (mean, then variance of the centred row, then the output)
and backward (the two row means, then ``dx``); the parameter gradients are column sums in row
chunks. The cache keeps the input and each row's mean and 1/std instead of ``xhat``.
"""

from __future__ import annotations

from typing import Callable

from kernels.cuda import libs
from kernels.cuda.launch import THREADS, f32, fits, from_float32, i32, run_grid
from kernels.cuda.reduce import channel_layout, column_sums

#: Elements of one channel each block of the batch-norm passes walks at least
PER_BLOCK = THREADS * 16
#: The most blocks per channel (more only lengthen the last block's sum of partials)
MAX_PARTS = 1024
#: (partials, counters) per device: kernels/cuda/cu/batchnorm.cu's workspace
_WORKSPACE: dict[int, tuple] = {}


def bn_grid(x) -> tuple[int, int] | None:
    """(channels, parts) of the batch-norm passes over ``x``; None when a channel is too large for
    their 32-bit element index (the array-module code runs it)."""
    n_img, c, inner = channel_layout(x)
    if n_img * inner >= 2 ** 31:
        return None
    return c, max(1, min(MAX_PARTS, -(-n_img * inner // PER_BLOCK)))


def bn_workspace(c: int, parts: int):
    """This device's partials (>= 2 c parts doubles) and zeroed counters (>= c): grown, never shrunk;
    made outside a captured step (the first, eager, steps reach every size)."""
    cp = libs.cupy()
    dev = cp.cuda.Device().id
    part, done = _WORKSPACE.get(dev, (None, None))
    if part is None or part.size < 2 * c * parts:
        part = cp.empty(2 * c * parts, dtype=cp.float64)
    if done is None or done.size < c:
        done = cp.zeros(c, dtype=cp.uint32)
    _WORKSPACE[dev] = (part, done)
    return part, done


def _dims(x) -> tuple:
    n_img, c, inner = channel_layout(x)
    return i32(n_img), i32(c), i32(inner)


def bn_local_sums(x, *, fallback: Callable):
    grid = bn_grid(x) if x.ndim >= 2 and fits(x) else None
    if grid is None:
        return fallback(x)
    cp = libs.cupy()
    c, parts = grid
    stats = cp.empty(2 * c + 1, dtype=cp.float64)
    part, done = bn_workspace(c, parts)
    run_grid("bn_stats", x.dtype.name, grid, (THREADS,), (x, stats, part, done, *_dims(x)))
    return stats


def bn_forward_apply(x, stats, gamma, beta, eps=1e-5, *, fallback: Callable):
    grid = bn_grid(x) if x.ndim >= 2 and fits(x, gamma, beta) else None
    if grid is None or stats.dtype.name != "float64":
        return fallback(x, stats, gamma, beta, eps)
    y = libs.cupy().empty_like(x)
    run_grid("bn_fwd", x.dtype.name, grid, (THREADS,), (x, stats, gamma, beta, y, *_dims(x), f32(eps)))
    return y, {"x": x, "stats": stats, "gamma": gamma, "eps": float(eps)}


def _fused_cache(dy, cache) -> bool:
    return "x" in cache and dy.shape == cache["x"].shape and fits(dy, cache["x"], cache["gamma"])


def bn_backward_local_sums(dy, cache, *, fallback: Callable):
    grid = bn_grid(dy) if _fused_cache(dy, cache) else None
    if grid is None:
        return fallback(dy, cache)
    cp = libs.cupy()
    c, parts = grid
    sums = cp.empty(2 * c, dtype=cp.float64)
    dgamma, dbeta = cp.empty_like(cache["gamma"]), cp.empty_like(cache["gamma"])
    part, done = bn_workspace(c, parts)
    run_grid("bn_bwd_sums", dy.dtype.name, grid, (THREADS,),
             (dy, cache["x"], cache["stats"], sums, dgamma, dbeta, part, done, *_dims(dy), f32(cache["eps"])))
    return sums, dgamma, dbeta


def bn_backward_apply(dy, cache, sums, *, fallback: Callable):
    grid = bn_grid(dy) if _fused_cache(dy, cache) else None
    if grid is None:
        return fallback(dy, cache, sums)
    dx = libs.cupy().empty_like(dy)
    run_grid("bn_bwd", dy.dtype.name, grid, (THREADS,),
             (dy, cache["x"], cache["stats"], sums, cache["gamma"], dx, *_dims(dy), f32(cache["eps"])))
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
