"""softmax_cross_entropy split over N (and H for sequence logits): each rank's loss is its local
sum over the GLOBAL element count, all-reduced over the split group (one number)."""

from __future__ import annotations

import numpy as np

from executor.ops.base import LayerCtx
from kernels.loss import softmax_xent_backward, softmax_xent_forward


def total_count(ctx: LayerCtx) -> int:
    return int(np.prod(ctx.in_layouts[0].shape[:-1]))


def forward(ctx: LayerCtx, xs):
    (logits,) = xs
    with ctx.span("fwd_compute"):
        loss, cache = softmax_xent_forward(logits, ctx.labels, total_count(ctx))
    buf = np.array([float(loss)])
    ctx.allreduce(buf, ("N", "H"), "fwd_comm")
    return float(buf[0]), cache


def backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        return [softmax_xent_backward(cache)], {}
