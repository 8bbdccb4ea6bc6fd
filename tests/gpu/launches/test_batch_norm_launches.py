"""Batch norm on the GPU path in two launches each way, on the recording cupy double
(tests/support/doubles/fake_cupy.py) with numpy models of the fused passes (tests/support/doubles/gpu_kernel_models.py):
what each stage launches, what the cache keeps, and the passes' arithmetic against kernels.norm in
float64. Runs without a GPU; tests/gpu/kernels/test_gpu_kernels.py checks the same passes on one."""

from __future__ import annotations

from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest

from executor.ops import norm as bn_op
from kernels import norm
from kernels.cuda import norm as gpu_norm

from tests.support.doubles.fake_cupy import FakeCupy
from tests.support.doubles.gpu_kernel_models import BATCH_NORM

RNG = np.random.default_rng(66)


@pytest.fixture
def cp(monkeypatch):
    return FakeCupy(BATCH_NORM).install(monkeypatch)


def _data(cp, shape=(4, 3, 40, 40), dtype=np.float32):
    """(host float64 copies, device arrays): x, gamma, beta, dy in ``dtype``."""
    x = (RNG.standard_normal(shape) * 2 + 1).astype(dtype)
    gamma, beta = RNG.standard_normal(shape[1]).astype(dtype), RNG.standard_normal(shape[1]).astype(dtype)
    dy = RNG.standard_normal(shape).astype(dtype)
    host = [a.astype(np.float64) for a in (x, gamma, beta, dy)]
    return host, [cp.asarray(a) for a in (x, gamma, beta, dy)]


def _ctx(cp, gamma, beta, reduced: list):
    """What bn_forward and bn_backward read of a LayerCtx; each allreduce recorded, the sum being
    this one rank's."""
    def allreduce(arr, dims, phase, op="sum"):
        reduced.append((phase, arr))
        cp.launches.append(("collective", phase))
        return arr

    return SimpleNamespace(weights={"gamma": gamma, "beta": beta}, p={"eps": 1e-5}, span=lambda phase: nullcontext(),
                           allreduce=allreduce, out_block=((0, 4), (0, 3), (0, 40), (0, 40)),
                           layer=SimpleNamespace(name="bn1", op="batchnorm2d"), strategy=SimpleNamespace(label="N=1"))


def test_each_pass_is_two_launches_and_one_buffer_all_reduced(cp):
    _, (x, gamma, beta, dy) = _data(cp)
    reduced = []
    ctx = _ctx(cp, gamma, beta, reduced)
    bn_op.bn_backward(ctx, dy, bn_op.bn_forward(ctx, [x])[1])  # the first step makes the workspace
    assert ("memset", "zeros") in cp.take()  # its counters zeroed once
    reduced.clear()
    y, cache = bn_op.bn_forward(ctx, [x])
    assert cp.take() == [("kernel", "bn_stats"), ("collective", "fwd_comm"), ("kernel", "bn_fwd")]
    (phase, stats), = reduced
    assert stats.shape == (2 * 3 + 1,) and stats.dtype == np.float64  # sums, squares and count: one buffer
    assert cache["stats"] is stats  # read by the apply as all-reduced, no copy
    dxs, grads = bn_op.bn_backward(ctx, dy, cache)
    assert cp.take() == [("kernel", "bn_bwd_sums"), ("collective", "bwd_comm"), ("kernel", "bn_bwd")]
    assert reduced[1][1].shape == (2 * 3,) and set(grads) == {"gamma", "beta"}
    assert grads["gamma"].dtype == gamma.dtype  # written in the parameters' format by the sums pass


def test_the_cache_keeps_only_what_backward_reads(cp):
    _, (x, gamma, beta, _) = _data(cp)
    y, cache = norm.batchnorm2d_forward(x, gamma, beta)
    assert set(cache) == {"x", "stats", "gamma", "eps"} and cache["x"] is x
    assert sum(a.nbytes for a in cache.values() if hasattr(a, "nbytes") and a is not x and a is not gamma) == 7 * 8


