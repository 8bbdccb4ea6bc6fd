"""Every GPU kernel (kernels.cuda) against the numpy kernel in float64 on the same inputs, rounded to
the storage format first, within the precision's tolerance (kernels.cuda.precision.TOLERANCE):
cuDNN's convolution families, cuBLAS GEMMs, flash and materialised attention, the fused passes.
Needs cupy, cuDNN's frontend and a CUDA device (skipped otherwise; bench/gpu/prove.sh runs them)."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import activation, attention, conv, embedding, gemm, loss, norm, optimizer, pool
from kernels.cuda import launch, precision
from kernels.cuda.source import DTYPES, kernel_names
from kernels.xp import gpu_available, storage_dtype

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")]

PRECISIONS = (("fp32", "float32"), ("tf32", "float32"), ("fp16", "float16"), ("bf16", "bfloat16"))
RNG = np.random.default_rng(51)


@pytest.fixture
def cp():
    import cupy  # noqa: PLC0415 - only where a GPU is
    yield cupy
    precision.set_precision("fp32")


def rounded(shape, dtype, scale=1.0):
    """Host values already in the storage format (as float64) and the device array of them."""
    x = (RNG.standard_normal(shape) * scale).astype(storage_dtype(dtype))
    return x.astype(np.float64), x


def dev(cp, x):
    return cp.asarray(x)


def rel(got, want) -> float:
    got = np.asarray(got, dtype=np.float64)
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


def host(cp, a):
    return cp.asnumpy(a).astype(np.float64)


def test_every_fused_pass_compiles(cp):
    for dt in DTYPES:
        for name in kernel_names():
            assert launch.function(dt, name) is not None


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
@pytest.mark.parametrize("algo", ["im2col", "direct", "fft", "winograd"])
def test_convolution_forward(cp, prec, dtype, algo):
    precision.set_precision(prec)
    x64, x = rounded((2, 16, 12, 12), dtype)
    w64, w = rounded((24, 16, 3, 3), dtype, 0.1)
    b64, b = rounded((24,), dtype)
    want = conv.conv2d_forward(x64, w64, b64, 1, 1, 1, 1, "direct")
    got = conv.conv2d_forward(dev(cp, x), dev(cp, w), dev(cp, b), 1, 1, 1, 1, algo)
    assert got.dtype == x.dtype and rel(host(cp, got), want) < precision.TOLERANCE[prec]


@pytest.mark.parametrize("prec,dtype", [PRECISIONS[0], PRECISIONS[3]])
@pytest.mark.parametrize("algo", ["im2col", "winograd"])
@pytest.mark.parametrize("geo", [((1, 1), (1, 1, 1, 1), (1, 1), 1), ((2, 1), (1, 0, 2, 1), (1, 1), 2)])
def test_convolution_backward(cp, prec, dtype, algo, geo):
    precision.set_precision(prec)
    stride, pad, dil, groups = geo
    x64, x = rounded((2, 8, 11, 9), dtype)
    w64, w = rounded((6, 8 // groups, 3, 3), dtype, 0.1)
    y = conv.conv2d_forward(x64, w64, None, stride, pad, dil, groups, "direct")
    dy64, dy = rounded(y.shape, dtype)
    args = (stride, pad, dil, groups)
    want_dx = conv.conv2d_backward_data(dy64, w64, x.shape, *args, "direct")
    want_dw, want_db = conv.conv2d_backward_weights(dy64, x64, w.shape, *args, "direct", with_bias=True)
    got_dx = conv.conv2d_backward_data(dev(cp, dy), dev(cp, w), x.shape, *args, algo)
    got_dw, got_db = conv.conv2d_backward_weights(dev(cp, dy), dev(cp, x), w.shape, *args, algo, with_bias=True)
    tol = precision.TOLERANCE[prec]
    assert rel(host(cp, got_dx), want_dx) < tol and rel(host(cp, got_dw), want_dw) < tol
    assert rel(host(cp, got_db), want_db) < tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_linear_and_batched_gemm(cp, prec, dtype):
    precision.set_precision(prec)
    x64, x = rounded((3, 5, 64), dtype)
    w64, w = rounded((48, 64), dtype, 0.1)
    b64, b = rounded((48,), dtype)
    tol = precision.TOLERANCE[prec]
    assert rel(host(cp, gemm.linear_forward(dev(cp, x), dev(cp, w), dev(cp, b))), gemm.linear_forward(x64, w64, b64)) < tol
    dy64, dy = rounded((3, 5, 48), dtype)
    for got, want in zip(gemm.linear_backward(dev(cp, dy), dev(cp, x), dev(cp, w)), gemm.linear_backward(dy64, x64, w64)):
        assert rel(host(cp, got), want) < tol
    a64, a = rounded((4, 32, 16), dtype)
    c64, c = rounded((1, 24, 16), dtype)  # a batch of one, broadcast
    got = gemm.gemm(dev(cp, a), dev(cp, c), trans_b=True)
    assert got.shape == (4, 32, 24) and rel(host(cp, got), a64 @ c64.swapaxes(-1, -2)) < tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
@pytest.mark.parametrize("algorithm", ["flash", "materialized"])
@pytest.mark.parametrize("causal,sq,sk,kv", [(False, 64, 64, 3), (True, 64, 64, 3), (True, 32, 64, 3),
                                              (True, 64, 64, 1)])  # kv 1: multi-query attention
def test_attention(cp, prec, dtype, algorithm, causal, sq, sk, kv):
    precision.set_precision(prec)
    q64, q = rounded((2, 3, sq, 32), dtype)
    k64, k = rounded((2, kv, sk, 32), dtype)
    v64, v = rounded((2, kv, sk, 32), dtype)
    o, cache = attention.attention_forward(dev(cp, q), dev(cp, k), dev(cp, v), causal, algorithm=algorithm)
    want, wcache = attention.attention_forward(q64, k64, v64, causal)
    tol = precision.TOLERANCE[prec]
    assert rel(host(cp, o), want) < tol
    assert cache["algorithm"] == ("flash" if algorithm == "flash" and dtype != "float32" else "materialized")
    do64, do = rounded(o.shape, dtype)
    for got, exp in zip(attention.attention_backward(dev(cp, do), cache), attention.attention_backward(do64, wcache)):
        assert rel(host(cp, got), exp) < 2 * tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_normalisations(cp, prec, dtype):
    precision.set_precision(prec)
    tol = precision.TOLERANCE[prec]
    x64, x = rounded((4, 6, 5, 7), dtype)
    g64, g = rounded((6,), dtype)
    b64, b = rounded((6,), dtype)
    y, c = norm.batchnorm2d_forward(dev(cp, x), dev(cp, g), dev(cp, b))
    wy, wc = norm.batchnorm2d_forward(x64, g64, b64)
    assert rel(host(cp, y), wy) < tol
    dy64, dy = rounded(x.shape, dtype)
    for got, want in zip(norm.batchnorm2d_backward(dev(cp, dy), c), norm.batchnorm2d_backward(dy64, wc)):
        assert rel(host(cp, got), want) < 2 * tol
    x64, x = rounded((3, 5, 96), dtype)
    g64, g = rounded((96,), dtype)
    b64, b = rounded((96,), dtype)
    y, c = norm.layernorm_forward(dev(cp, x), dev(cp, g), dev(cp, b))
    wy, wc = norm.layernorm_forward(x64, g64, b64)
    assert rel(host(cp, y), wy) < tol
    dy64, dy = rounded(x.shape, dtype)
    for got, want in zip(norm.layernorm_backward(dev(cp, dy), c), norm.layernorm_backward(dy64, wc)):
        assert rel(host(cp, got), want) < 2 * tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_activations_add_and_dropout(cp, prec, dtype):
    precision.set_precision(prec)
    tol = precision.TOLERANCE[prec]
    x64, x = rounded((1000,), dtype)
    dy64, dy = rounded((1000,), dtype)
    for fwd, bwd in ((activation.relu_forward, activation.relu_backward),
                     (activation.gelu_forward, activation.gelu_backward)):
        y, c = fwd(dev(cp, x))
        wy, wc = fwd(x64)
        assert rel(host(cp, y), wy) < tol and rel(host(cp, bwd(dev(cp, dy), c)), bwd(dy64, wc)) < tol
    s, _ = activation.add_forward(dev(cp, x), dev(cp, dy))
    assert rel(host(cp, s), x64 + dy64) < tol
    big = dev(cp, np.ones(1 << 20, dtype=storage_dtype(dtype)))
    y, cache = activation.dropout_forward(big, 0.25, 7)
    kept = host(cp, cache[0])
    assert abs(kept.mean() - 0.75) < 0.01 and np.allclose(host(cp, y)[kept > 0], 1 / 0.75, rtol=1e-2)
    assert np.array_equal(host(cp, activation.dropout_backward(big, cache)) > 0, kept > 0)
    same, _ = activation.dropout_forward(dev(cp, x), 0.0, 7)
    assert np.array_equal(host(cp, same), x64)


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_softmax_cross_entropy(cp, prec, dtype):
    precision.set_precision(prec)
    tol = precision.TOLERANCE[prec]
    z64, z = rounded((4, 7, 50), dtype, 3.0)
    labels = RNG.integers(0, 50, (4, 7))
    loss_g, cache = loss.softmax_xent_forward(dev(cp, z), cp.asarray(labels), 28)
    loss_w, wcache = loss.softmax_xent_forward(z64, labels, 28)
    assert abs(float(loss_g) - float(loss_w)) / abs(float(loss_w)) < tol
    assert rel(host(cp, loss.softmax_xent_backward(cache)), loss.softmax_xent_backward(wcache)) < tol
    part, pcache = loss.softmax_xent_forward(dev(cp, np.ascontiguousarray(z[..., 10:30])), cp.asarray(labels), 28,
                                             vocab_lo=10)
    _, wpart = loss.softmax_xent_forward(z64[..., 10:30], labels, 28, vocab_lo=10)
    assert rel(host(cp, pcache["lse"]), wpart["lse"]) < tol and rel(host(cp, pcache["picked"]), wpart["picked"]) < tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_pooling_and_embedding(cp, prec, dtype):
    precision.set_precision(prec)
    tol = precision.TOLERANCE[prec]
    x64, x = rounded((2, 3, 9, 8), dtype)
    y, c = pool.maxpool2d_forward(dev(cp, x), 3, 2, (1, 1, 1, 1), (1, 1), True)
    wy, wc = pool.maxpool2d_forward(x64, 3, 2, (1, 1, 1, 1), (1, 1), True)
    assert np.array_equal(host(cp, c["arg"]), wc["arg"]) and rel(host(cp, y), wy) < tol
    dy64, dy = rounded(y.shape, dtype)
    assert rel(host(cp, pool.maxpool2d_backward(dev(cp, dy), c)), pool.maxpool2d_backward(dy64, wc)) < tol
    g, gc = pool.global_avgpool_forward(dev(cp, x), divisor=100)
    wg, wgc = pool.global_avgpool_forward(x64, divisor=100)
    assert rel(host(cp, g), wg) < tol
    assert rel(host(cp, pool.global_avgpool_backward(dev(cp, wg.astype(x.dtype)), gc)),
               pool.global_avgpool_backward(wg, wgc)) < tol
    t64, t = rounded((20, 16), dtype)
    p64, p = rounded((5, 16), dtype)
    ids = RNG.integers(0, 40, (3, 5))
    e, ec = embedding.embedding_forward(cp.asarray(ids), dev(cp, t), dev(cp, p), vocab_lo=10)
    we, wec = embedding.embedding_forward(ids, t64, p64, vocab_lo=10)
    assert rel(host(cp, e), we) < tol
    d64, d = rounded(e.shape, dtype)
    for got, want in zip(embedding.embedding_backward_weights(dev(cp, d), ec), embedding.embedding_backward_weights(d64, wec)):
        assert rel(host(cp, got), want) < tol


@pytest.mark.parametrize("prec,dtype", PRECISIONS)
def test_sgd_update_with_and_without_master_weights(cp, prec, dtype):
    precision.set_precision(prec)
    w64, w = rounded((5000,), dtype)
    g64, g = rounded((5000,), dtype)
    master = w64.astype(np.float32)
    v = RNG.standard_normal(5000).astype(np.float32)
    if storage_dtype(dtype).itemsize == 2:
        gw, gv, gm = dev(cp, w), cp.asarray(v), cp.asarray(master)
        optimizer.sgd_momentum_update(gw, gv, dev(cp, g), 0.01, 0.9, master=gm)
        want_v = 0.9 * v + g64
        assert rel(host(cp, gv), want_v) < 1e-6 and rel(host(cp, gm), master - 0.01 * want_v) < 1e-6
        assert rel(host(cp, gw), master - 0.01 * want_v) < precision.TOLERANCE[prec]
    else:
        gw, gv = dev(cp, w), cp.asarray(v)
        optimizer.sgd_momentum_update(gw, gv, dev(cp, g), 0.01, 0.9)
        assert rel(host(cp, gw), w64 - 0.01 * (0.9 * v + g64)) < 1e-6


def test_float64_arrays_run_the_array_module_code(cp):
    x = RNG.standard_normal((2, 3, 8, 8))
    got = activation.relu_forward(cp.asarray(x))[0]
    assert got.dtype == np.float64 and np.array_equal(host(cp, got), np.maximum(x, 0))
