"""Normalisation kernels: batch norm (and its staged sums over shards, as the distributed executor
runs it) and layer norm, against the formulas and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.norm import (batchnorm2d_backward, batchnorm2d_forward, bn_backward_apply, bn_backward_local_sums,
                          bn_forward_apply, bn_local_sums, bn_stats_from_sums, layernorm_backward,
                          layernorm_forward)

from tests.support.kernel_checks import RNG, fd_directional


# ---------------------------------------------------------------------------------------------
# normalisation


def _bn_data(seed=6, shape=(4, 3, 5, 6)):
    rng = RNG(seed)
    x = rng.standard_normal(shape) * 2 + 1
    return x, rng.standard_normal(shape[1]), rng.standard_normal(shape[1])


def test_batchnorm_against_formula_and_fd():
    x, gamma, beta = _bn_data()
    eps = 1e-5
    y, cache = batchnorm2d_forward(x, gamma, beta, eps)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    ref = (x - mean) / np.sqrt(var + eps) * gamma[None, :, None, None] + beta[None, :, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)
    r = RNG(7).standard_normal(x.shape)
    dx, dgamma, dbeta = batchnorm2d_backward(r, cache)
    fd_directional(lambda xx, gg, bb: float(np.sum(r * batchnorm2d_forward(xx, gg, bb, eps)[0])),
                   [x, gamma, beta], [dx, dgamma, dbeta])


def test_batchnorm_2d_input_is_supported():
    x, gamma, beta = _bn_data(shape=(8, 5))
    y, cache = batchnorm2d_forward(x, gamma, beta)
    np.testing.assert_allclose(y, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * gamma + beta, rtol=1e-10)
    r = RNG(8).standard_normal(x.shape)
    dx, dg, db = batchnorm2d_backward(r, cache)
    fd_directional(lambda xx: float(np.sum(r * batchnorm2d_forward(xx, gamma, beta)[0])), [x], [dx])


@pytest.mark.parametrize("split_axis", [0, 2])
def test_batchnorm_staged_sums_over_halves_equal_whole(split_axis):
    """What the distributed executor does: local sums, allreduce (here: +), apply per shard."""
    x, gamma, beta = _bn_data()
    x = x.astype(np.float32)
    y, cache = batchnorm2d_forward(x, gamma, beta)
    halves = np.array_split(x, 2, axis=split_axis)
    stats = sum(bn_local_sums(h) for h in halves)  # one buffer [sum | sumsq | count] per shard
    c = x.shape[1]
    assert stats.shape == (2 * c + 1,) and stats[-1] == x.size // c
    mean, var, count = bn_stats_from_sums(stats)
    np.testing.assert_allclose(mean, x.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(var, x.astype(np.float64).var(axis=(0, 2, 3)), rtol=1e-6)
    parts = [bn_forward_apply(h, stats, gamma, beta, 1e-5) for h in halves]
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts], axis=split_axis), y, rtol=1e-5, atol=1e-5)
    r = RNG(9).standard_normal(x.shape).astype(np.float32)
    dx, dgamma, dbeta = batchnorm2d_backward(r, cache)
    rh = np.array_split(r, 2, axis=split_axis)
    bsums = [bn_backward_local_sums(d, p[1]) for d, p in zip(rh, parts)]
    sums = bsums[0][0] + bsums[1][0]
    np.testing.assert_allclose(sums[:c], dbeta, rtol=1e-5)
    np.testing.assert_allclose(sums[c:], dgamma, rtol=1e-5)
    np.testing.assert_allclose(bsums[0][1] + bsums[1][1], dgamma, rtol=1e-5)  # the local dgamma, summed
    np.testing.assert_allclose(bsums[0][2] + bsums[1][2], dbeta, rtol=1e-5)
    dxs = [bn_backward_apply(d, p[1], sums) for d, p in zip(rh, parts)]
    np.testing.assert_allclose(np.concatenate(dxs, axis=split_axis), dx, rtol=1e-5, atol=1e-5)
    assert dx.dtype == np.float32


def test_layernorm_against_formula_and_fd():
    rng = RNG(10)
    x = rng.standard_normal((2, 5, 7)) * 3
    gamma, beta = rng.standard_normal(7), rng.standard_normal(7)
    y, cache = layernorm_forward(x, gamma, beta, 1e-5)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(y, ref, rtol=1e-10)
    r = rng.standard_normal(x.shape)
    dx, dg, db = layernorm_backward(r, cache)
    fd_directional(lambda xx, gg, bb: float(np.sum(r * layernorm_forward(xx, gg, bb, 1e-5)[0])),
                   [x, gamma, beta], [dx, dg, db])
