"""linear split over N (and H for sequence inputs), C (partial sums all-reduced forward) and F
(input-gradient partial sums all-reduced backward). Under a C split only the rank with
C-coordinate 0 adds the bias and contributes its gradient.

A tied LM head (``tied_to``: an embedding) has no weight of its own: it multiplies by the
embedding's token rows it shares (``ctx.tied``, set up by executor.ops.embedding.tie) and leaves
the gradient of those rows there for the embedding's backward, which adds its own to it. On
another pipeline stage than its embedding it holds a copy of the table as its ``weight``
(costmodel.step.pipeline.stage_network; executor.runtime.pipeline_tied sums the two copies' gradients). Its
kernels are the same three as any linear layer's (costmodel.calls.layer_calls)."""

from __future__ import annotations

from costmodel.parallel.axes import N, H, C
from executor.backend.device import Array
from executor.comm.reshard import reshard
from executor.ops.base import LayerCtx, check_shape, finish_contraction_backward, owns_bias, unsupported
from kernels.gemm import linear_backward_data, linear_backward_weights, linear_forward


def _linear_backward(dy, x, w, with_bias):
    """Backward-data and backward-weights as the two kernels the cost model prices
    (costmodel.calls.layer_calls: ``linear.bwd_data``, ``linear.bwd_weights``)."""
    dx = linear_backward_data(dy, w)
    dw, db = linear_backward_weights(dy, x, with_bias)
    return dx.reshape(x.shape), dw, db


def _weight(ctx: LayerCtx) -> Array:
    if not ctx.p.get("tied_to") or "weight" in ctx.weights:  # untied, or a pipelined head's copy of the table
        return ctx.weights["weight"]
    if ctx.tied is None:
        raise unsupported(ctx.layer, "a tied linear layer whose embedding is not set up")
    if ctx.tied.layouts is None:
        return ctx.tied.weight
    return ctx.memo["table"]  # this step's table, resharded to the head's rows in forward


def forward(ctx: LayerCtx, xs):
    (x,) = xs
    tied = ctx.tied if ctx.p.get("tied_to") and "weight" not in ctx.weights else None
    if tied is not None and tied.layouts is not None:  # the embedding's table to this head's rows
        with ctx.span("fwd_comm"):
            ctx.memo["table"] = reshard(tied.comm, tied.weight, *tied.layouts)
    w = _weight(ctx)
    with ctx.span("fwd_compute"):
        y = linear_forward(x, w, ctx.weights["bias"] if owns_bias(ctx) else None)
    y = ctx.xp.ascontiguousarray(y)
    ctx.allreduce(y, (C,), "fwd_comm")
    return check_shape(ctx, y), x


def backward(ctx: LayerCtx, dy, x):
    with_bias = "bias" in ctx.weights
    with ctx.span("bwd_compute"):
        dx, dw, db = _linear_backward(dy, x, _weight(ctx), with_bias)
    dxs, grads = finish_contraction_backward(ctx, dx, dw, db)
    if ctx.p.get("tied_to") and "weight" not in ctx.weights:
        g = grads.pop("weight")
        if ctx.tied.layouts is not None:  # back to the embedding's rows (costmodel.layer.tied)
            g = ctx.allreduce(ctx.xp.ascontiguousarray(g), (N, H), "bwd_comm")  # whole on every replica
            with ctx.span("bwd_comm"):
                g = reshard(ctx.tied.comm, g, ctx.tied.layouts[1], ctx.tied.layouts[0], backward=True)
                g = g / ctx.tied.replicas  # each of the embedding's replicas gets it; its sync sums them
        ctx.tied.grad = g
    return dxs, grads
