"""Convolution kernels in lower precision: float32 accuracy within measured bounds, Winograd's F(4x4,
3x3) tile and its cached transforms, float16, determinism (on cupy: tests/gpu/kernels/test_gpu_conv.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv import winograd as conv_winograd
from networks.ops.conv_geometry import make_geom
from kernels.conv import CONV_ALGORITHMS, conv2d_backward_data, conv2d_backward_weights, conv2d_forward

from tests.support.conv_cases import CASES, _data, _rel, naive_backward, naive_forward


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
