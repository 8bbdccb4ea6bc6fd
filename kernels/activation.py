"""Element-wise kernels: ReLU, GELU (tanh approximation, as GPT-2), SwiGLU, dropout, add, concat."""

from __future__ import annotations

import math

from kernels.dispatch import device_kernel
from kernels.xp import module_of

_GELU_C = math.sqrt(2.0 / math.pi)


@device_kernel("relu.fwd")
def relu_forward(x):
    xp = module_of(x)
    # branch-free (maximum, multiply by the mask): a data-dependent select runs several times slower
    # on mixed signs, which would make the profiled time depend on the data
    mask = x > 0
    return xp.maximum(x, xp.zeros((), dtype=x.dtype)), mask


@device_kernel("relu.bwd")
def relu_backward(dy, cache):
    return dy * cache


@device_kernel("gelu.fwd")
def gelu_forward(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); keeps its input only for backward (as
    PyTorch does, and as the cost model counts: ``networks.analysis.kept_bytes``)."""
    xp = module_of(x)
    t = xp.tanh(_GELU_C * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1.0 + t), x


@device_kernel("gelu.bwd")
def gelu_backward(dy, cache):
    """dy (0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2)) with t = tanh(c (x + a x^3)), computed as
    (1 + t)(0.5 + 0.5 x c (1 + 3 a x^2)(1 - t)) in two buffers of x's size, in place (the
    temporaries of the plain expression held about six at once)."""
    x = cache
    xp = module_of(x)
    a = x * x
    t = a * 0.044715
    t += 1.0
    t *= x
    t *= _GELU_C
    xp.tanh(t, out=t)  # again: the same values as forward
    a *= 3 * 0.044715
    a += 1.0
    a *= x
    a *= 0.5 * _GELU_C  # 0.5 x dinner
    t *= -1.0
    t += 1.0  # 1 - t
    a *= t
    a += 0.5
    t *= -1.0
    t += 2.0  # 1 + t
    a *= t
    a *= dy
    return a


def silu(a):
    """``(a sigmoid(a), sigmoid(a))``: SiLU and the sigmoid its gradient needs (:func:`silu_slope`)."""
    s = 1.0 / (1.0 + module_of(a).exp(-a))
    return a * s, s


def silu_slope(a, s):
    """SiLU's derivative at ``a`` from its sigmoid ``s``: ``s (1 + a (1 - s))``."""
    return s * (1.0 + a * (1.0 - s))


def swiglu_forward(x):
    """``silu(gate) * up`` over gate and up interleaved on the last axis (gate j at 2j, up j at
    2j + 1: networks.ops.pointwise, SwiGLU); (..., 2F) -> (..., F). Keeps its input only, as the
    cost model counts (its backward makes the sigmoid again, as gelu's does)."""
    g, u = x[..., 0::2], x[..., 1::2]
    return silu(g)[0] * u, x


def swiglu_backward(dy, cache):
    """The input's gradient, interleaved as the input: ``dgate = dy u silu'(g)``, ``dup = dy
    silu(g)``, the gate's sigmoid made again."""
    xp = module_of(dy)
    g, u = cache[..., 0::2], cache[..., 1::2]
    act, s = silu(g)
    dg = dy * u * silu_slope(g, s)
    du = dy * act
    return xp.stack([dg, du], axis=-1).reshape(*dy.shape[:-1], 2 * dy.shape[-1])


def dropout_mask(xp, shape, rate, seed, dtype):
    """Inverted-dropout multiplier: 0 with probability ``rate``, else 1/(1-rate). Deterministic in
    (backend, seed, shape); numpy and cupy generators differ, so masks differ across backends."""
    if rate <= 0:
        return xp.ones(shape, dtype=dtype)
    if rate >= 1:
        return xp.zeros(shape, dtype=dtype)
    keep = xp.random.default_rng(seed).random(shape) >= rate
    return keep.astype(dtype) * (1.0 / (1.0 - rate))


@device_kernel("dropout.fwd")
def dropout_forward(x, rate, seed):
    """Inverted dropout; keeps a one-byte mask of the kept elements for backward (as PyTorch does,
    and as the cost model counts) with the scale: the same products as a float mask."""
    xp = module_of(x)
    mask = dropout_mask(xp, x.shape, rate, seed, x.dtype)
    scale = x.dtype.type(1.0 / (1.0 - rate)) if 0 < rate < 1 else x.dtype.type(1.0)
    return x * mask, (mask != 0, scale)


@device_kernel("dropout.bwd")
def dropout_backward(dy, cache):
    keep, scale = cache
    return dy * keep * scale


@device_kernel("add.fwd")
def add_forward(a, b):
    return a + b, None


def add_backward(dy, cache=None):
    return dy, dy


def concat_forward(xs, axis=1):
    xp = module_of(xs[0])
    return xp.concatenate(xs, axis=axis), ([x.shape[axis] for x in xs], axis)


def concat_backward(dy, cache):
    xp = module_of(dy)
    sizes, axis = cache
    cuts = [sum(sizes[:i + 1]) for i in range(len(sizes) - 1)]
    return [p.copy() for p in xp.split(dy, cuts, axis=axis)]
