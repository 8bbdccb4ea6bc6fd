"""Convolution kernels: every algorithm and pass against a naive loop reference (float64),
finite-difference gradient checks, float32 accuracy, workspace accounting, backends."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernels import conv_winograd
from kernels._conv_common import make_geom
from kernels.conv import (CONV_ALGORITHMS, PASS_FALLBACK, conv2d_backward_data,
                                   conv2d_backward_weights, conv2d_forward, conv_applicable,
                                   conv_output_hw, conv_workspace_bytes, kernel_run)
from kernels.xp import array_module, gpu_available

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


def test_every_algorithm_is_tested_on_several_cases():
    for algo in CONV_ALGORITHMS:
        assert sum(1 for a, _ in PAIRS if a == algo) >= 4, algo


def test_applicability_table():
    assert all(conv_applicable(a, 5, 3, (2, 1), (2, 2), 4) for a in ("direct", "im2col"))
    assert conv_applicable("fft", 5, 5, 1, 2, 2)
    assert not conv_applicable("fft", 3, 3, (2, 2), 1, 1)
    assert conv_applicable("winograd", 3, 3, 1, 1, 2)
    for kh, kw, s, d in ((5, 5, 1, 1), (3, 3, 2, 1), (3, 3, 1, 2), (3, 1, 1, 1)):
        assert not conv_applicable("winograd", kh, kw, s, d, 1)
    assert not conv_applicable("nonsense", 3, 3, 1, 1, 1)


def test_inapplicable_algorithm_raises():
    x, w = np.zeros((1, 1, 8, 8)), np.zeros((1, 1, 5, 5))
    with pytest.raises(ValueError, match="winograd"):
        conv2d_forward(x, w, algo="winograd")
    with pytest.raises(ValueError, match="fft"):
        conv2d_forward(x, w, stride=(2, 2), algo="fft")


def test_no_pass_falls_back():
    assert PASS_FALLBACK == {}
    for a in CONV_ALGORITHMS:
        for p in ("fwd", "bwd_data", "bwd_weights"):
            assert kernel_run(a, p) == a


def test_output_hw_matches_pytorch_formula():
    assert conv_output_hw(224, 224, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1)) == (112, 112)
    assert conv_output_hw(10, 9, 3, 3, (1, 1), (2, 1, 0, 2), (2, 2)) == (9, 7)
    assert conv_output_hw(8, 8, 3, 3, (2, 2), (0, 1, 0, 0), (1, 1)) == (4, 3)


@pytest.mark.parametrize("algo,case", PAIRS)
def test_forward_matches_naive(algo, case):
    xs, ws, s, p, d, gr = CASES[case]
    x, w, b, _ = _data(CASES[case])
    ref = naive_forward(x, w, b, s, p, d, gr)
    y = conv2d_forward(x, w, b, s, p, d, gr, algo)
    assert y.shape == ref.shape and y.dtype == np.float64
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)
    y0 = conv2d_forward(x, w, None, s, p, d, gr, algo)
    np.testing.assert_allclose(y0, ref - b[None, :, None, None], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("algo,case", PAIRS)
def test_backward_matches_naive(algo, case):
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, dy = _data(CASES[case])
    rdx, rdw, rdb = naive_backward(dy, x, w, s, p, d, gr)
    dx = conv2d_backward_data(dy, w, x.shape, s, p, d, gr, algo)
    dw, db = conv2d_backward_weights(dy, x, w.shape, s, p, d, gr, algo, with_bias=True)
    assert dx.shape == x.shape and dw.shape == w.shape
    np.testing.assert_allclose(dx, rdx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(dw, rdw, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(db, rdb, rtol=1e-12)
    assert conv2d_backward_weights(dy, x, w.shape, s, p, d, gr, algo, with_bias=False)[1] is None


@pytest.mark.parametrize("case", [k for a, k in PAIRS if a == "im2col"])
def test_im2col_weight_gradient_folds_the_batch_when_per_sample_buffers_would_be_large(case, monkeypatch):
    """im2col's weight gradient has two forms (conv_im2col.per_sample_weight_grads): the small
    cases above take the per-sample one; forced to fold the batch into one GEMM, every case still
    equals the naive gradient and its traced buffers still equal the workspace formula."""
    from kernels import conv_im2col
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, dy = _data(CASES[case])
    assert conv_im2col.per_sample_weight_grads(make_geom(xs, ws, s, p, d, gr))
    monkeypatch.setattr(conv_im2col, "PER_SAMPLE_MAX_ELEMS", 0)
    assert not conv_im2col.per_sample_weight_grads(make_geom(xs, ws, s, p, d, gr))
    trace: list[int] = []
    dw, _ = conv2d_backward_weights(dy, x, ws, s, p, d, gr, "im2col", trace=trace)
    np.testing.assert_allclose(dw, naive_backward(dy, x, w, s, p, d, gr)[1], rtol=1e-10, atol=1e-10)
    assert sum(trace) == conv_workspace_bytes("im2col", xs, ws, s, p, d, gr, 8, pass_name="bwd_weights")


def test_im2col_weight_gradient_forms_agree_above_the_threshold(monkeypatch):
    from kernels import conv_im2col
    xs, ws = (2, 64, 5, 4), (64, 32, 3, 3)  # 2 groups; 2*64*32*9 = 36864 per-sample elements
    x, w, _, dy = _data((xs, ws, (1, 1), (1, 1, 1, 1), (1, 1), 2), dtype=np.float32)
    monkeypatch.setattr(conv_im2col, "PER_SAMPLE_MAX_ELEMS", 30000)
    assert not conv_im2col.per_sample_weight_grads(make_geom(xs, ws, (1, 1), (1, 1, 1, 1), (1, 1), 2))
    folded = conv2d_backward_weights(dy, x, ws, (1, 1), (1, 1, 1, 1), (1, 1), 2, "im2col")[0]
    monkeypatch.setattr(conv_im2col, "PER_SAMPLE_MAX_ELEMS", 40000)
    per_sample = conv2d_backward_weights(dy, x, ws, (1, 1), (1, 1, 1, 1), (1, 1), 2, "im2col")[0]
    assert folded.dtype == np.float32
    assert _rel(folded, per_sample.astype(np.float64)) < 1e-5


FD_CASES = ["3x3-asympad", "3x3-groups2", "3x3-dil2-stride2-g2", "5x5-pad2", "3x3-even-nopad"]


@pytest.mark.parametrize("algo,case", [(a, k) for a, k in PAIRS if k in FD_CASES])
def test_gradients_by_finite_differences(algo, case):
    """<grad, direction> against a central difference of L = <r, conv(x, w)> along a random direction."""
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, r = _data(CASES[case], seed=1)
    rng = np.random.default_rng(2)
    vx, vw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)

    def loss(xx, ww):
        return float(np.sum(r * conv2d_forward(xx, ww, None, s, p, d, gr, algo)))

    eps = 1e-6
    dx = conv2d_backward_data(r, w, x.shape, s, p, d, gr, algo)
    dw, _ = conv2d_backward_weights(r, x, w.shape, s, p, d, gr, algo)
    fd_x = (loss(x + eps * vx, w) - loss(x - eps * vx, w)) / (2 * eps)
    fd_w = (loss(x, w + eps * vw) - loss(x, w - eps * vw)) / (2 * eps)
    assert np.sum(dx * vx) == pytest.approx(fd_x, rel=1e-6)
    assert np.sum(dw * vw) == pytest.approx(fd_w, rel=1e-6)


# float32 accuracy on the shape recorded in docs/kernels.md: N=4, C=F=32, 28x28, 3x3, pad 1, seed 0.
# Measured max relative errors (max|err| / max|ref|) were: direct <= 1.8e-7, im2col <= 7.2e-7,
# fft <= 3.5e-7, winograd F(2x2,3x3) <= 3.5e-7, F(4x4,3x3) <= 4.1e-6. Tolerances sit ~5-10x above.
F32_TOL = {"direct": 2e-6, "im2col": 5e-6, "fft": 3e-6, "winograd": 3e-6}


def _f32_problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 32, 28, 28))
    w = rng.standard_normal((32, 32, 3, 3)) / np.sqrt(32 * 9)
    dy = rng.standard_normal((4, 32, 28, 28))
    geo = ((1, 1), (1, 1, 1, 1), (1, 1), 1)
    ref = (conv2d_forward(x, w, None, *geo, "direct"),
           conv2d_backward_data(dy, w, x.shape, *geo, "direct"),
           conv2d_backward_weights(dy, x, w.shape, *geo, "direct")[0])
    return x, w, dy, geo, ref


@pytest.fixture(scope="module")
def f32_problem():
    return _f32_problem()


@pytest.mark.parametrize("algo", CONV_ALGORITHMS)
def test_float32_error_within_measured_bound(algo, f32_problem):
    x, w, dy, geo, (ry, rdx, rdw) = f32_problem
    x32, w32, dy32 = (a.astype(np.float32) for a in (x, w, dy))
    y = conv2d_forward(x32, w32, None, *geo, algo)
    dx = conv2d_backward_data(dy32, w32, x.shape, *geo, algo)
    dw, _ = conv2d_backward_weights(dy32, x32, w.shape, *geo, algo)
    assert y.dtype == dx.dtype == dw.dtype == np.float32
    tol = F32_TOL[algo]
    assert _rel(y, ry) < tol and _rel(dx, rdx) < tol and _rel(dw, rdw) < tol


def test_winograd_f4x4_bonus_tile(f32_problem):
    """F(4x4, 3x3) is exact in float64 and measurably less accurate than F(2x2, 3x3) in float32."""
    x, w, dy, geo, (ry, rdx, rdw) = f32_problem
    g = make_geom(x.shape, w.shape, *geo)
    np.testing.assert_allclose(conv_winograd.forward(x, w, g, m=4), ry, atol=1e-10)
    np.testing.assert_allclose(conv_winograd.backward_data(dy, w, g, m=4), rdx, atol=1e-10)
    np.testing.assert_allclose(conv_winograd.backward_weights(dy, x, g, m=4), rdw, atol=1e-9)
    x32, w32, dy32 = (a.astype(np.float32) for a in (x, w, dy))
    e4 = _rel(conv_winograd.forward(x32, w32, g, m=4), ry)
    e2 = _rel(conv_winograd.forward(x32, w32, g, m=2), ry)
    assert e2 < e4 < 3e-5
    # odd sizes (tiles cropped) and groups
    xs, ws, s, p, d, gr = CASES["3x3-groups2"]
    x, w, _, dy = _data(CASES["3x3-groups2"])
    g = make_geom(xs, ws, s, p, d, gr)
    rdx, rdw, _ = naive_backward(dy, x, w, s, p, d, gr)
    np.testing.assert_allclose(conv_winograd.forward(x, w, g, m=4), naive_forward(x, w, None, s, p, d, gr),
                               atol=1e-10)
    np.testing.assert_allclose(conv_winograd.backward_data(dy, w, g, m=4), rdx, atol=1e-10)
    np.testing.assert_allclose(conv_winograd.backward_weights(dy, x, g, m=4), rdw, atol=1e-10)


def test_winograd_transforms_are_built_once_and_cannot_be_changed():
    """The cached transform matrices are shared by every call: one call writing into them would
    corrupt every later convolution, so they are read-only; the rotated-filter transform reverses
    G (x) G's columns."""
    first = conv_winograd._kron(np, np.float32, 2)
    assert all(a is b for a, b in zip(first, conv_winograd._kron(np, np.float32, 2)))
    assert all(not k.flags.writeable for k in first)
    with pytest.raises(ValueError):
        first[1][0, 0] = 0.0
    np.testing.assert_array_equal(first[5], first[1][:, ::-1])
    assert conv_winograd._kron(np, np.float64, 2)[0].dtype == np.float64


