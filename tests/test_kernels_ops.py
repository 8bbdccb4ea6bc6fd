"""Non-convolution kernels: pooling, normalisation, GEMM/linear, activations, loss, attention,
and the array-module helpers. Loop/formula references, finite differences, and the split-then-sum
identities the distributed executor relies on."""

from __future__ import annotations

import math

import numpy as np
import pytest

from networks.errors import DnnplanError
from kernels import xp as xpmod
from kernels import KERNELS
from kernels.activation import (add_backward, add_forward, concat_backward, concat_forward,
                                         dropout_backward, dropout_forward, gelu_backward,
                                         gelu_forward, relu_backward, relu_forward)
from kernels.attention import attention_backward, attention_forward
from kernels.gemm import gemm, linear_backward, linear_forward
from kernels.loss import softmax_xent_backward, softmax_xent_forward
from kernels.norm import (batchnorm2d_backward, batchnorm2d_forward, bn_backward_apply,
                                   bn_backward_local_sums, bn_forward_apply, bn_local_sums,
                                   bn_stats_from_sums, layernorm_backward, layernorm_forward)
from kernels.pool import (avgpool2d_backward, avgpool2d_forward, global_avgpool_backward,
                                   global_avgpool_forward, maxpool2d_backward, maxpool2d_forward,
                                   pool_output_size)

RNG = np.random.default_rng


def fd_directional(loss, args, grads, eps=1e-6, seed=0):
    """Check <grad_i, v_i> against a central difference of ``loss`` along random v_i, for each i."""
    rng = RNG(seed)
    for i, g in enumerate(grads):
        if g is None:
            continue
        v = rng.standard_normal(args[i].shape)
        plus = [a + eps * v if j == i else a for j, a in enumerate(args)]
        minus = [a - eps * v if j == i else a for j, a in enumerate(args)]
        fd = (loss(*plus) - loss(*minus)) / (2 * eps)
        assert float(np.sum(g * v)) == pytest.approx(fd, rel=1e-6, abs=1e-9), f"argument {i}"


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


def test_registry_names_callables():
    assert {"conv2d.fwd", "conv2d.bwd_data", "conv2d.bwd_weights", "gemm", "linear.fwd",
            "maxpool2d.fwd", "batchnorm.local_sums", "softmax_xent.fwd", "attention.bwd"} <= set(KERNELS)
    assert all(callable(f) for f in KERNELS.values())


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
    sums = [bn_local_sums(h) for h in halves]
    s, ss, cnt = (sum(t[i] for t in sums) for i in range(3))
    assert cnt == x.size // x.shape[1]
    mean, var = bn_stats_from_sums(s, ss, cnt)
    parts = [bn_forward_apply(h, mean, var, gamma, beta, 1e-5) for h in halves]
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts], axis=split_axis), y, rtol=1e-5, atol=1e-5)
    r = RNG(9).standard_normal(x.shape).astype(np.float32)
    dx, dgamma, dbeta = batchnorm2d_backward(r, cache)
    rh = np.array_split(r, 2, axis=split_axis)
    bsums = [bn_backward_local_sums(d, p[1]) for d, p in zip(rh, parts)]
    sdy, sdyx = bsums[0][0] + bsums[1][0], bsums[0][1] + bsums[1][1]
    np.testing.assert_allclose(sdy, dbeta, rtol=1e-5)
    np.testing.assert_allclose(sdyx, dgamma, rtol=1e-5)
    dxs = [bn_backward_apply(d, p[1], sdy, sdyx, cnt, gamma) for d, p in zip(rh, parts)]
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


# ---------------------------------------------------------------------------------------------
# loss


def test_softmax_xent_formula_stability_and_fd():
    rng = RNG(17)
    logits = rng.standard_normal((4, 3, 10)) * 3
    labels = rng.integers(0, 10, size=(4, 3))
    loss, cache = softmax_xent_forward(logits, labels, total_count=12)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ref = -np.take_along_axis(logp, labels[..., None], -1).sum() / 12
    assert float(loss) == pytest.approx(ref, rel=1e-12)
    big, _ = softmax_xent_forward(logits * 1e4, labels, 12)
    assert np.isfinite(float(big))
    d = softmax_xent_backward(cache, dloss=2.0)
    fd_directional(lambda z: 2.0 * float(softmax_xent_forward(z, labels, 12)[0]), [logits], [d])
    assert np.isfinite(softmax_xent_backward(softmax_xent_forward(logits.astype(np.float32) * 1e4,
                                                                  labels, 12)[1])).all()


