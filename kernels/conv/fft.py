"""FFT convolution: y = F^-1( sum_c F(x_c) o conj(F(w_fc)) ), after Section 5.2 and Algorithm 5
(Appendix B.3) of Ben-Nun and Hoefler, "Demystifying Parallel and Distributed Deep Learning" (ACM
Computing Surveys, 2019), with the per-frequency channel sum done as a batched complex GEMM (the
"practical implementation" paragraph of B.3; docs/kernels.md).

All three passes use real FFTs of the padded input size Hp x Wp, which is exactly large enough:
  fwd          correlation x (*) w: circular indices a + i <= Hp - 1 never wrap for valid outputs
  bwd_data     full convolution dy * w: wrapped indices land outside dy's support (zeros)
  bwd_weights  correlation x (*) dy: a + i <= Ho - 1 + KHe - 1 = Hp - 1 never wraps
Dilation is handled by spreading the kernel (zeros between taps) before its transform; groups are a
batch dimension of the GEMM. Stride must be 1 (``conv_applicable``): a strided FFT convolution would
compute the full stride-1 output and throw most of it away.

float16 input is computed in float32 (numpy's FFT has no half precision) and cast back.

Buffers (the workspace, see ``conv_workspace_bytes``), with S = Hp * (Wp // 2 + 1) complex points:
  fwd         padded x (if padded), spread w (if dilated), X (N*C*S), W (F*Cg*S),
              X, W frequency-major copies, Y (S*N*F) frequency-major, Y reordered (N*F*S),
              y before cropping (N*F*Hp*Wp real)
  bwd_data    spread w, DY padded (N*F*Hp*Wp real), DY, W, their frequency-major copies, DX (S*N*C),
              DX reordered (N*C*S), dx padded real (N*C*Hp*Wp, if padded or float16)
  bwd_weights padded x, DY padded real, X, DY, their frequency-major copies, DW (S*F*Cg),
              DW reordered (F*Cg*S), dw spread real (F*Cg*Hp*Wp)
plus, in every pass, each forward transform's rows spectrum (its operand's rows x (Wp // 2 + 1)
complex) and each inverse transform's column pass (its spectrum's size), and, for float16, float32
copies of the two operands. FFT library internals (plans, scratch outside NumPy arrays) are not
counted.
"""

from __future__ import annotations

from kernels.conv.buffers import let_go, note, pad_input
from kernels.xp import module_of
from networks.ops.conv_geometry import ConvGeom


def _compute_dtype(xp, dtype):
    return xp.float32 if dtype == xp.float16 else dtype


def _spread_w(w, g: ConvGeom, trace=None):
    """Weights with dilation zeros between taps: (F, Cg, KHe, KWe); ``w`` itself when undilated."""
    if g.dh == 1 and g.dw == 1:
        return w
    xp = module_of(w)
    out = xp.zeros((g.f, g.cg, g.khe, g.kwe), dtype=w.dtype)
    out[:, :, ::g.dh, ::g.dw] = w
    note(trace, out)
    return out


def _freq_major(spec, trace=None):
    """(B, G, M, Hs, Ws) spectrum -> contiguous (Hs*Ws, G, B, M) for the batched GEMM."""
    xp = module_of(spec)
    b, gr, m, hs, ws = spec.shape
    out = xp.ascontiguousarray(spec.reshape(b, gr, m, hs * ws).transpose(3, 1, 0, 2))
    note(trace, out)
    return out


def _back_to_nchw(prod, b, m, hs, ws, trace=None):
    """(S, G, B, Mg) product -> contiguous (B, G*Mg, Hs, Ws) spectrum."""
    xp = module_of(prod)
    out = xp.ascontiguousarray(prod.transpose(2, 1, 3, 0)).reshape(b, m, hs, ws)
    note(trace, out)
    return out


def _rfft(a, g: ConvGeom, trace=None):
    """The unscaled real 2-D FFT at the padded size Hp x Wp, as its two 1-D passes (rows, then
    columns; the rows' spectrum is a buffer of its own, let go once the columns are done). Each
    pass is taken scaled by 1/n and scaled back: NumPy (2.x) runs an unscaled single-precision
    forward transform through double precision, holding about four more copies of its result
    (docs/kernels.md, "Convolution")."""
    xp = module_of(a)
    rows = xp.fft.rfft(a, n=g.wp, axis=-1, norm="forward")
    note(trace, rows)
    out = xp.fft.fft(rows, n=g.hp, axis=-2, norm="forward")
    note(trace, out)
    let_go(trace, rows)
    out *= g.hp * g.wp
    return out


def _irfft(spec, g: ConvGeom, trace=None, workspace: bool = True):
    """The inverse of :func:`_rfft`, scaled by 1/(Hp Wp), as its two 1-D passes (columns, then
    rows; the columns' result is a buffer of its own). ``workspace``: whether the real result is
    a buffer of the pass (cropped or cast afterwards) rather than the pass's own result."""
    xp = module_of(spec)
    cols = xp.fft.ifft(spec, n=g.hp, axis=-2)
    note(trace, cols)
    out = xp.fft.irfft(cols, n=g.wp, axis=-1)
    if workspace:
        note(trace, out)
    let_go(trace, cols)
    return out


def _spectrum(original, cast, prepare, g: ConvGeom, trace):
    """The transform of an operand made ready by ``prepare`` (padded, spread or zero-extended)
    from its cast copy; the ready copy and the cast copy are let go (the caller drops its own
    reference to ``cast``)."""
    ready = prepare(cast, g, trace)
    spec = _rfft(ready, g, trace)
    if ready is not cast:
        let_go(trace, ready)
    if cast is not original:
        let_go(trace, cast)
    return spec


