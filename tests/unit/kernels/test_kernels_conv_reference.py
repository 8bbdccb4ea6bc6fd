"""Convolution kernels against the naive loop reference (float64): every algorithm and pass, the
applicability table, im2col's two weight-gradient forms, finite-difference gradient checks, and a
property test over random geometries."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernels.conv import im2col as conv_im2col
from networks.ops.conv_geometry import make_geom
from kernels.conv import (CONV_ALGORITHMS, PASS_FALLBACK, conv2d_backward_data, conv2d_backward_weights,
                          conv2d_forward, conv_applicable, conv_output_hw, conv_workspace_bytes, kernel_run)
from networks.ops.conv_workspace import peak

from tests.support.conv_cases import CASES, PAIRS, _data, _rel, naive_backward, naive_forward


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
    xs, ws, s, p, d, gr = CASES[case]
    x, w, _, dy = _data(CASES[case])
    assert conv_im2col.per_sample_weight_grads(make_geom(xs, ws, s, p, d, gr))
    monkeypatch.setattr(conv_im2col, "PER_SAMPLE_MAX_ELEMS", 0)
    assert not conv_im2col.per_sample_weight_grads(make_geom(xs, ws, s, p, d, gr))
    trace: list[int] = []
    dw, _ = conv2d_backward_weights(dy, x, ws, s, p, d, gr, "im2col", trace=trace)
    np.testing.assert_allclose(dw, naive_backward(dy, x, w, s, p, d, gr)[1], rtol=1e-10, atol=1e-10)
    assert peak(trace) == conv_workspace_bytes("im2col", xs, ws, s, p, d, gr, 8, pass_name="bwd_weights")


def test_im2col_weight_gradient_forms_agree_above_the_threshold(monkeypatch):
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