@pytest.mark.parametrize("algo", CONV_ALGORITHMS)
def test_float16_runs_and_is_close(algo):
    x, w, b, dy = _data(CASES["3x3-asympad"], seed=3)
    xs, ws, s, p, d, gr = CASES["3x3-asympad"]
    h = [a.astype(np.float16) for a in (x, w, b, dy)]
    y = conv2d_forward(h[0], h[1], h[2], s, p, d, gr, algo)
    dx = conv2d_backward_data(h[3], h[1], x.shape, s, p, d, gr, algo)
    dw, db = conv2d_backward_weights(h[3], h[0], w.shape, s, p, d, gr, algo, with_bias=True)
    assert y.dtype == dx.dtype == dw.dtype == np.float16
    rdx, rdw, _ = naive_backward(dy, x, w, s, p, d, gr)
    assert _rel(y, naive_forward(x, w, b, s, p, d, gr)) < 1e-2
    assert _rel(dx, rdx) < 1e-2 and _rel(dw, rdw) < 1e-2


@pytest.mark.parametrize("algo", CONV_ALGORITHMS)
def test_deterministic(algo):
    x, w, b, dy = _data(CASES["3x3-groups2"], seed=4, dtype=np.float32)
    xs, ws, s, p, d, gr = CASES["3x3-groups2"]
    runs = [(conv2d_forward(x, w, b, s, p, d, gr, algo),
             conv2d_backward_data(dy, w, xs, s, p, d, gr, algo),
             conv2d_backward_weights(dy, x, ws, s, p, d, gr, algo)[0]) for _ in range(2)]
    for a, b2 in zip(*runs):
        assert np.array_equal(a, b2)


