"""Pooling kernels: PyTorch's output-size rules, max/average pooling against loops and finite
differences, ties, and the split global average pool."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.pool import (avgpool2d_backward, avgpool2d_forward, global_avgpool_backward, global_avgpool_forward,
                          maxpool2d_backward, maxpool2d_forward, pool_output_size)

from tests.support.kernel_checks import RNG, fd_directional


# ---------------------------------------------------------------------------------------------
# pooling


def test_pool_output_size_pytorch_rules():
    assert pool_output_size(112, 3, 2, 0, 0, ceil_mode=False) == 55
    assert pool_output_size(112, 3, 2, 0, 0, ceil_mode=True) == 56
    # ceil would give 4, but the 4th window would start at 6 >= 5 + 1 (outside input + left pad)
    assert pool_output_size(5, 2, 2, 1, 1, ceil_mode=True) == 3
    assert pool_output_size(6, 2, 2, 1, 1, ceil_mode=True) == 4
    assert pool_output_size(7, 3, 1, 0, 0, dil=2) == 3


def _ref_pool(x, k, s, p, d, ceil, mode, count_include_pad=True):
    n, c, h, w = x.shape
    ho = pool_output_size(h, k[0], s[0], p[0], p[1], d[0], ceil)
    wo = pool_output_size(w, k[1], s[1], p[2], p[3], d[1], ceil)
    y = np.zeros((n, c, ho, wo))
    for a in range(ho):
        for b in range(wo):
            r0, c0 = a * s[0] - p[0], b * s[1] - p[2]
            rows = [r0 + i * d[0] for i in range(k[0])]
            cols = [c0 + j * d[1] for j in range(k[1])]
            vr = [r for r in rows if 0 <= r < h]
            vc = [cc for cc in cols if 0 <= cc < w]
            if mode == "max":
                win = x[:, :, vr][:, :, :, vc]
                y[:, :, a, b] = win.max(axis=(2, 3)) if vr and vc else -np.inf
            else:
                total = x[:, :, vr][:, :, :, vc].sum(axis=(2, 3))
                if count_include_pad:
                    cnt = (min(r0 + k[0], h + p[1]) - r0) * (min(c0 + k[1], w + p[3]) - c0)
                else:
                    cnt = len(vr) * len(vc)
                y[:, :, a, b] = total / cnt
    return y


POOL_CASES = [  # kernel, stride, padding (t, b, l, r), dilation, ceil_mode
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),
    ((2, 2), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((3, 2), (1, 2), (1, 0, 0, 1), (1, 1), False),
    ((2, 3), (2, 1), (0, 1, 1, 1), (1, 1), True),
]


@pytest.mark.parametrize("k,s,p,d,ceil", POOL_CASES + [((3, 3), (2, 1), (1, 1, 2, 0), (2, 1), True)])
def test_maxpool_against_loops_and_fd(k, s, p, d, ceil):
    x = RNG(0).standard_normal((2, 3, 9, 8))
    y, cache = maxpool2d_forward(x, k, s, p, d, ceil)
    np.testing.assert_array_equal(y, _ref_pool(x, k, s, p, d, ceil, "max"))
    r = RNG(1).standard_normal(y.shape)
    dx = maxpool2d_backward(r, cache)
    assert dx.shape == x.shape
    # each output's gradient lands on one input holding the same value
    assert np.sum(dx) == pytest.approx(np.sum(r))
    fd_directional(lambda xx: float(np.sum(r * maxpool2d_forward(xx, k, s, p, d, ceil)[0])), [x], [dx])


@pytest.mark.parametrize("cip", [True, False])
@pytest.mark.parametrize("k,s,p,d,ceil", POOL_CASES)
def test_avgpool_against_loops_and_fd(k, s, p, d, ceil, cip):
    x = RNG(2).standard_normal((2, 3, 9, 8))
    y, cache = avgpool2d_forward(x, k, s, p, ceil, cip)
    np.testing.assert_allclose(y, _ref_pool(x, k, s, p, (1, 1), ceil, "avg", cip), rtol=1e-12)
    r = RNG(3).standard_normal(y.shape)
    dx = avgpool2d_backward(r, cache)
    fd_directional(lambda xx: float(np.sum(r * avgpool2d_forward(xx, k, s, p, ceil, cip)[0])), [x], [dx])


def test_maxpool_float32_and_ties_go_to_first():
    x = np.ones((1, 1, 2, 2), np.float32)
    y, cache = maxpool2d_forward(x, 2, 2)
    assert y.dtype == np.float32
    dx = maxpool2d_backward(np.ones_like(y), cache)
    np.testing.assert_array_equal(dx[0, 0], [[1, 0], [0, 0]])


def test_global_avgpool_split_with_global_divisor():
    x = RNG(4).standard_normal((2, 3, 6, 5))
    y, cache = global_avgpool_forward(x)
    np.testing.assert_allclose(y[:, :, 0, 0], x.mean(axis=(2, 3)), rtol=1e-12)
    ya, ca = global_avgpool_forward(x[:, :, :4], divisor=30)
    yb, cb = global_avgpool_forward(x[:, :, 4:], divisor=30)
    np.testing.assert_allclose(ya + yb, y, rtol=1e-12)
    dy = RNG(5).standard_normal(y.shape)
    dx = global_avgpool_backward(dy, cache)
    np.testing.assert_allclose(np.concatenate([global_avgpool_backward(dy, ca),
                                               global_avgpool_backward(dy, cb)], axis=2), dx)
    fd_directional(lambda xx: float(np.sum(dy * global_avgpool_forward(xx)[0])), [x], [dx])
