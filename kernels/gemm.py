"""Matrix multiplication and the fully connected layer.

``gemm`` is ``op(a) @ op(b)`` where ``op`` optionally swaps the last two axes (batched inputs are
fine). It runs in the operands' dtype: float32, float64, float16 on both backends; bfloat16 only
where the backend has the dtype (cupy and numpy do not ship one; an ml_dtypes array falls back to
numpy's generic loops).
"""

from __future__ import annotations

from kernels.dispatch import device_kernel
from kernels.xp import module_of


def _t(a):
    return a.swapaxes(-1, -2)


@device_kernel("gemm")
def gemm(a, b, trans_a=False, trans_b=False):
    xp = module_of(a)
    return xp.matmul(_t(a) if trans_a else a, _t(b) if trans_b else b)


@device_kernel("linear.fwd")
def linear_forward(x, w, b=None):
    """x (..., C), w (F, C), b (F,) or None -> (..., F)."""
    lead = x.shape[:-1]
    y = gemm(x.reshape(-1, x.shape[-1]), w, trans_b=True)
    if b is not None:
        y += b.astype(y.dtype, copy=False)
    return y.reshape(*lead, w.shape[0])


@device_kernel("linear.bwd")
def linear_backward(dy, x, w, with_bias=True):
    """(dx (..., C), dw (F, C), db (F,) or None)."""
    f, c = w.shape
    dy2 = dy.reshape(-1, f)
    x2 = x.reshape(-1, c)
    dx = gemm(dy2, w).reshape(*x.shape)
    dw = gemm(dy2, x2, trans_a=True)
    db = dy2.sum(axis=0) if with_bias else None
    return dx, dw, db


@device_kernel("linear.bwd_data")
def linear_backward_data(dy, w):
    """dx (..., C) = dy (..., F) @ w (F, C): the backward-data pass alone."""
    f, c = w.shape
    return gemm(dy.reshape(-1, f), w).reshape(*dy.shape[:-1], c)


@device_kernel("linear.bwd_weights")
def linear_backward_weights(dy, x, with_bias=True):
    """(dw (F, C), db (F,) or None) = (dy^T x, sum dy): the backward-weights pass alone."""
    f, c = dy.shape[-1], x.shape[-1]
    dy2 = dy.reshape(-1, f)
    dw = gemm(dy2, x.reshape(-1, c), trans_a=True)
    return dw, (dy2.sum(axis=0) if with_bias else None)