# ---------------------------------------------------------------------------------------------
# workspace accounting


def test_im2col_workspace_is_the_column_buffer():
    x, w = np.zeros((3, 5, 9, 8), np.float32), np.zeros((7, 5, 3, 2), np.float32)
    ho, wo = conv_output_hw(9, 8, 3, 2, (2, 1), (0, 0, 0, 0), (1, 1))
    trace: list[int] = []
    conv2d_forward(x, w, None, (2, 1), (0, 0, 0, 0), (1, 1), 1, "im2col", trace=trace)
    cols = 5 * 3 * 2 * 3 * ho * wo * 4
    assert trace == [cols]
    assert conv_workspace_bytes("im2col", x.shape, w.shape, (2, 1), (0, 0, 0, 0), (1, 1), 1, 4) == cols
    # padding adds the padded copy of the input
    padded = 3 * 5 * (9 + 3) * (8 + 1) * 4
    ho, wo = conv_output_hw(9, 8, 3, 2, (2, 1), (1, 2, 0, 1), (1, 1))
    assert conv_workspace_bytes("im2col", x.shape, w.shape, (2, 1), (1, 2, 0, 1), (1, 1), 1, 4) == \
        padded + 5 * 3 * 2 * 3 * ho * wo * 4


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("algo,case", PAIRS)
def test_workspace_formula_equals_traced_buffers(algo, case, dtype):
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, dy = _data(CASES[case], dtype=dtype)
    isz = np.dtype(dtype).itemsize
    for pass_name, run in (
        ("fwd", lambda t: conv2d_forward(x, w, None, s, p, d, gr, algo, trace=t)),
        ("bwd_data", lambda t: conv2d_backward_data(dy, w, xs, s, p, d, gr, algo, trace=t)),
        ("bwd_weights", lambda t: conv2d_backward_weights(dy, x, ws, s, p, d, gr, algo, trace=t)),
    ):
        trace: list[int] = []
        run(trace)
        expect = conv_workspace_bytes(algo, xs, ws, s, p, d, gr, isz, pass_name=pass_name)
        assert sum(trace) == expect, (pass_name, trace)