def test_no_zeroing_launch_and_the_counters_are_zero_after_every_pass(cp):
    _, (x, gamma, beta, dy) = _data(cp)
    norm.batchnorm2d_backward(dy, norm.batchnorm2d_forward(x, gamma, beta)[1])  # makes the workspace
    cp.take()
    for _ in range(2):
        norm.batchnorm2d_backward(dy, norm.batchnorm2d_forward(x, gamma, beta)[1])
    part, done = gpu_norm._WORKSPACE[0]
    assert not np.any(np.asarray(done))
    assert {g for g in cp.grids if g[0] == "bn_stats"} == {("bn_stats", (3, 2), (256,))}  # 6,400 elements: 2 parts
    kinds = {kind for kind, _ in cp.launches}
    assert kinds == {"kernel"}  # no memset, no elementwise op, no copy between the passes


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-6), (np.float16, 2e-3)])
@pytest.mark.parametrize("shape", [(4, 3, 40, 40), (6, 5), (2, 7, 3, 4)])
def test_the_passes_compute_what_kernels_norm_does(cp, dtype, tol, shape):
    (x64, g64, b64, dy64), (x, gamma, beta, dy) = _data(cp, shape, dtype)
    want_y, want_cache = norm.batchnorm2d_forward(x64, g64, b64)
    want = norm.batchnorm2d_backward(dy64, want_cache)
    y, cache = norm.batchnorm2d_forward(x, gamma, beta)
    got = norm.batchnorm2d_backward(dy, cache)
    assert cp.kernels() == ["bn_stats", "bn_fwd", "bn_bwd_sums", "bn_bwd"]
    scale = 1.0 if dtype == np.float32 else 4.0  # a 16-bit dgamma sums n rounded products
    for a, b, t in zip((y, *got), (want_y, *want), (tol, tol, tol * scale, tol * scale)):
        assert a.dtype == dtype
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), b, rtol=t, atol=t * np.abs(b).max())


def test_shards_summed_in_the_buffer_equal_the_whole_batch(cp):
    """What the executor does across ranks: each shard's stats buffer, summed (the allreduce), then
    each shard applies; and backward the same with its sums."""
    (x64, g64, b64, dy64), (x, gamma, beta, dy) = _data(cp, (4, 3, 40, 40))
    want_y, want_cache = norm.batchnorm2d_forward(x64, g64, b64)
    want_dx = norm.batchnorm2d_backward(dy64, want_cache)[0]
    halves, dys = [cp.ascontiguousarray(x[:2]), cp.ascontiguousarray(x[2:])], [dy[:2].copy(), dy[2:].copy()]
    stats = [norm.bn_local_sums(h) for h in halves]
    total = np.asarray(stats[0]) + np.asarray(stats[1])
    assert total[-1] == 4 * 40 * 40
    fwd = [norm.bn_forward_apply(h, cp.asarray(total), gamma, beta) for h in halves]
    bsums = [norm.bn_backward_local_sums(d, c) for d, (_, c) in zip(dys, fwd)]
    sums = cp.asarray(np.asarray(bsums[0][0]) + np.asarray(bsums[1][0]))
    dx = np.concatenate([np.asarray(norm.bn_backward_apply(d, c, sums)) for d, (_, c) in zip(dys, fwd)])
    np.testing.assert_allclose(np.concatenate([np.asarray(y) for y, _ in fwd]), want_y, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx, want_dx, rtol=2e-5, atol=2e-6)


def test_the_same_input_gives_the_same_sums(cp):
    """Partials added in a fixed order by the channel's last block: no atomics on the result."""
    _, (x, _, _, _) = _data(cp)
    assert np.array_equal(np.asarray(norm.bn_local_sums(x)), np.asarray(norm.bn_local_sums(x)))


def test_arrays_the_passes_do_not_take_run_the_array_module_code(cp):
    """A strided input (or float64) takes the numpy kernel's code on the device, with its launches."""
    _, (x, gamma, beta, _) = _data(cp)
    strided = x[:, :, ::2]
    stats = norm.bn_local_sums(strided)
    assert "bn_stats" not in cp.kernels() and stats.shape == (7,)
    y, cache = norm.bn_forward_apply(strided, stats, gamma, beta)
    assert "xhat" in cache and "bn_fwd" not in cp.kernels()
