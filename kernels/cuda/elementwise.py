"""One fused pass each on the GPU: ReLU, GELU (tanh), dropout, add, SGD with momentum, and FSDP's
cast of a gradient to float32 and its division (kernels.optimizer).

Same signatures, results and caches as the numpy kernels (kernels.activation, kernels.optimizer),
so the executor's ops run either. Arrays the fused kernels do not take (float64, a strided
view) run the numpy kernels' array-module code instead (``fallback``).

Dropout keeps element ``i`` when ``splitmix64(seed * golden + i)`` (a counter-based hash, as
Philox-style generators are) reaches ``rate * 2^32``: the mask is a function of (seed, index)
only, drawn inside the pass instead of by a generator writing a buffer first; it differs from
numpy's mask, as numpy's and cupy's generators already did (kernels.activation.dropout_mask).
The seed also moves with a step counter in device memory (:func:`dropout_step`), 0 unless a CUDA
graph's capture advanced it (:func:`advance_dropout_step`, launched inside the captured step, so
each replay draws new masks where the host's seed is the captured one).
"""

from __future__ import annotations

from typing import Callable

from kernels.cuda import libs
from kernels.cuda.launch import f32, fits, from_float32, i64, run, to_float32, u32, u64


#: device -> the dropout step counter (one unsigned 64-bit integer in device memory)
_STEP: dict[int, object] = {}


def dropout_step():
    """This device's dropout step counter, made (0) on first use."""
    cp = libs.cupy()
    dev = cp.cuda.Device().id
    step = _STEP.get(dev)
    if step is None:
        step = _STEP[dev] = cp.zeros(1, dtype=cp.uint64)
    return step


def advance_dropout_step() -> None:
    """Add one to the step counter on the current stream (inside a capture: at each replay)."""
    step = dropout_step()
    run("step_advance", "float32", 1, (step, i64(1)))


def relu_forward(x, fallback: Callable):
    if not fits(x):
        return fallback(x)
    cp = libs.cupy()
    y = cp.empty_like(x)
    keep = cp.empty(x.shape, dtype=cp.bool_)
    run("relu_fwd", x.dtype.name, x.size, (x, y, keep, i64(x.size)))
    return y, keep


def relu_backward(dy, keep, fallback: Callable):
    if not fits(dy):
        return fallback(dy, keep)
    return _masked(dy, keep, 1.0)


def _masked(dy, keep, scale: float):
    cp = libs.cupy()
    dx = cp.empty_like(dy)
    run("mask_mul", dy.dtype.name, dy.size, (dy, cp.ascontiguousarray(keep), dx, i64(dy.size), f32(scale)))
    return dx


def gelu_forward(x, fallback: Callable):
    if not fits(x):
        return fallback(x)
    y = libs.cupy().empty_like(x)
    run("gelu_fwd", x.dtype.name, x.size, (x, y, i64(x.size)))
    return y, x


def gelu_backward(dy, x, fallback: Callable):
    if not fits(dy, x):
        return fallback(dy, x)
    dx = libs.cupy().empty_like(dy)
    run("gelu_bwd", dy.dtype.name, dy.size, (dy, x, dx, i64(dy.size)))
    return dx


def dropout_threshold(rate: float) -> int:
    """Elements whose 32-bit hash is below this are dropped (``rate`` of them)."""
    return max(0, min(int(round(float(rate) * 2.0 ** 32)), 2 ** 32 - 1))


def dropout_forward(x, rate, seed, fallback: Callable):
    if not fits(x):
        return fallback(x, rate, seed)
    cp = libs.cupy()
    if rate >= 1:
        return cp.zeros_like(x), (cp.zeros(x.shape, dtype=cp.bool_), x.dtype.type(1.0))
    scale = 1.0 / (1.0 - rate) if rate > 0 else 1.0
    y = cp.empty_like(x)
    keep = cp.empty(x.shape, dtype=cp.bool_)
    run("dropout_fwd", x.dtype.name, x.size,
        (x, y, keep, i64(x.size), dropout_step(), u64(int(seed) % 2 ** 64), u32(dropout_threshold(rate)),
         f32(scale)))
    return y, (keep, x.dtype.type(scale))


def dropout_backward(dy, cache, fallback: Callable):
    keep, scale = cache
    if not fits(dy):
        return fallback(dy, cache)
    return _masked(dy, keep, float(scale))


def add_forward(a, b, fallback: Callable):
    if a.shape != b.shape or not fits(a, b):
        return fallback(a, b)
    y = libs.cupy().empty_like(a)
    run("add2", a.dtype.name, a.size, (a, b, y, i64(a.size)))
    return y, None


def sgd_momentum_update(w, v, g, lr, momentum, master=None, *, fallback: Callable):
    """In place: ``v = momentum v + g``, ``w -= lr v``; with ``master`` (float32, the 16-bit
    weight's master copy, ``v`` float32) the master takes the step and ``w`` its rounding."""
    if master is None:
        if not fits(w, v, g):
            return fallback(w, v, g, lr, momentum)
        run("sgd_same", w.dtype.name, w.size, (w, v, g, i64(w.size), f32(lr), f32(momentum)))
        return w, v
    if not (fits(w, g) and master.dtype.name == "float32" and v.dtype.name == "float32"
            and master.flags.c_contiguous and v.flags.c_contiguous):
        return fallback(w, v, g, lr, momentum, master=master)
    run("sgd_mixed", w.dtype.name, w.size, (w, master, v, g, i64(w.size), f32(lr), f32(momentum)))
    return w, v


def cast_gradient(g, *, fallback: Callable):
    """A float32 copy of ``g``: the ``to_f32`` pass for a 16-bit gradient."""
    if not fits(g) or g.dtype.name == "float32":
        return fallback(g)
    return to_float32(g)


def scale_gradient(g, factor: float, *, fallback: Callable):
    """``g /= factor`` in place: cupy's own pass in float32; a 16-bit gradient through float32 and
    back (its format has no cupy arithmetic)."""
    if not fits(g) or g.dtype.name == "float32":
        return fallback(g, factor)
    g[...] = from_float32(to_float32(g) / f32(factor), g.dtype)
    return g