def test_workspace_orders_algorithms_sensibly():
    args = ((32, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1, 4)
    ws = {a: conv_workspace_bytes(a, *args) for a in CONV_ALGORITHMS}
    assert ws["direct"] < ws["im2col"]            # one shifted slice vs all nine
    assert ws["im2col"] > 9 * 32 * 64 * 56 * 56 * 4 - 1
    with pytest.raises(ValueError):
        conv_workspace_bytes("winograd", (1, 1, 8, 8), (1, 1, 5, 5))
    with pytest.raises(ValueError):
        conv_workspace_bytes("im2col", (1, 1, 8, 8), (1, 1, 3, 3), pass_name="backward")


# ---------------------------------------------------------------------------------------------
# property test over random geometries


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 2), cg=st.integers(1, 3), fg=st.integers(1, 3), groups=st.integers(1, 2),
       h=st.integers(3, 9), w=st.integers(3, 9), kh=st.integers(1, 3), kw=st.integers(1, 3),
       sh=st.integers(1, 2), sw=st.integers(1, 2), dh=st.integers(1, 2), dw=st.integers(1, 2),
       pads=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 2**16))
def test_random_geometries_all_algorithms_agree_with_naive(n, cg, fg, groups, h, w, kh, kw, sh, sw,
                                                           dh, dw, pads, seed):
    xs, wsh = (n, cg * groups, h, w), (fg * groups, cg, kh, kw)
    ho, wo = conv_output_hw(h, w, kh, kw, (sh, sw), pads, (dh, dw))
    if ho < 1 or wo < 1:
        return
    case = (xs, wsh, (sh, sw), pads, (dh, dw), groups)
    x, wt, b, dy = _data(case, seed)
    ry = naive_forward(x, wt, b, (sh, sw), pads, (dh, dw), groups)
    rdx, rdw, _ = naive_backward(dy, x, wt, (sh, sw), pads, (dh, dw), groups)
    for algo in CONV_ALGORITHMS:
        if not conv_applicable(algo, kh, kw, (sh, sw), (dh, dw), groups):
            continue
        np.testing.assert_allclose(conv2d_forward(x, wt, b, (sh, sw), pads, (dh, dw), groups, algo), ry,
                                   atol=1e-10, err_msg=algo)
        np.testing.assert_allclose(conv2d_backward_data(dy, wt, xs, (sh, sw), pads, (dh, dw), groups, algo),
                                   rdx, atol=1e-10, err_msg=algo)
        np.testing.assert_allclose(
            conv2d_backward_weights(dy, x, wsh, (sh, sw), pads, (dh, dw), groups, algo)[0], rdw,
            atol=1e-10, err_msg=algo)


