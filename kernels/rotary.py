"""Rotary position embeddings (Su et al., "RoFormer: Enhanced Transformer with Rotary Position
Embedding", 2021, eq. 34) on per-head query or key blocks, as Megatron-Core and Hugging Face's Llama
rotate them: each head's ``dh`` features in two halves, ``x cos + rotate_half(x) sin`` with
``rotate_half(x) = (-x2, x1)`` and the angle of position ``t`` and pair ``i`` ``t base^(-2i/dh)``.

The executor rotates with RoFormer's base 10,000; a checkpoint's own base (Llama 3: 500,000) changes
the angles, not the work. The tables are computed, not learned (no weights). The cost model prices
the rotation as 3 operations an element of q and k each pass (networks.ops.attention).
"""

from __future__ import annotations

from kernels.xp import module_of

#: RoFormer's base of the rotation angles
BASE = 10000.0


def tables(xp, positions: int, dh: int, dtype, start: int = 0):
    """``(cos, sin)``, each (positions, dh), of the positions from ``start``: the angles of each
    half repeated for the other."""
    inv = BASE ** (-xp.arange(0, dh, 2, dtype=xp.float64) / dh)
    angles = xp.arange(start, start + positions, dtype=xp.float64)[:, None] * inv[None, :]
    angles = xp.concatenate([angles, angles], axis=-1)
    return xp.cos(angles).astype(dtype), xp.sin(angles).astype(dtype)


def _half(x, sign: float):
    """``(-x2, x1)`` (sign 1: rotate_half) or its transpose ``(x2, -x1)`` (sign -1)."""
    xp = module_of(x)
    h = x.shape[-1] // 2
    return xp.concatenate([-sign * x[..., h:], sign * x[..., :h]], axis=-1)


def rotary_forward(x, dh: int, start: int = 0):
    """Rotate ``x`` (N, S, heads dh), each head's block of ``dh`` by its position along S, the
    first at ``start`` (a sequence split's block)."""
    xp = module_of(x)
    n, s, w = x.shape
    cos, sin = tables(xp, s, dh, x.dtype, start)
    heads = x.reshape(n, s, w // dh, dh)
    y = heads * cos[:, None, :] + _half(heads, 1.0) * sin[:, None, :]
    return y.reshape(n, s, w), dh


def rotary_backward(dy, dh: int, start: int = 0):
    """The inverse rotation of ``dy`` (the gradient of :func:`rotary_forward`'s input)."""
    xp = module_of(dy)
    n, s, w = dy.shape
    cos, sin = tables(xp, s, dh, dy.dtype, start)
    heads = dy.reshape(n, s, w // dh, dh)
    return (heads * cos[:, None, :] + _half(heads * sin[:, None, :], -1.0)).reshape(n, s, w)
