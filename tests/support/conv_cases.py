"""The convolution test cases: a naive loop reference (float64), the geometries every algorithm is
checked on, and their random data (shared by the tests/unit/kernels/test_kernels_conv_*.py files)."""

from __future__ import annotations

import numpy as np

from kernels.conv import CONV_ALGORITHMS, conv_applicable, conv_output_hw


# ---------------------------------------------------------------------------------------------
# naive reference: loops over output pixels, windows contracted with einsum


def _pad(x, p):
    t, b, l, r = p
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))


def _window(xp_, a, b, kh, kw, s, d):
    return (slice(a * s[0], a * s[0] + d[0] * (kh - 1) + 1, d[0]),
            slice(b * s[1], b * s[1] + d[1] * (kw - 1) + 1, d[1]))


def naive_forward(x, w, bias, s, p, d, groups):
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp_ = _pad(x, p)
    ho = (h + p[0] + p[1] - d[0] * (kh - 1) - 1) // s[0] + 1
    wo = (wd + p[2] + p[3] - d[1] * (kw - 1) - 1) // s[1] + 1
    fg = f // groups
    y = np.zeros((n, f, ho, wo))
    for gi in range(groups):
        for a in range(ho):
            for b in range(wo):
                rs, cs = _window(xp_, a, b, kh, kw, s, d)
                win = xp_[:, gi * cg:(gi + 1) * cg, rs, cs]
                y[:, gi * fg:(gi + 1) * fg, a, b] = np.einsum("nckl,fckl->nf", win, w[gi * fg:(gi + 1) * fg])
    if bias is not None:
        y += bias[None, :, None, None]
    return y


def naive_backward(dy, x, w, s, p, d, groups):
    n, c, h, wd = x.shape
    f, cg, kh, kw = w.shape
    xp_ = _pad(x, p)
    dxp = np.zeros_like(xp_)
    dw = np.zeros_like(w)
    fg = f // groups
    for gi in range(groups):
        fs, csl = slice(gi * fg, (gi + 1) * fg), slice(gi * cg, (gi + 1) * cg)
        for a in range(dy.shape[2]):
            for b in range(dy.shape[3]):
                rs, cs = _window(xp_, a, b, kh, kw, s, d)
                dxp[:, csl, rs, cs] += np.einsum("nf,fckl->nckl", dy[:, fs, a, b], w[fs])
                dw[fs] += np.einsum("nf,nckl->fckl", dy[:, fs, a, b], xp_[:, csl, rs, cs])
    dx = dxp[:, :, p[0]:p[0] + h, p[2]:p[2] + wd]
    return dx, dw, dy.sum(axis=(0, 2, 3))


# (x_shape, w_shape, stride, padding (t, b, l, r), dilation, groups)
CASES = {
    "3x3-asympad": ((2, 3, 7, 8), (4, 3, 3, 3), (1, 1), (1, 0, 2, 1), (1, 1), 1),
    "3x3-groups2": ((2, 4, 9, 7), (6, 2, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 2),
    "3x3-odd-widepad": ((1, 2, 5, 11), (3, 2, 3, 3), (1, 1), (2, 0, 0, 2), (1, 1), 1),
    "3x3-even-nopad": ((2, 3, 6, 6), (2, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "3x2-stride2": ((2, 3, 9, 8), (4, 3, 3, 2), (2, 2), (0, 1, 1, 0), (1, 1), 1),
    "stride(2,1)-groups2": ((1, 4, 8, 7), (4, 2, 3, 3), (2, 1), (1, 1, 0, 2), (1, 1), 2),
    "3x3-dilation2": ((1, 2, 10, 9), (3, 2, 3, 3), (1, 1), (2, 1, 0, 2), (2, 2), 1),
    "1x1": ((2, 2, 6, 5), (3, 2, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    "5x5-pad2": ((2, 3, 8, 9), (4, 3, 5, 5), (1, 1), (2, 2, 2, 2), (1, 1), 1),
    "3x3-dil2-stride2-g2": ((2, 4, 11, 10), (2, 2, 3, 3), (2, 2), (1, 2, 2, 1), (2, 2), 2),
}


def _applicable(algo, case):
    _, ws, s, _, d, gr = case
    return conv_applicable(algo, ws[2], ws[3], s, d, gr)


PAIRS = [(a, k) for k in CASES for a in CONV_ALGORITHMS if _applicable(a, CASES[k])]


def _data(case, seed=0, dtype=np.float64):
    xs, ws, s, p, d, gr = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs)
    w = rng.standard_normal(ws)
    b = rng.standard_normal(ws[0])
    ho, wo = conv_output_hw(xs[2], xs[3], ws[2], ws[3], s, p, d)
    dy = rng.standard_normal((xs[0], ws[0], ho, wo))
    return tuple(a.astype(dtype) for a in (x, w, b, dy))


def _rel(a, ref):
    return float(np.abs(np.asarray(a, np.float64) - ref).max() / np.abs(ref).max())