# ---------------------------------------------------------------------------------------------
# GPU backend (skipped without cupy + CUDA)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")
@pytest.mark.parametrize("algo,case", [(a, k) for a, k in PAIRS if k in ("3x3-asympad", "3x3-groups2",
                                                                         "3x3-dil2-stride2-g2")])
def test_cupy_matches_numpy(algo, case):
    cp = array_module("cupy")
    xs, ws, s, p, d, gr = CASES[case]
    x, w, b, dy = _data(CASES[case], dtype=np.float32)
    ry = conv2d_forward(x, w, b, s, p, d, gr, algo)
    rdx = conv2d_backward_data(dy, w, xs, s, p, d, gr, algo)
    rdw, rdb = conv2d_backward_weights(dy, x, ws, s, p, d, gr, algo, with_bias=True)
    gx, gw, gb, gdy = (cp.asarray(a) for a in (x, w, b, dy))
    y = conv2d_forward(gx, gw, gb, s, p, d, gr, algo)
    dx = conv2d_backward_data(gdy, gw, xs, s, p, d, gr, algo)
    dw, db = conv2d_backward_weights(gdy, gx, ws, s, p, d, gr, algo, with_bias=True)
    assert isinstance(y, cp.ndarray)
    for got, ref in ((y, ry), (dx, rdx), (dw, rdw), (db, rdb)):
        np.testing.assert_allclose(cp.asnumpy(got), ref, rtol=1e-4, atol=1e-4)
