"""linear split over N (and H for sequence inputs), C (partial sums all-reduced forward) and F
(input-gradient partial sums all-reduced backward). Under a C split only the rank with
C-coordinate 0 adds the bias and contributes its gradient. Tied weights are not supported."""

from __future__ import annotations

import numpy as np

from executor.ops.base import LayerCtx, check_shape, finish_contraction_backward, owns_bias, unsupported
from kernels.gemm import linear_backward_data, linear_backward_weights, linear_forward


def _linear_backward(dy, x, w, with_bias):
    """Backward-data and backward-weights as the two kernels the cost model prices
    (costmodel.kernel_calls: ``linear.bwd_data``, ``linear.bwd_weights``)."""
    dx = linear_backward_data(dy, w)
    dw, db = linear_backward_weights(dy, x, with_bias)
    return dx.reshape(x.shape), dw, db


def forward(ctx: LayerCtx, xs):
    if ctx.p.get("tied_to"):
        raise unsupported(ctx.layer, "a linear layer with tied weights")
    (x,) = xs
    with ctx.span("fwd_compute"):
        y = linear_forward(x, ctx.weights["weight"], ctx.weights["bias"] if owns_bias(ctx) else None)
    y = np.ascontiguousarray(y)
    ctx.allreduce(y, ("C",), "fwd_comm")
    return check_shape(ctx, y), x


def backward(ctx: LayerCtx, dy, x):
    with_bias = "bias" in ctx.weights
    with ctx.span("bwd_compute"):
        dx, dw, db = _linear_backward(dy, x, ctx.weights["weight"], with_bias)
    return finish_contraction_backward(ctx, dx, dw, db)
