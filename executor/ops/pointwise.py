"""Ops without weights on matching blocks: relu, gelu, swiglu, dropout, add, concat, flatten.

SwiGLU under a feature split (C) takes whole (gate, up) pairs: its input block is the pairs of its
output block (networks.ops.pointwise), so it too runs on the local block alone.

Dropout draws its mask per shard (``dropout_forward`` seeds by shape), so a distributed run with
dropout cannot equal a single-process one; the step the check compares runs dropout as the identity
on both sides (runtime.py), every other step draws its mask.
Flatten under a C split keeps a contiguous feature block only when the degree divides C (the
output block is checked and anything else refused)."""

from __future__ import annotations

from executor.ops.base import LayerCtx, check_shape, unsupported
from kernels.activation import (add_backward, add_forward, concat_backward, concat_forward,
                                         dropout_backward, dropout_forward, gelu_backward, gelu_forward,
                                         relu_backward, relu_forward, swiglu_backward, swiglu_forward)


def _activation(forward_kernel, backward_kernel):
    """Forward and backward of an elementwise activation: the kernel on the local block, no
    communication under any split."""
    def fwd(ctx: LayerCtx, xs):
        with ctx.span("fwd_compute"):
            y, cache = forward_kernel(xs[0])
        return check_shape(ctx, y), cache

    def bwd(ctx: LayerCtx, dy, cache):
        with ctx.span("bwd_compute"):
            return [backward_kernel(dy, cache)], {}
    return fwd, bwd


relu_fwd, relu_bwd = _activation(relu_forward, relu_backward)
gelu_fwd, gelu_bwd = _activation(gelu_forward, gelu_backward)
swiglu_fwd, swiglu_bwd = _activation(swiglu_forward, swiglu_backward)


def dropout_fwd(ctx: LayerCtx, xs):
    rate = 0.0 if ctx.identity_dropout else ctx.p["rate"]
    with ctx.span("fwd_compute"):
        y, cache = dropout_forward(xs[0], rate, ctx.dropout_seed)
    return check_shape(ctx, y), cache


def dropout_bwd(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        return [dropout_backward(dy, cache)], {}


def add_fwd(ctx: LayerCtx, xs):
    with ctx.span("fwd_compute"):
        y, _ = add_forward(xs[0], xs[1])
        for x in xs[2:]:
            y, _ = add_forward(y, x)
    return check_shape(ctx, y), len(xs)


def add_bwd(ctx: LayerCtx, dy, k):
    with ctx.span("bwd_compute"):
        da, _ = add_backward(dy)
    return [da] * k, {}  # the same array for every input: the runtime never sums into it in place


def concat_fwd(ctx: LayerCtx, xs):
    with ctx.span("fwd_compute"):
        y, cache = concat_forward(list(xs), axis=ctx.p["axis"] + 1)
    return check_shape(ctx, y), cache


def concat_bwd(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        return concat_backward(dy, cache), {}


def flatten_fwd(ctx: LayerCtx, xs):
    x = xs[0]
    (clo, chi) = ctx.in_blocks[0][1]
    hw = x.shape[2] * x.shape[3] if x.ndim == 4 else 1
    if ctx.out_block[1] != (clo * hw, chi * hw):
        raise unsupported(ctx.layer, f"flatten under {ctx.strategy.label}: channels {clo}:{chi} do not "
                                     f"flatten to the owned features {ctx.out_block[1]} (the C degree "
                                     "must divide the channels)")
    with ctx.span("fwd_compute"):
        y = x.reshape(x.shape[0], -1)
    return check_shape(ctx, y), x.shape


def flatten_bwd(ctx: LayerCtx, dy, shape):
    with ctx.span("bwd_compute"):
        return [dy.reshape(shape)], {}