def _freq(spec, shape, order, trace):
    """A spectrum reshaped to ``shape`` with its axes in ``order``, copied frequency-major; the
    spectrum let go (the caller drops its reference)."""
    out = _freq_major(spec.reshape(shape).transpose(order), trace)
    let_go(trace, spec)
    return out


def _product(a, b, trace):
    """The per-frequency GEMM, its two operands let go."""
    out = module_of(a).matmul(a, b)
    note(trace, out)
    let_go(trace, a)
    let_go(trace, b)
    return out


def forward(x, w, g: ConvGeom, trace=None):
    xp = module_of(x)
    xc, wc = _cast_in(x, w, _compute_dtype(xp, x.dtype), trace)
    X = _spectrum(x, xc, pad_input, g, trace)
    del xc
    W = _spectrum(w, wc, _spread_w, g, trace)
    del wc
    hs, wsz = X.shape[-2:]
    Xf = _freq(X, (g.n, g.groups, g.cg, g.hp, -1), (0, 1, 2, 3, 4), trace)     # (S, G, N, Cg)
    del X
    Wf = _freq(W, (g.groups, g.fg, g.cg, g.hp, -1), (2, 0, 1, 3, 4), trace)    # (S, G, Cg, Fg)
    del W
    xp.conj(Wf, out=Wf)                                                        # correlation: X * conj(W)
    Yf = _product(Xf, Wf, trace)                                               # (S, G, N, Fg)
    del Xf, Wf
    Y = _back_to_nchw(Yf, g.n, g.f, hs, wsz, trace)
    let_go(trace, Yf)
    del Yf
    y_full = _irfft(Y, g, trace)
    let_go(trace, Y)
    del Y
    return xp.ascontiguousarray(y_full[:, :, :g.ho, :g.wo], dtype=x.dtype)


def _dy_padded(dyc, g: ConvGeom, trace=None):
    """``dy`` zero-extended to the padded input's size, where its FFT meets the input's and weights'."""
    out = module_of(dyc).zeros((g.n, g.f, g.hp, g.wp), dtype=dyc.dtype)
    out[:, :, :g.ho, :g.wo] = dyc
    note(trace, out)
    return out


def backward_data(dy, w, g: ConvGeom, trace=None):
    xp = module_of(dy)
    cdt = _compute_dtype(xp, dy.dtype)
    dyc, wc = _cast_in(dy, w, cdt, trace)
    DY = _spectrum(dy, dyc, _dy_padded, g, trace)
    del dyc
    W = _spectrum(w, wc, _spread_w, g, trace)
    del wc
    hs, wsz = DY.shape[-2:]
    DYf = _freq(DY, (g.n, g.groups, g.fg, g.hp, -1), (0, 1, 2, 3, 4), trace)   # (S, G, N, Fg)
    del DY
    Wf = _freq(W, (g.groups, g.fg, g.cg, g.hp, -1), (1, 0, 2, 3, 4), trace)    # (S, G, Fg, Cg)
    del W
    DXf = _product(DYf, Wf, trace)                                             # (S, G, N, Cg)
    del DYf, Wf
    DX = _back_to_nchw(DXf, g.n, g.c, hs, wsz, trace)
    let_go(trace, DXf)
    del DXf
    dx_pad = _irfft(DX, g, trace, workspace=g.padded or cdt != dy.dtype)
    let_go(trace, DX)
    del DX
    if g.padded:
        dx_pad = dx_pad[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
    return xp.ascontiguousarray(dx_pad, dtype=dy.dtype)


def backward_weights(dy, x, g: ConvGeom, trace=None):
    xp = module_of(dy)
    dyc, xc = _cast_in(dy, x, _compute_dtype(xp, dy.dtype), trace)
    X = _spectrum(x, xc, pad_input, g, trace)
    del xc
    DY = _spectrum(dy, dyc, _dy_padded, g, trace)
    del dyc
    hs, wsz = X.shape[-2:]
    Xf = _freq(X, (g.n, g.groups, g.cg, g.hp, -1), (0, 1, 2, 3, 4), trace)     # (S, G, N, Cg)
    del X
    DYf = _freq(DY, (g.n, g.groups, g.fg, g.hp, -1), (2, 1, 0, 3, 4), trace)   # (S, G, Fg, N)
    del DY
    xp.conj(DYf, out=DYf)                                                      # correlation: conj(DY) * X
    DWf = _product(DYf, Xf, trace)                                             # (S, G, Fg, Cg)
    del DYf, Xf
    DW = xp.ascontiguousarray(DWf.transpose(1, 2, 3, 0)).reshape(g.f, g.cg, hs, wsz)
    note(trace, DW)
    let_go(trace, DWf)
    del DWf
    dw_full = _irfft(DW, g, trace)
    let_go(trace, DW)
    del DW
    dw = dw_full[:, :, :g.khe:g.dh, :g.kwe:g.dw]
    return xp.ascontiguousarray(dw, dtype=dy.dtype)


def _cast_in(a, b, cdt, trace):
    """Cast two operands to the compute dtype (only float16 is cast; the copies are workspace)."""
    if a.dtype == cdt and b.dtype == cdt:
        return a, b
    a2, b2 = a.astype(cdt), b.astype(cdt)
    note(trace, a2)
    note(trace, b2)
    return a2, b2
