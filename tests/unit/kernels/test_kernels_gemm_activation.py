"""GEMM, linear and the elementwise kernels (relu, gelu, dropout, add, concat) against einsum, the
formulas and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels.activation import (add_backward, add_forward, concat_backward, concat_forward, dropout_backward,
                                dropout_forward, gelu_backward, gelu_forward, relu_backward, relu_forward)
from kernels.gemm import gemm, linear_backward, linear_forward

from tests.support.kernel_checks import RNG, fd_directional


# ---------------------------------------------------------------------------------------------
# gemm and linear


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_transposes(dtype, ta, tb):
    rng = RNG(11)
    a, b = rng.standard_normal((5, 4)).astype(dtype), rng.standard_normal((4, 3)).astype(dtype)
    got = gemm(a.T.copy() if ta else a, b.T.copy() if tb else b, trans_a=ta, trans_b=tb)
    assert got.dtype == dtype and got.shape == (5, 3)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-2 if dtype == np.float16 else 1e-5)


def test_linear_against_einsum_and_fd():
    rng = RNG(12)
    x, w, b = rng.standard_normal((2, 3, 6)), rng.standard_normal((4, 6)), rng.standard_normal(4)
    y = linear_forward(x, w, b)
    np.testing.assert_allclose(y, np.einsum("nsc,fc->nsf", x, w) + b, rtol=1e-12)
    np.testing.assert_allclose(linear_forward(x, w, None), y - b, rtol=1e-12)
    r = rng.standard_normal(y.shape)
    dx, dw, db = linear_backward(r, x, w, with_bias=True)
    assert linear_backward(r, x, w, with_bias=False)[2] is None
    fd_directional(lambda xx, ww, bb: float(np.sum(r * linear_forward(xx, ww, bb))), [x, w, b], [dx, dw, db])


# ---------------------------------------------------------------------------------------------
# activations


def test_relu_and_fd():
    x = RNG(13).standard_normal((3, 4, 5))
    x[np.abs(x) < 1e-3] = 0.5             # keep finite differences away from the kink
    y, cache = relu_forward(x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    r = RNG(14).standard_normal(x.shape)
    dx = relu_backward(r, cache)
    np.testing.assert_array_equal(dx, r * (x > 0))
    fd_directional(lambda xx: float(np.sum(r * relu_forward(xx)[0])), [x], [dx])


def test_gelu_tanh_formula_and_fd():
    x = RNG(15).standard_normal((4, 6)) * 3
    y, cache = gelu_forward(x)
    ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(y, ref, rtol=1e-12)
    assert gelu_forward(np.array([10.0]))[0][0] == pytest.approx(10.0)
    r = RNG(16).standard_normal(x.shape)
    fd_directional(lambda xx: float(np.sum(r * gelu_forward(xx)[0])), [x], [gelu_backward(r, cache)])


def test_dropout_deterministic_scaled_and_backward():
    x = np.ones((64, 128), np.float32)
    y1, m1 = dropout_forward(x, 0.25, seed=7)
    y2, _ = dropout_forward(x, 0.25, seed=7)
    y3, _ = dropout_forward(x, 0.25, seed=8)
    assert np.array_equal(y1, y2) and not np.array_equal(y1, y3)
    assert y1.dtype == np.float32
    assert set(np.unique(y1).tolist()) == {0.0, np.float32(1 / 0.75)}
    assert abs(float((y1 == 0).mean()) - 0.25) < 0.02
    assert np.mean(y1) == pytest.approx(1.0, abs=0.03)
    np.testing.assert_array_equal(dropout_backward(np.ones_like(x), m1), y1)
    np.testing.assert_array_equal(dropout_forward(x, 0.0, 1)[0], x)
    assert not dropout_forward(x, 1.0, 1)[0].any()


def test_add_and_concat():
    a, b = np.ones((2, 3)), np.arange(6.0).reshape(2, 3)
    s, c = add_forward(a, b)
    np.testing.assert_array_equal(s, a + b)
    da, db = add_backward(b, c)
    np.testing.assert_array_equal(da, b)
    y, cache = concat_forward([a, b, a[:, :1]], axis=1)
    assert y.shape == (2, 7)
    parts = concat_backward(y, cache)
    assert [p.shape for p in parts] == [(2, 3), (2, 3), (2, 1)]
    np.testing.assert_array_equal(parts[1], b)
