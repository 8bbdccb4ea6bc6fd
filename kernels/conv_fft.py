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
plus, for float16, float32 copies of the two operands. FFT library internals are not counted.
  bwd_weights padded x, DY padded real, X, DY, their frequency-major copies, DW (S*F*Cg),
              DW reordered (F*Cg*S), dw spread real (F*Cg*Hp*Wp)
"""

from __future__ import annotations

from kernels._conv_common import ConvGeom, note, pad_input
from kernels.xp import module_of


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
    out = module_of(a).fft.rfft2(a, s=(g.hp, g.wp), axes=(-2, -1))
    note(trace, out)
    return out


def forward(x, w, g: ConvGeom, trace=None):
    xp = module_of(x)
    cdt = _compute_dtype(xp, x.dtype)
    xc, wc = _cast_in(x, w, cdt, trace)
    x_pad = pad_input(xc, g, trace)
    ws = _spread_w(wc, g, trace)
    X = _rfft(x_pad, g, trace).reshape(g.n, g.groups, g.cg, g.hp, -1)
    W = _rfft(ws, g, trace).reshape(g.groups, g.fg, g.cg, g.hp, -1).transpose(2, 0, 1, 3, 4)
    hs, wsz = X.shape[-2:]
    Xf = _freq_major(X, trace)                                  # (S, G, N, Cg)
    Wf = _freq_major(W, trace)                                  # (S, G, Cg, Fg)
    xp.conj(Wf, out=Wf)                                         # correlation: X * conj(W)
    Yf = xp.matmul(Xf, Wf)                                      # (S, G, N, Fg)
    note(trace, Yf)
    Y = _back_to_nchw(Yf, g.n, g.f, hs, wsz, trace)
    y_full = xp.fft.irfft2(Y, s=(g.hp, g.wp), axes=(-2, -1))
    note(trace, y_full)
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
    ws = _spread_w(wc, g, trace)
    dy_full = _dy_padded(dyc, g, trace)
    DY = _rfft(dy_full, g, trace).reshape(g.n, g.groups, g.fg, g.hp, -1)
    W = _rfft(ws, g, trace).reshape(g.groups, g.fg, g.cg, g.hp, -1).transpose(1, 0, 2, 3, 4)
    hs, wsz = DY.shape[-2:]
    DYf = _freq_major(DY, trace)                                # (S, G, N, Fg)
    Wf = _freq_major(W, trace)                                  # (S, G, Fg, Cg) after transpose
    DXf = xp.matmul(DYf, Wf)                                    # (S, G, N, Cg)
    note(trace, DXf)
    DX = _back_to_nchw(DXf, g.n, g.c, hs, wsz, trace)
    dx_pad = xp.fft.irfft2(DX, s=(g.hp, g.wp), axes=(-2, -1))
    if g.padded or dx_pad.dtype != dy.dtype:
        note(trace, dx_pad)
    if g.padded:
        dx_pad = dx_pad[:, :, g.pt:g.pt + g.h, g.pl:g.pl + g.w]
    return xp.ascontiguousarray(dx_pad, dtype=dy.dtype)


def backward_weights(dy, x, g: ConvGeom, trace=None):
    xp = module_of(dy)
    cdt = _compute_dtype(xp, dy.dtype)
    dyc, xc = _cast_in(dy, x, cdt, trace)
    x_pad = pad_input(xc, g, trace)
    dy_full = _dy_padded(dyc, g, trace)
    X = _rfft(x_pad, g, trace).reshape(g.n, g.groups, g.cg, g.hp, -1)
    DY = _rfft(dy_full, g, trace).reshape(g.n, g.groups, g.fg, g.hp, -1)
    hs, wsz = X.shape[-2:]
    Xf = _freq_major(X, trace)                                  # (S, G, N, Cg)
    DYf = _freq_major(DY.transpose(2, 1, 0, 3, 4), trace)       # (S, G, Fg, N)
    xp.conj(DYf, out=DYf)                                       # correlation: conj(DY) * X
    DWf = xp.matmul(DYf, Xf)                                    # (S, G, Fg, Cg)
    note(trace, DWf)
    DW = xp.ascontiguousarray(DWf.transpose(1, 2, 3, 0)).reshape(g.f, g.cg, hs, wsz)
    note(trace, DW)
    dw_full = xp.fft.irfft2(DW, s=(g.hp, g.wp), axes=(-2, -1))
    note(trace, dw_full)
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