def test_softmax_xent_partial_losses_sum_to_global_mean():
    rng = RNG(18)
    logits = rng.standard_normal((8, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=8)
    whole, cw = softmax_xent_forward(logits, labels, 8)
    a, ca = softmax_xent_forward(logits[:3], labels[:3], 8)
    b, cb = softmax_xent_forward(logits[3:], labels[3:], 8)
    assert float(a + b) == pytest.approx(float(whole), rel=1e-6)
    np.testing.assert_allclose(np.concatenate([softmax_xent_backward(ca), softmax_xent_backward(cb)]),
                               softmax_xent_backward(cw), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# attention


def _ref_attention(q, k, v, causal):
    n, h, s, d = q.shape
    o = np.zeros_like(q)
    for i in range(n):
        for j in range(h):
            sc = q[i, j] @ k[i, j].T / math.sqrt(d)
            if causal:
                sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            o[i, j] = (p / p.sum(-1, keepdims=True)) @ v[i, j]
    return o


@pytest.mark.parametrize("causal", [False, True])
def test_attention_against_loops_and_fd(causal):
    rng = RNG(19)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    o, cache = attention_forward(q, k, v, causal)
    np.testing.assert_allclose(o, _ref_attention(q, k, v, causal), rtol=1e-10, atol=1e-12)
    if causal:   # the first query sees only the first key
        np.testing.assert_allclose(o[:, :, 0], v[:, :, 0], rtol=1e-12)
    r = rng.standard_normal(o.shape)
    dq, dk, dv = attention_backward(r, cache)
    fd_directional(lambda a, b, c: float(np.sum(r * attention_forward(a, b, c, causal)[0])),
                   [q, k, v], [dq, dk, dv])


def test_attention_float32_close_to_float64():
    rng = RNG(20)
    q, k, v = (rng.standard_normal((2, 4, 16, 8)) for _ in range(3))
    o64, _ = attention_forward(q, k, v, True)
    o32, c32 = attention_forward(*(a.astype(np.float32) for a in (q, k, v)), True)
    assert o32.dtype == np.float32
    np.testing.assert_allclose(o32, o64, rtol=1e-5, atol=1e-5)
    assert all(g.dtype == np.float32 for g in attention_backward(o32, c32))


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


def test_sgd_momentum_update_is_pytorch_sgd_in_place():
    from kernels.optimizer import sgd_momentum_update
    rng = np.random.default_rng(3)
    w, v, g = (rng.standard_normal(17) for _ in range(3))
    w0, v0 = w.copy(), v.copy()
    out_w, out_v = sgd_momentum_update(w, v, g, 0.1, 0.9)
    assert out_w is w and out_v is v
    np.testing.assert_allclose(v, 0.9 * v0 + g, rtol=1e-15)
    np.testing.assert_allclose(w, w0 - 0.1 * (0.9 * v0 + g), rtol=1e-15)


def test_reshard_block_copies_and_their_price():
    """The executor's reshard copies are kernels like the others: they write through views, the
    harness times them at a (runs, run length) shape, and both compute models price them (a
    profile by the measured entry of that very call)."""
    from costmodel.compute import Roofline
    from costmodel.files import DEFAULT_MACHINE, load_machine
    from costmodel.kernel_calls import reshard_copy_call
    from costmodel.profile_table import ProfileTable
    from costmodel.profiled_compute import ProfiledCompute
    from profiler.harness import QUICK, time_call
    out = np.zeros((2, 3, 4), np.float32)
    piece = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    KERNELS["reshard.copy"](out[:, :, 1:3], piece)
    assert np.array_equal(out[:, :, 1:3], piece) and not out[:, :, [0, 3]].any()
    KERNELS["reshard.add"](out[:, :, 1:3], piece)
    assert np.array_equal(out[:, :, 1:3], 2 * piece)

    call = reshard_copy_call(1000, 8, "float32", accumulate=False)
    assert (call.kernel, call.shape, call.bytes) == ("reshard.copy", (125, 8), 8000)
    add = reshard_copy_call(1001, 8, "float32", accumulate=True)
    assert (add.kernel, add.shape, add.flops) == ("reshard.add", (126, 8), 1008)
    roof = Roofline(load_machine(DEFAULT_MACHINE))
    short = reshard_copy_call(1 << 16, 2, "float32", False)
    entry = time_call(short, policy=QUICK)
    assert entry.median_s > 0
    table = ProfileTable(fingerprint={"device": "test"}, entries={short.key: entry})
    assert ProfiledCompute(table, roof).copy_s(1 << 16, 2, "float32", False) == entry.median_s
    assert roof.copy_s(0, 4, "float32", False) == 0.0
    assert 0 < roof.copy_s(1 << 20, 4, "float32", False) < roof.copy_s(1 << 20, 4, "float32", True)
