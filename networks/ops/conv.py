"""conv2d: 2-D convolution (cross-correlation, as every framework computes it), NCHW.

Work and depth follow Ben-Nun & Hoefler, "Demystifying Parallel and Distributed Deep Learning" (ACM
Computing Surveys 2019), Table 4 (direct convolution: work N*Cout*Cin*H'*W'*Kx*Ky per pass, depth
log Kx + log Ky + log Cin) and Table 6 for the other algorithms (see :func:`algorithm_work_depth`).
"""

from __future__ import annotations

import math

from networks.ops.base import N, H, W, C, F, DimSplit, LayerCost, OpDef, Param, ShapeError, Window, clog2, need_float, need_rank

PARAMS = (
    Param("filters", "pos", doc="output channels F"),
    Param("kernel", "pair", doc="kernel size, k or [kh, kw]"),
    Param("stride", "pair", 1, "stride, s or [sh, sw]"),
    Param("padding", "pad", 0, "zero padding on each side, p or [ph, pw]"),
    Param("dilation", "pair", 1, "dilation, d or [dh, dw]"),
    Param("groups", "pos", 1, "grouped convolution: channels and filters split into this many groups"),
    Param("bias", "bool", True, "add a learned bias per filter"),
)


def out_size(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


def infer(p, in_shapes, dtypes):
    (x,) = in_shapes
    need_rank(x, (3,), "its input", "conv2d")
    need_float(dtypes[0], "conv2d")
    c, h, w = x
    g = p["groups"]
    if c % g or p["filters"] % g:
        raise ShapeError(f"groups={g} must divide input channels ({c}) and filters ({p['filters']})", "groups")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    ho, wo = out_size(h, kh, sh, ph, dh), out_size(w, kw, sw, pw, dw)
    if ho < 1 or wo < 1:
        span = (dh * (kh - 1) + 1, dw * (kw - 1) + 1)
        raise ShapeError(f"kernel spans {span[0]}x{span[1]} but the padded input is only "
                         f"{h + 2 * ph}x{w + 2 * pw}", "kernel", hint="use a smaller kernel or more padding")
    return (p["filters"], ho, wo), dtypes[0]


def weights(p, in_shapes):
    c = in_shapes[0][0]
    kh, kw = p["kernel"]
    out = {"weight": (p["filters"], c // p["groups"], kh, kw)}
    if p["bias"]:
        out["bias"] = (p["filters"],)
    return out


def costs(p, in_shapes, out_shape, n, itemsize):
    c, h, w = in_shapes[0]
    f, ho, wo = out_shape
    kh, kw = p["kernel"]
    cg = c // p["groups"]
    macs = n * f * ho * wo * cg * kh * kw
    bias = n * f * ho * wo if p["bias"] else 0
    x_b, y_b = n * c * h * w * itemsize, n * f * ho * wo * itemsize
    w_b = (f * cg * kh * kw + (f if p["bias"] else 0)) * itemsize
    d = clog2(kh) + clog2(kw) + clog2(cg)
    # Table 4, backward-data: work N*Cout*Cin*H*W*Kx*Ky over the *input* extent.
    work_bwd_data = n * f * cg * h * w * kh * kw
    return LayerCost(
        flops=(2 * macs + bias, 2 * macs, 2 * macs + bias),
        work=(macs, work_bwd_data, macs),
        depth=(d, d, d),
        bytes_read=(x_b + w_b, y_b + w_b, y_b + x_b),
        bytes_written=(y_b, x_b, w_b),
        activation_bytes=0,  # saves its input (OpDef.saves)
        macs=macs,
    )


def splits(p, in_shapes, out_shape):
    c, h, w = in_shapes[0]
    f, ho, wo = out_shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = p["kernel"], p["stride"], p["padding"], p["dilation"]
    wts = ("weight", "bias") if p["bias"] else ("weight",)
    out = [
        DimSplit(N, 0, (0,), 0, partial_weight_grad=wts),
        DimSplit(H, ho, (2,), 2, window=Window(kh, sh, ph, dh, h), partial_weight_grad=wts,
                 min_block=1),
        DimSplit(W, wo, (3,), 3, window=Window(kw, sw, pw, dw, w), partial_weight_grad=wts,
                 min_block=1),
    ]
    if p["groups"] == 1:
        out.append(DimSplit(C, c, (1,), None, weight_axes=(("weight", 1),), partial_out=True,
                            partial_weight_grad=("bias",) if p["bias"] else ()))
        f_axes = (("weight", 0), ("bias", 0)) if p["bias"] else (("weight", 0),)
        out.append(DimSplit(F, f, (None,), 1, weight_axes=f_axes, partial_in_grad=True))
    return tuple(out)


#: Winograd F(m x m, 3 x 3): the output tile m (kernels.conv.winograd's default, F(2x2, 3x3)).
WINOGRAD_TILE = 2
#: Real multiply-adds of one real-input FFT of n points per n*log2(n): the radix-2 complex FFT's
#: 5 n log2 n real flops (Cooley-Tukey), halved for real input, halved again from flops to MACs.
FFT_MACS_PER_NLOGN = 1.25


def winograd_work(n: int, c: int, f: int, ho: int, wo: int, r: int, m: int = WINOGRAD_TILE) -> int:
    """Multiply-adds of Winograd F(m x m, r x r), Algorithm 6 of [Ben-Nun & Hoefler 2019, App. B.4]
    multiplied out (its Table 6 row counts each transform once and the tile product once).

    alpha = m + r - 1 (the input tile), P = N * ceil(Ho/m) * ceil(Wo/m) tiles. A transform
    a x a -> b x b is two matrix products, a^2 b + b^2 a multiply-adds (App. B.4):
      filters  Cout*Cin transforms r x r -> alpha x alpha:  Cout*Cin*(r^2 alpha + alpha^2 r)
      inputs   P*Cin transforms alpha x alpha -> alpha x alpha:  P*Cin*2 alpha^3
      product  alpha^2 GEMMs (Cout x Cin) @ (Cin x P):  alpha^2*Cout*Cin*P
      outputs  Cout*P transforms alpha x alpha -> m x m:  Cout*P*(alpha^2 m + m^2 alpha)
    For F(2x2, 3x3) the product is 16/36 of direct convolution's multiply-adds: at most 2.25x fewer.
    """
    alpha = m + r - 1
    tiles = n * math.ceil(ho / m) * math.ceil(wo / m)
    return (f * c * (r * r * alpha + alpha * alpha * r) + tiles * c * 2 * alpha ** 3
            + alpha * alpha * f * c * tiles + f * tiles * (alpha * alpha * m + m * m * alpha))


def fft_work(n: int, c: int, f: int, hp: int, wp: int) -> int:
    """Multiply-adds of FFT convolution on the padded Hp x Wp plane, Algorithm 5 of [Ben-Nun &
    Hoefler 2019, App. B.3] with its constant made explicit: a real FFT of each of the
    Cout*Cin + N*Cin + N*Cout planes (FFT_MACS_PER_NLOGN * HpWp log2 HpWp each), and the product
    on the Hp*(Wp/2+1) complex bins of a real FFT, each complex multiply-add four real ones
    (kernels.conv.fft transforms the padded plane, its size exactly what avoids circular aliasing)."""
    size = hp * wp
    transforms = FFT_MACS_PER_NLOGN * size * math.log2(max(size, 2)) * (f * c + n * c + n * f)
    return int(transforms) + 4 * hp * (wp // 2 + 1) * n * c * f


def algorithm_work_depth(algo: str, n: int, c: int, f: int, hp: int, wp: int, ho: int, wo: int,
                         kh: int, kw: int) -> tuple[int, int]:
    """Forward work (multiply-adds) and depth of one convolution algorithm on an input padded to
    hp x wp [Ben-Nun & Hoefler 2019, Table 6 for the depths; the work from Algorithms 5 and 6].

    direct and im2col: W = N*Cout*H'*W'*Cin*Ky*Kx, D = ceil(log2 Cin) + ceil(log2 Ky) + ceil(log2 Kx).
    FFT: :func:`fft_work`, D = 2*ceil(log2 HW) + ceil(log2 Cin).
    Winograd: :func:`winograd_work`, D = 2*ceil(log2 r) + 4*ceil(log2 alpha) + ceil(log2 Cin).
    """
    if algo in ("direct", "im2col"):
        return n * f * ho * wo * c * kh * kw, clog2(c) + clog2(kh) + clog2(kw)
    if algo == "fft":
        return fft_work(n, c, f, hp, wp), 2 * clog2(hp * wp) + clog2(c)
    if algo == "winograd":
        alpha = WINOGRAD_TILE + kh - 1
        return winograd_work(n, c, f, ho, wo, kh), 2 * clog2(kh) + 4 * clog2(alpha) + clog2(c)
    raise ValueError(algo)


OP = OpDef("conv2d", "2-D convolution over (C, H, W) inputs", PARAMS, (1, 1), infer, weights, costs, splits)
