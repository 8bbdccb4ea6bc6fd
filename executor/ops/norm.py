"""batchnorm2d split over N, C, H, W: per-channel sums are all-reduced over every rank holding the
same channels (the N, H, W group), forward (sum, sum of squares, count) and backward (sum dy,
sum dy*xhat), so the statistics equal the single-process ones. A layer marked unsynchronised
(--batch-norm local, costmodel.choices.batch_norm) sums over its H and W group only: the statistics of
each rank's sample shard, as PyTorch DDP's BatchNorm2d takes them. The gamma/beta gradients a rank
returns are its LOCAL sums (the weight-gradient allreduce over the same group completes them);
layernorm and rmsnorm split over N and H need no statistics exchange (each row's statistic is its own)."""

from __future__ import annotations

from costmodel.parallel.axes import N, H, W
from executor.ops.base import LayerCtx, check_shape
from kernels.norm import (bn_backward_apply, bn_backward_local_sums, bn_forward_apply, bn_local_sums,
                          layernorm_backward, layernorm_forward, rmsnorm_backward, rmsnorm_forward)
from networks.ops.norm import synced

STAT_DIMS = (N, H, W)
LOCAL_STAT_DIMS = (H, W)  # unsynchronised: only the ranks holding parts of the same samples


def stat_dims(ctx: LayerCtx) -> tuple[str, ...]:
    return STAT_DIMS if synced(ctx.p) else LOCAL_STAT_DIMS


def bn_forward(ctx: LayerCtx, xs):
    (x,) = xs
    with ctx.span("fwd_compute"):
        stats = bn_local_sums(x)  # [sum | sumsq | count]: one buffer, all-reduced in place
    ctx.allreduce(stats, stat_dims(ctx), "fwd_comm")
    with ctx.span("fwd_compute"):
        y, cache = bn_forward_apply(x, stats, ctx.weights["gamma"], ctx.weights["beta"], ctx.p["eps"])
    return check_shape(ctx, y), cache


def bn_backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        sums, dgamma, dbeta = bn_backward_local_sums(dy, cache)  # [sum dy | sum dy*xhat], local grads
    ctx.allreduce(sums, stat_dims(ctx), "bwd_comm")
    with ctx.span("bwd_compute"):
        dx = bn_backward_apply(dy, cache, sums)
    return [dx], {"gamma": dgamma, "beta": dbeta}  # local: grad sync sums them


def ln_forward(ctx: LayerCtx, xs):
    (x,) = xs
    with ctx.span("fwd_compute"):
        y, cache = layernorm_forward(x, ctx.weights["gamma"], ctx.weights["beta"], ctx.p["eps"])
    return check_shape(ctx, y), cache


def ln_backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        dx, dgamma, dbeta = layernorm_backward(dy, cache)
    return [dx], {"gamma": dgamma, "beta": dbeta}


def rms_forward(ctx: LayerCtx, xs):
    (x,) = xs
    with ctx.span("fwd_compute"):
        y, cache = rmsnorm_forward(x, ctx.weights["gamma"], ctx.p["eps"])
    return check_shape(ctx, y), cache


def rms_backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        dx, dgamma = rmsnorm_backward(dy, cache)
    return [dx], {"gamma": dgamma}
