"""Max pooling and global average pooling on the GPU, one pass each (kernels.pool's semantics,
signatures and caches: the window offset that won, ties to the first; -inf padding; the global
pool's divisor given by the caller on a spatial shard).

Max pooling's backward adds each output's gradient to its winner with float32 atomics (windows
overlap when the stride is below the kernel), then rounds to the storage format. Average pooling
over windows runs kernels.pool's array-module code (no zoo network the proof times uses it).
"""

from __future__ import annotations

from typing import Callable

from kernels.cuda import libs
from kernels.cuda.launch import THREADS, f32, fits, from_float32, i32, i64, run, run_grid
from kernels.pool import pool_geometry


def _geo_args(g: dict, total: int) -> tuple:
    return (i64(total), i32(g["h"]), i32(g["w"]), i32(g["ho"]), i32(g["wo"]), i32(g["kh"]), i32(g["kw"]),
            i32(g["sh"]), i32(g["sw"]), i32(g["pt"]), i32(g["pl"]), i32(g["dh"]), i32(g["dw"]))


def maxpool2d_forward(x, kernel, stride=None, padding=(0, 0, 0, 0), dilation=(1, 1), ceil_mode=False, *,
                      fallback: Callable):
    if not fits(x) or x.ndim != 4:
        return fallback(x, kernel, stride, padding, dilation, ceil_mode)
    cp = libs.cupy()
    g = pool_geometry(x.shape, kernel, stride, padding, dilation, ceil_mode)
    y = cp.empty((g["n"], g["c"], g["ho"], g["wo"]), dtype=x.dtype)
    arg = cp.empty(y.shape, dtype=cp.int32)
    run("maxpool_fwd", x.dtype.name, y.size, (x, y, arg, *_geo_args(g, y.size)))
    return y, {"arg": arg, "g": g}


def maxpool2d_backward(dy, cache, *, fallback: Callable):
    if not fits(dy):
        return fallback(dy, cache)
    cp = libs.cupy()
    g = cache["g"]
    dxf = cp.zeros((g["n"], g["c"], g["h"], g["w"]), dtype=cp.float32)
    run("maxpool_bwd", dy.dtype.name, dy.size, (dy, cache["arg"], dxf, *_geo_args(g, dy.size)))
    return from_float32(dxf, dy.dtype)


def global_avgpool_forward(x, divisor=None, *, fallback: Callable):
    if not fits(x) or x.ndim != 4:
        return fallback(x, divisor)
    cp = libs.cupy()
    n, c, h, w = (int(s) for s in x.shape)
    div = h * w if divisor is None else divisor
    y = cp.empty((n, c, 1, 1), dtype=x.dtype)
    rows = n * c
    blocks = max(1, -(-rows * 32 // THREADS))  # a warp per row
    run_grid("row_mean", x.dtype.name, (blocks,), (THREADS,), (x, y, i64(rows), i32(h * w), f32(1.0 / div)))
    return y, {"shape": tuple(x.shape), "div": div}


def global_avgpool_backward(dy, cache, *, fallback: Callable):
    if not fits(dy):
        return fallback(dy, cache)
    cp = libs.cupy()
    shape = cache["shape"]
    dx = cp.empty(shape, dtype=dy.dtype)
    run("row_spread", dy.dtype.name, dx.size, (dy, dx, i64(dx.size), i32(shape[2] * shape[3]), f32(1.0 / cache["div"])))
    return dx
