"""softmax_cross_entropy split over N (and H for sequence logits): each rank's loss is its local
sum over the GLOBAL element count, all-reduced over the split group (one number, kept on the device:
the runtime reads it after the step).

Split over the vocabulary (C, Megatron's vocabulary-parallel cross-entropy, kernels.loss): the
forward kernel on the rank's slice also gives each row's log-sum-exp and label logit over the
slice; three all-reduces over C of one number a row (the maximum, the sum of exponentials, the
label's logit), as the op catalogue prices them, give each row's whole log-sum-exp, so every rank
of the C group holds the loss of its rows (summed over N and H only)."""

from __future__ import annotations

import math

from costmodel.parallel.axes import N, H, C
from executor.ops.base import LayerCtx
from kernels.loss import combine_vocab_rows, softmax_xent_backward, softmax_xent_forward


def total_count(ctx: LayerCtx) -> int:
    """The elements the loss averages over: the whole batch's (every micro-batch's)."""
    return math.prod(ctx.in_layouts[0].shape[:-1]) * ctx.micro_batches


def forward(ctx: LayerCtx, xs):
    (logits,) = xs
    vocab_lo = ctx.in_blocks[0][-1][0] if ctx.split(C) else None
    with ctx.span("fwd_compute"):
        loss, cache = softmax_xent_forward(logits, ctx.labels, total_count(ctx), vocab_lo)
    if vocab_lo is not None:
        loss = _vocab_parallel(ctx, cache)
    buf = ctx.xp.asarray(loss, dtype=ctx.xp.float64).reshape(1)  # stays on the device: no wait in the step
    ctx.allreduce(buf, (N, H), "fwd_comm")
    return buf.reshape(()), cache


def _vocab_parallel(ctx: LayerCtx, cache):
    """The rank's part of the loss from the rows' whole log-sum-exp; sets the backward's row scale."""
    lse = cache["lse"]
    row_max = lse.copy()  # reduced in place; lse itself is still needed
    ctx.allreduce(row_max, (C,), "fwd_comm", op="max")
    with ctx.span("fwd_compute"):
        exp_sum = ctx.xp.exp(lse - row_max)
    ctx.allreduce(exp_sum, (C,), "fwd_comm")
    picked = ctx.xp.ascontiguousarray(cache["picked"])
    ctx.allreduce(picked, (C,), "fwd_comm")
    with ctx.span("fwd_compute"):
        loss, _, cache["row_scale"] = combine_vocab_rows(lse, row_max, exp_sum, picked, total_count(ctx))
    return loss


def backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        return [softmax_xent_backward(cache)], {}
