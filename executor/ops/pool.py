"""maxpool2d and avgpool2d split over N, C, H, W (halos arrive with the input; the shard's padding
is computed from its needed block, so clipped windows keep the global divisor), and
global_avgpool over N, C, H, W (a spatial shard divides by the GLOBAL H*W and the partial sums
are all-reduced over the spatial group; the output is replicated there)."""

from __future__ import annotations

from costmodel.parallel.axes import H, W
from executor.ops.base import LayerCtx, check_shape, local_pads, memo
from networks.ops.base import Window
from kernels.pool import (avgpool2d_backward, avgpool2d_forward, global_avgpool_backward,
                                   global_avgpool_forward, maxpool2d_backward, maxpool2d_forward)


def geometry(ctx: LayerCtx):
    p = ctx.p
    kh, kw = p["kernel"]
    sh, sw = p["stride"] if p["stride"] is not None else p["kernel"]
    ph, pw = p["padding"]
    dh, dw = p["dilation"] if ctx.layer.op == "maxpool2d" else (1, 1)
    _, _, h, w = ctx.in_layouts[0].shape
    pads, ceil = [], False
    for axis, (k, s, pad, d, n) in ((2, (kh, sh, ph, dh, h)), (3, (kw, sw, pw, dw, w))):
        lo, hi, c = local_pads(Window(k, s, pad, d, n), ctx.out_block[axis], ctx.in_blocks[0][axis], pad)
        pads += [lo, hi]
        ceil = ceil or c
    return (kh, kw), (sh, sw), tuple(pads), (dh, dw), ceil


def pool_forward(ctx: LayerCtx, xs):
    (x,) = xs
    kernel, stride, pads, dil, ceil = memo(ctx, geometry)
    with ctx.span("fwd_compute"):
        if ctx.layer.op == "maxpool2d":
            y, cache = maxpool2d_forward(x, kernel, stride, pads, dil, ceil)
        else:
            y, cache = avgpool2d_forward(x, kernel, stride, pads, ceil, ctx.p["count_include_pad"])
    return check_shape(ctx, y), cache


def pool_backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        if ctx.layer.op == "maxpool2d":
            dx = maxpool2d_backward(dy, cache)
        else:
            dx = avgpool2d_backward(dy, cache)
    return [dx], {}


def gap_forward(ctx: LayerCtx, xs):
    (x,) = xs
    _, _, h, w = ctx.in_layouts[0].shape
    with ctx.span("fwd_compute"):
        y, cache = global_avgpool_forward(x, divisor=h * w)
    y = ctx.xp.ascontiguousarray(y)
    ctx.allreduce(y, (H, W), "fwd_comm")
    return check_shape(ctx, y), cache


def gap_backward(ctx: LayerCtx, dy, cache):
    with ctx.span("bwd_compute"):
        dx = global_avgpool_backward(dy, cache)
    return [dx], {}
