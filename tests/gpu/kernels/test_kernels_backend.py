"""The array-module helpers (numpy, cupy when present) and the non-convolution kernels on cupy
against numpy (skipped without cupy + CUDA)."""

from __future__ import annotations

import numpy as np
import pytest

from networks.errors import DnnplanError
from kernels import xp as xpmod
from kernels.activation import dropout_forward, gelu_forward
from kernels.attention import attention_backward, attention_forward
from kernels.gemm import linear_forward
from kernels.loss import softmax_xent_backward, softmax_xent_forward
from kernels.norm import batchnorm2d_backward, batchnorm2d_forward
from kernels.pool import avgpool2d_backward, avgpool2d_forward, maxpool2d_backward, maxpool2d_forward

from tests.support.kernel_checks import RNG


# ---------------------------------------------------------------------------------------------
# array module


def test_array_module_helpers():
    assert xpmod.array_module("numpy") is np
    assert xpmod.module_of(np.zeros(2)) is np
    xpmod.synchronize(np)
    assert isinstance(xpmod.gpu_available(), bool)
    with pytest.raises(DnnplanError, match="unknown array backend"):
        xpmod.array_module("jax")


@pytest.mark.skipif(xpmod._import_cupy() is not None, reason="cupy is installed here")
def test_cupy_missing_is_a_user_error():
    with pytest.raises(DnnplanError, match="cupy"):
        xpmod.array_module("cupy")


# ---------------------------------------------------------------------------------------------
# GPU backend (skipped without cupy + CUDA)


@pytest.mark.gpu
@pytest.mark.skipif(not xpmod.gpu_available(), reason="needs cupy and a CUDA device")
def test_cupy_ops_match_numpy():
    cp = xpmod.array_module("cupy")
    rng = RNG(21)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    gx = cp.asarray(x)
    assert xpmod.module_of(gx) is cp
    xpmod.synchronize(cp)
    for fwd, bwd, args in ((maxpool2d_forward, maxpool2d_backward, (3, 2, (1, 1, 1, 1), (1, 1), True)),
                           (avgpool2d_forward, avgpool2d_backward, (3, 2, (1, 0, 1, 0), True, False))):
        y, c = fwd(x, *args)
        gy, gc = fwd(gx, *args)
        np.testing.assert_allclose(cp.asnumpy(gy), y, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cp.asnumpy(bwd(cp.asarray(y), gc)), bwd(y, c), rtol=1e-5, atol=1e-6)
    gamma, beta = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    y, c = batchnorm2d_forward(x, gamma, beta)
    gy, gc = batchnorm2d_forward(gx, cp.asarray(gamma), cp.asarray(beta))
    np.testing.assert_allclose(cp.asnumpy(gy), y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(cp.asnumpy(batchnorm2d_backward(gy, gc)[0]), batchnorm2d_backward(y, c)[0],
                               rtol=1e-4, atol=1e-4)
    logits, labels = rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 5, 6)
    loss, c = softmax_xent_forward(logits, labels, 6)
    gl, gc = softmax_xent_forward(cp.asarray(logits), cp.asarray(labels), 6)
    assert float(gl) == pytest.approx(float(loss), rel=1e-5)
    np.testing.assert_allclose(cp.asnumpy(softmax_xent_backward(gc)), softmax_xent_backward(c), rtol=1e-5,
                               atol=1e-7)
    q = rng.standard_normal((2, 2, 6, 4)).astype(np.float32)
    o, c = attention_forward(q, q, q, True)
    go, gc = attention_forward(cp.asarray(q), cp.asarray(q), cp.asarray(q), True)
    np.testing.assert_allclose(cp.asnumpy(go), o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(attention_backward(go, gc)[0]), attention_backward(o, c)[0],
                               rtol=1e-4, atol=1e-5)
    y, _ = dropout_forward(gx, 0.5, seed=3)
    y2, _ = dropout_forward(gx, 0.5, seed=3)
    assert bool((y == y2).all())
    np.testing.assert_allclose(cp.asnumpy(gelu_forward(gx)[0]), gelu_forward(x)[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(linear_forward(gx[..., :4], cp.asarray(x[0, 0, :4, :4]))),
                               linear_forward(x[..., :4], x[0, 0, :4, :4]), rtol=1e-5, atol=1e-5)
