"""The temporary buffers each convolution algorithm allocates, beyond its inputs and its result,
for each pass (pure): one closed form per algorithm, read off the kernels' implementations
(kernels/conv/direct.py, im2col.py, fft.py, winograd.py list their buffers in their
docstrings). The kernels report the same sum through their ``trace`` argument and the tests check
that the two agree; the cost model counts a layer's workspace from here, so what it predicts is
what the kernels allocate (the largest temporaries; O(F*C) per-offset scratch and library
internals, BLAS or FFT plans, are not counted).
"""

from __future__ import annotations

from networks.ops.conv_geometry import ConvGeom, make_geom

#: Largest per-sample weight-gradient buffer (N*F*Cg*KH*KW elements) for which im2col's weight
#: gradient makes one GEMM per sample and sums them; above it, one GEMM with the batch folded into
#: the reduction. Small buffers favour the per-sample GEMMs (the folded one is then very long and
#: thin); large ones the folded GEMM, which writes no per-sample buffer to sum. The crossover was
#: chosen with ``python bench/kernels/bench_im2col_weight_grad.py`` (figures: docs/kernels.md, "Convolution").
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
    """Padded input and the column matrix; the weight gradient then lets the padded input go and
    adds its per-sample products or, folding the batch, a reordered copy of dy (``per_sample``:
    which, by default :func:`per_sample_products`). The most held at once."""
    pad = g.n * g.c * g.hp * g.wp if g.padded else 0
    cols = g.n * g.c * g.kh * g.kw * g.ho * g.wo
    if pass_name in ("fwd", "bwd_data"):
        return pad + cols
    # the padded input is let go once the columns are built, before the products or dy's copy
    if per_sample_products(g) if per_sample is None else per_sample:
        return cols + max(pad, g.n * g.f * g.cg * g.kh * g.kw)
    return cols + max(pad, g.n * g.f * g.ho * g.wo)


def fft_events(g: ConvGeom, pass_name: str, itemsize: int) -> list[int]:
    """The bytes of each buffer the FFT algorithm allocates (positive) and lets go (negative), in
    the order it does (kernels/conv/fft.py): the operands cast (float16 runs in float32), padded or
    spread; each operand's spectrum through its rows' spectrum; the frequency-major copies; their
    product; the product reordered; the inverse through its column pass."""
    half = itemsize == 2
    isz = 4 if half else itemsize              # real compute itemsize
    csz = 2 * isz                              # complex itemsize
    s = g.hp * (g.wp // 2 + 1)
    nx, nw, ny = g.n * g.c * s * csz, g.f * g.cg * s * csz, g.n * g.f * s * csz
    w_rows = g.f * g.cg * g.khe * (g.wp // 2 + 1) * csz
    pad_x = g.n * g.c * g.hp * g.wp * isz if g.padded else 0
    spread = g.f * g.cg * g.khe * g.kwe * isz if (g.dh, g.dw) != (1, 1) else 0
    dy_full = g.n * g.f * g.hp * g.wp * isz
    cast_x, cast_w = g.n * g.c * g.h * g.w * isz, g.f * g.cg * g.kh * g.kw * isz
    cast_dy = g.n * g.f * g.ho * g.wo * isz

    def transform(copies: list[int], rows: int, spectrum: int) -> list[int]:
        """An operand's extra copies, its rows' spectrum and spectrum, then the copies let go."""
        kept = [b for b in copies if b]
        return kept + [rows, spectrum, -rows] + [-b for b in kept]

    def product(a: int, b: int, out: int) -> list[int]:
        """Frequency-major copies of the spectra a and b (as large), their product, a and b let
        go, the product reordered and let go."""
        return [a, -a, b, -b, out, -a, -b, out, -out]

    def inverse(spectrum: int, real: int) -> list[int]:
        return [spectrum, real, -spectrum] if real else [spectrum, -spectrum]

    if pass_name == "fwd":
        cx, cw = (cast_x, cast_w) if half else (0, 0)
        ev = [cx, cw] if half else []
        ev += transform([pad_x], nx, nx) + ([-cx] if half else [])
        ev += transform([spread], w_rows, nw) + ([-cw] if half else [])
        ev += product(nx, nw, ny)
        return ev + inverse(ny, g.n * g.f * g.hp * g.wp * isz) + [-ny]
    if pass_name == "bwd_data":
        cdy, cw = (cast_dy, cast_w) if half else (0, 0)
        ev = [cdy, cw] if half else []
        ev += transform([dy_full], ny, ny) + ([-cdy] if half else [])
        ev += transform([spread], w_rows, nw) + ([-cw] if half else [])
        ev += product(ny, nw, nx)
        dx_pad = g.n * g.c * g.hp * g.wp * isz if (g.padded or half) else 0
        return ev + inverse(nx, dx_pad) + [-nx]
    cdy, cx = (cast_dy, cast_x) if half else (0, 0)
    ev = [cdy, cx] if half else []
    ev += transform([pad_x], nx, nx) + ([-cx] if half else [])
    ev += transform([dy_full], ny, ny) + ([-cdy] if half else [])
    ev += [nx, -nx, ny, -ny, nw, -ny, -nx, nw, -nw]  # the product takes dy's spectrum first
    return ev + inverse(nw, g.f * g.cg * g.hp * g.wp * isz) + [-nw]


def peak(events: list[int]) -> int:
    """The largest running sum of allocations (positive) and releases (negative)."""
    run = top = 0
    for b in events:
        run += b
        top = max(top, run)
    return top


def fft_bytes(g: ConvGeom, pass_name: str, itemsize: int) -> int:
    """The most the FFT algorithm holds at once in ``pass_name`` (bytes; :func:`fft_events`)."""
    return peak(fft_events(g, pass_name, itemsize))


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
