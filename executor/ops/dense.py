"""linear split over N (and H for sequence inputs), C (partial sums all-reduced forward) and F
(input-gradient partial sums all-reduced backward). Under a C split only the rank with
C-coordinate 0 adds the bias and contributes its gradient. Tied weights are not supported."""

from __future__ import annotations

import numpy as np

from executor.ops.base import LayerCtx, check_shape, unsupported
from profiler.kernels.gemm import linear_backward, linear_forward


def _has_bias(ctx: LayerCtx) -> bool:
    return "bias" in ctx.weights and ctx.coord("C") == 0


def forward(ctx: LayerCtx, xs):
    if ctx.p.get("tied_to"):
        raise unsupported(ctx.layer, "a linear layer with tied weights")
    (x,) = xs
    with ctx.span("fwd_compute"):
        y = linear_forward(x, ctx.weights["weight"], ctx.weights["bias"] if _has_bias(ctx) else None)
    y = np.ascontiguousarray(y)
    ctx.allreduce(y, ("C",), "fwd_comm")
    return check_shape(ctx, y), x


def backward(ctx: LayerCtx, dy, x):
    with_bias = "bias" in ctx.weights
    with ctx.span("bwd_compute"):
        dx, dw, db = linear_backward(dy, x, ctx.weights["weight"], with_bias)
    dx = np.ascontiguousarray(dx)
    ctx.allreduce(dx, ("F",), "bwd_comm")
    grads = {"weight": dw}
    if with_bias:
        grads["bias"] = db if _has_bias(ctx) else np.zeros_like(db)
    return [dx], grads
