"""The temporary buffers each convolution algorithm allocates, beyond its inputs and its result,
for each pass (pure): one closed form per algorithm, read off the kernels' implementations
(kernels/conv_direct.py, conv_im2col.py, conv_fft.py, conv_winograd.py list their buffers in their
docstrings). The kernels report the same sum through their ``trace`` argument and the tests check
that the two agree; the cost model counts a layer's workspace from here, so what it predicts is
what the kernels allocate (the largest temporaries; O(F*C) per-offset scratch and library
internals, BLAS or FFT plans, are not counted).
"""

from __future__ import annotations

from networks.ops.conv_geometry import ConvGeom, make_geom

#: im2col's weight gradient sums per-sample GEMMs while their products stay under this many
#: elements, else folds the batch into one GEMM (``python bench/bench_im2col_weight_grad.py``)
PER_SAMPLE_MAX_ELEMS = 1 << 16

#: Winograd F(m x m, 3 x 3) output tile size the kernels use
DEFAULT_TILE = 2


def per_sample_products(g: ConvGeom, limit: int = PER_SAMPLE_MAX_ELEMS) -> bool:
    """Whether im2col's weight gradient takes per-sample products (N*F*Cg*KH*KW <= ``limit``)."""
    return g.n * g.f * g.cg * g.kh * g.kw <= limit


def winograd_tiles(g: ConvGeom, m: int) -> tuple[int, int]:
    """Output tiles of Winograd F(m x m) down and across."""
    return -(-g.ho // m), -(-g.wo // m)


def rotated_geom(g: ConvGeom) -> ConvGeom:
    """Winograd's backward data: the full convolution of dy (padded by 2) with the rotated filter."""
    return make_geom((g.n, g.f, g.ho, g.wo), (g.c, g.fg, 3, 3), 1, (2, 2, 2, 2), 1, g.groups)


def direct_elems(g: ConvGeom, pass_name: str) -> int:
    """fwd: padded input + slice + partial product; bwd_data: partial product + padded gradient;
    bwd_weights: padded input + slice + per-sample product."""
    pad = g.n * g.c * g.hp * g.wp if g.padded else 0
    sl = g.n * g.c * g.ho * g.wo
    if pass_name == "fwd":
        return pad + sl + g.n * g.f * g.ho * g.wo
    if pass_name == "bwd_data":
        return sl + pad
    return pad + sl + g.n * g.f * g.cg


def im2col_elems(g: ConvGeom, pass_name: str, per_sample: bool | None = None) -> int:
    """Padded input and the column matrix; the weight gradient adds its per-sample products or,
    folding the batch, a reordered copy of dy (``per_sample``: which, by default
    :func:`per_sample_products`)."""
    pad = g.n * g.c * g.hp * g.wp if g.padded else 0
    cols = g.n * g.c * g.kh * g.kw * g.ho * g.wo
    if pass_name in ("fwd", "bwd_data"):
        return pad + cols
    if per_sample_products(g) if per_sample is None else per_sample:
        return pad + cols + g.n * g.f * g.cg * g.kh * g.kw
    return pad + cols + g.n * g.f * g.ho * g.wo


def fft_bytes(g: ConvGeom, pass_name: str, itemsize: int) -> int:
    """Spectra of both operands and of the result, their frequency-major copies, the padded and
    spread real buffers, and under float16 the float32 copies the FFTs work on (bytes)."""
    half = itemsize == 2
    isz = 4 if half else itemsize              # real compute itemsize
    csz = 2 * isz                              # complex itemsize
    s = g.hp * (g.wp // 2 + 1)
    dil = (g.dh, g.dw) != (1, 1)
    pad_x = g.n * g.c * g.hp * g.wp * isz if g.padded else 0
    spread = g.f * g.cg * g.khe * g.kwe * isz if dil else 0
    dy_full = g.n * g.f * g.hp * g.wp * isz
    nx, nw, ny = g.n * g.c * s, g.f * g.cg * s, g.n * g.f * s
    if pass_name == "fwd":
        cast = (g.n * g.c * g.h * g.w + g.f * g.cg * g.kh * g.kw) * isz if half else 0
        y_full = g.n * g.f * g.hp * g.wp * isz
        return cast + pad_x + spread + 2 * (nx + nw) * csz + 2 * ny * csz + y_full
    if pass_name == "bwd_data":
        cast = (g.n * g.f * g.ho * g.wo + g.f * g.cg * g.kh * g.kw) * isz if half else 0
        dx_pad = g.n * g.c * g.hp * g.wp * isz if (g.padded or half) else 0
        return cast + spread + dy_full + 2 * (ny + nw) * csz + 2 * nx * csz + dx_pad
    cast = (g.n * g.f * g.ho * g.wo + g.n * g.c * g.h * g.w) * isz if half else 0
    return cast + pad_x + dy_full + 2 * (nx + ny) * csz + 2 * nw * csz + g.f * g.cg * g.hp * g.wp * isz


def winograd_elems(g: ConvGeom, pass_name: str, m: int = DEFAULT_TILE) -> int:
    """Extended input, its tiles and their transform, the filter transform, the products and the
    output transform (cropped when the tiles overhang); backward data is the forward of the
    rotated problem plus the padded gradient."""
    th, tw = winograd_tiles(g, m)
    t, p = (m + 2) ** 2, g.n * th * tw
    eh, ew = m * th + 2, m * tw + 2
    ext = 0 if (not g.padded and (eh, ew) == (g.h, g.w)) else g.n * g.c * eh * ew
    inputs = ext + 2 * t * g.c * p
    if pass_name == "fwd":
        crop_buf = 0 if (m * th, m * tw) == (g.ho, g.wo) else g.n * g.f * m * m * th * tw
        return inputs + t * g.f * g.cg + t * g.f * p + m * m * g.f * p + crop_buf
    if pass_name == "bwd_data":
        dx_pad = g.n * g.c * g.hp * g.wp if g.padded else 0
        return winograd_elems(rotated_geom(g), "fwd", m) + dx_pad
    return inputs + m * m * g.f * p + t * g.f * p + t * g.f * g.cg


def workspace_bytes(algo: str, g: ConvGeom, pass_name: str, itemsize: int, per_sample: bool | None = None) -> int:
    """Bytes of the temporaries ``algo`` allocates for ``pass_name`` on geometry ``g``."""
    if algo == "fft":
        return fft_bytes(g, pass_name, itemsize)
    if algo == "im2col":
        return im2col_elems(g, pass_name, per_sample) * itemsize
    if algo == "winograd":
        return winograd_elems(g, pass_name) * itemsize
    return direct_elems(g, pass_name) * itemsize
