"""linear split over N (and H for sequence inputs), C (partial sums all-reduced forward) and F
(input-gradient partial sums all-reduced backward). Under a C split only the rank with
C-coordinate 0 adds the bias and contributes its gradient. Tied weights are not supported."""

from __future__ import annotations

import numpy as np

from executor.ops.base import LayerCtx, check_shape, finish_contraction_backward, owns_bias, unsupported
from profiler.kernels import gemm
from profiler.kernels.gemm import linear_backward, linear_forward

# The profiler times backward-data and backward-weights as two kernels (costmodel.kernel_calls);
# run those two when this kernel set has them, else the combined kernel.
_SPLIT_BWD = hasattr(gemm, "linear_backward_data") and hasattr(gemm, "linear_backward_weights")


def _linear_backward(dy, x, w, with_bias):
    if _SPLIT_BWD:
        dx = gemm.linear_backward_data(dy, w)
        dw, db = gemm.linear_backward_weights(dy, x, with_bias)
        return dx.reshape(x.shape), dw, db
    return linear_backward(dy, x, w, with_bias)


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
