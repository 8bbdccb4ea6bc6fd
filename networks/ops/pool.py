"""maxpool2d, avgpool2d and global_avgpool over (C, H, W) inputs (PyTorch semantics for ceil_mode
and count_include_pad). Work and depth: Ben-Nun & Hoefler, "Demystifying Parallel and Distributed
Deep Learning" (ACM Computing Surveys 2019), Table 4, pooling (forward work NCHW with depth
log Kx + log Ky; backward-data work NCHW with depth 1)."""

from __future__ import annotations

from networks.ops.base import N, H, W, C, DimSplit, LayerCost, OpDef, Param, ShapeError, Window, clog2, need_float, need_rank, no_weights, prod

POOL_PARAMS = (
    Param("kernel", "pair", doc="window size, k or [kh, kw]"),
    Param("stride", "pair", None, "stride (default: the kernel size)"),
    Param("padding", "pad", 0, "implicit padding on each side"),
    Param("dilation", "pair", 1, "window dilation (maxpool2d only; avgpool2d refuses one)"),
    Param("ceil_mode", "bool", False, "round the output size up, as PyTorch's ceil_mode"),
    Param("count_include_pad", "bool", True, "avgpool: divide by the full window, padding included"),
)


def pool_out(n: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = d * (k - 1) + 1
    num = n + 2 * p - span
    out = (-(-num // s) if ceil_mode else num // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:  # last window must start inside the input or left pad
        out -= 1
    return out


def _norm(p):
    stride = p["stride"] if p["stride"] is not None else p["kernel"]
    return p["kernel"], stride, p["padding"], p["dilation"]


def pool_infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (3,), "its input", "pooling")
    need_float(dtypes[0], "pooling")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _norm(p)
    if 2 * ph > kh or 2 * pw > kw:
        raise ShapeError(f"padding {p['padding']} must be at most half the kernel {p['kernel']}", "padding")
    c, h, w = x
    ho, wo = pool_out(h, kh, sh, ph, dh, p["ceil_mode"]), pool_out(w, kw, sw, pw, dw, p["ceil_mode"])
    if ho < 1 or wo < 1:
        raise ShapeError(f"window {kh}x{kw} does not fit the padded input {h + 2 * ph}x{w + 2 * pw}", "kernel")
    return (c, ho, wo), dtypes[0]


def _pool_costs(p, in_shapes, out_shape, n, itemsize, index_bytes):
    (kh, kw), _, _, _ = _norm(p)
    xin, yout = n * prod(in_shapes[0]), n * prod(out_shape)
    return LayerCost(
        flops=(yout * kh * kw, xin, 0),
        work=(yout * kh * kw, xin, 0),
        depth=(clog2(kh) + clog2(kw), 1, 0),
        bytes_read=(xin * itemsize, yout * itemsize, 0),
        bytes_written=(yout * itemsize, xin * itemsize, 0),
        activation_bytes=yout * index_bytes,
        macs=0,
    )


def pool_splits(p, in_shapes, out_shape):
    c, h, w = in_shapes[0]
    _, ho, wo = out_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = _norm(p)
    return (DimSplit(N, 0, (0,), 0),
            DimSplit(C, c, (1,), 1),
            DimSplit(H, ho, (2,), 2, window=Window(kh, sh, ph, dh, h)),
            DimSplit(W, wo, (3,), 3, window=Window(kw, sw, pw, dw, w)))


def maxpool_costs(p, in_shapes, out_shape, n, itemsize):
    """Max pooling keeps its input and the position of each maximum (int64, as PyTorch's
    max_pool2d_with_indices) for backward."""
    return _pool_costs(p, in_shapes, out_shape, n, itemsize, 8)


def avgpool_costs(p, in_shapes, out_shape, n, itemsize):
    """Average pooling's gradient needs only the shapes: it keeps nothing."""
    return _pool_costs(p, in_shapes, out_shape, n, itemsize, 0)


MAXPOOL = OpDef("maxpool2d", "max pooling", POOL_PARAMS, (1, 1), pool_infer, no_weights,
                maxpool_costs, pool_splits)


def avgpool_infer(p, in_shapes, dtypes):
    if tuple(p["dilation"]) != (1, 1):  # the kernels, the executor and PyTorch's AvgPool2d have none
        raise ShapeError(f"avgpool2d has no dilation (got {p['dilation']}); remove it, or use maxpool2d",
                         "dilation")
    return pool_infer(p, in_shapes, dtypes)


AVGPOOL = OpDef("avgpool2d", "average pooling", POOL_PARAMS, (1, 1), avgpool_infer, no_weights,
                avgpool_costs, pool_splits, saves="none")


def gap_infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (3,), "its input", "global_avgpool")
    need_float(dtypes[0], "global_avgpool")
    return (x[0], 1, 1), dtypes[0]


def gap_costs(p, in_shapes, out_shape, n, itemsize):
    c, h, w = in_shapes[0]
    xin = n * c * h * w
    return LayerCost((xin, xin, 0), (xin, xin, 0), (clog2(h * w), 1, 0),
                     (xin * itemsize, n * c * itemsize, 0), (n * c * itemsize, xin * itemsize, 0),
                     0, 0)


def gap_splits(p, in_shapes, out_shape):
    c, h, w = in_shapes[0]
    # a spatial split leaves partial sums that are all-reduced (the output is replicated)
    return (DimSplit(N, 0, (0,), 0),
            DimSplit(C, c, (1,), 1),
            DimSplit(H, h, (2,), None, partial_out=True),
            DimSplit(W, w, (3,), None, partial_out=True))


GLOBAL_AVGPOOL = OpDef("global_avgpool", "average over all spatial positions -> (C, 1, 1)", (),
                       (1, 1), gap_infer, no_weights, gap_costs, gap_splits, saves="none")
