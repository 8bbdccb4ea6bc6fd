"""The convolution kernels on cupy against numpy, every algorithm on the awkward shapes (asymmetric
padding, groups, dilation with stride); skipped without cupy + CUDA. Their float32 and float16
accuracy on the CPU: tests/unit/kernels/test_kernels_conv_precision.py."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv import conv2d_backward_data, conv2d_backward_weights, conv2d_forward
from kernels.xp import array_module, gpu_available

from tests.support.conv_cases import CASES, PAIRS, _data


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
