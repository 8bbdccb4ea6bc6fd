"""conv2d split over N, H, W (halos arrive with the input), C (partial sums all-reduced forward)
and F (input-gradient partial sums all-reduced backward), in any combination.

Under a C split only the rank with C-coordinate 0 adds the bias and contributes its gradient
(the others contribute zero), so the forward and the weight-gradient sums are right.
"""

from __future__ import annotations

from costmodel.parallel.axes import C
from executor.ops.base import LayerCtx, check_shape, finish_contraction_backward, local_pads, memo, owns_bias
from networks.ops.base import Window
from kernels.conv import conv2d_backward_data, conv2d_backward_weights, conv2d_forward


def geometry(ctx: LayerCtx):
    """(stride, padding (t, b, l, r), dilation) of this rank's shard."""
    p = ctx.p
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    _, _, h, w = ctx.in_layouts[0].shape
    pads = []
    for axis, (k, s, pad, d, n) in ((2, (kh, sh, ph, dh, h)), (3, (kw, sw, pw, dw, w))):
        lo, hi, _ = local_pads(Window(k, s, pad, d, n), ctx.out_block[axis], ctx.in_blocks[0][axis], pad)
        pads += [lo, hi]
    return (sh, sw), tuple(pads), (dh, dw)


def call_site(ctx: LayerCtx) -> dict:
    """Where a device's convolution keeps what it resolved on this layer's first call (its prepared
    path: kernels.cuda.conv), one per layer."""
    return {}


def forward(ctx: LayerCtx, xs):
    (x,) = xs
    stride, pads, dil = memo(ctx, geometry)
    with ctx.span("fwd_compute"):
        y = conv2d_forward(x, ctx.weights["weight"], ctx.weights["bias"] if owns_bias(ctx) else None,
                           stride, pads, dil, ctx.p["groups"], ctx.algo, site=memo(ctx, call_site))
    y = ctx.xp.ascontiguousarray(y)
    ctx.allreduce(y, (C,), "fwd_comm")
    return check_shape(ctx, y), (x, stride, pads, dil)


def backward(ctx: LayerCtx, dy, cache):
    x, stride, pads, dil = cache
    w = ctx.weights["weight"]
    g = ctx.p["groups"]
    with_bias = "bias" in ctx.weights
    with ctx.span("bwd_compute"):
        site = memo(ctx, call_site)
        dx = conv2d_backward_data(dy, w, x.shape, stride, pads, dil, g, ctx.algo, site=site) if ctx.input_grad else None
        dw, db = conv2d_backward_weights(dy, x, w.shape, stride, pads, dil, g, ctx.algo, with_bias, site=site)
    return finish_contraction_backward(ctx, dx, dw, db)
