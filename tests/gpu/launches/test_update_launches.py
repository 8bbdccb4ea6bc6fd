"""Every weight's SGD update in one launch per storage format (kernels.cuda.multi_tensor), on the
recording cupy double (tests/support/doubles/fake_cupy.py) with a numpy model of the pass
(tests/support/doubles/gpu_kernel_models.py): what a step launches and copies, and the arithmetic against one
kernels.optimizer update per weight. Runs without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.cuda import multi_tensor
from kernels.optimizer import sgd_momentum_update, sgd_momentum_update_many
from kernels.xp import gpu_available, storage_dtype

from tests.support.doubles.fake_cupy import FakeCupy
from tests.support.doubles.gpu_kernel_models import UPDATE

RNG = np.random.default_rng(67)
#: a small network's weights: a convolution, its bias, a big linear layer, an empty one, a norm's gamma
SIZES = [(16, 3, 3, 3), (16,), (64, 9000), (0,), (7,)]


@pytest.fixture
def cp(monkeypatch):
    return FakeCupy(UPDATE).install(monkeypatch)


def _tensors(cp, dtype, mixed=False):
    """(copies, device lists): weights, momenta, gradients, masters (None without); the copies are
    device arrays too, for the one-weight GPU kernels to update."""
    ws = [RNG.standard_normal(s).astype(dtype) for s in SIZES]
    vs = [RNG.standard_normal(s).astype(np.float32 if mixed else dtype) for s in SIZES]
    gs = [RNG.standard_normal(s).astype(dtype) for s in SIZES]
    ms = [w.astype(np.float32) for w in ws] if mixed else [None] * len(SIZES)
    host = [[cp.asarray(a) for a in ws], [cp.asarray(a) for a in vs], [cp.asarray(a) for a in gs],
            [None if a is None else cp.asarray(a) for a in ms]]
    dev = [[cp.asarray(a) for a in ws], [cp.asarray(a) for a in vs], [cp.asarray(a) for a in gs],
           [None if a is None else cp.asarray(a) for a in ms]]
    return host, dev


@pytest.mark.parametrize("dtype,mixed", [(np.float32, False), (np.float16, False), (np.float16, True)])
def test_one_launch_updates_every_weight_as_one_call_each_would(cp, dtype, mixed):
    """The same numbers as the one-weight GPU kernels (sgd_same, sgd_mixed), launch for launch."""
    (hw, hv, hg, hm), (ws, vs, gs, ms) = _tensors(cp, dtype, mixed)
    cp.take()
    sgd_momentum_update_many(ws, vs, gs, 0.01, 0.9, ms)
    launches = cp.take()
    assert [k for k in launches if k[0] == "kernel"] == [("kernel", "sgd_many")]
    assert ("to_device", "asarray") in launches  # the first step makes the table
    (name, grid, block), = cp.grids
    assert grid == (sum(-(-int(np.prod(s)) // multi_tensor.CHUNK) for s in SIZES),)
    for i in range(len(SIZES)):
        sgd_momentum_update(hw[i], hv[i], hg[i], 0.01, 0.9, master=hm[i])
    assert cp.kernels().count("sgd_mixed" if mixed else "sgd_same") == len(SIZES)
    for i in range(len(SIZES)):
        np.testing.assert_array_equal(np.asarray(ws[i]), hw[i])
        np.testing.assert_array_equal(np.asarray(vs[i]), hv[i])
        if mixed:
            np.testing.assert_array_equal(np.asarray(ms[i]), hm[i])


def test_a_later_step_copies_the_gradients_pointers_only_when_they_moved(cp):
    _, (ws, vs, gs, ms) = _tensors(cp, np.float32)
    sgd_momentum_update_many(ws, vs, gs, 0.01, 0.9, ms)
    cp.take()
    sgd_momentum_update_many(ws, vs, gs, 0.01, 0.9, ms)  # the pool gave the same addresses
    assert cp.take() == [("kernel", "sgd_many")]
    moved = [cp.asarray(np.asarray(g) * 2) for g in gs]
    cp.take()
    sgd_momentum_update_many(ws, vs, moved, 0.01, 0.9, ms)
    assert cp.take() == [("to_device", "memcpyAsync"), ("kernel", "sgd_many")]
    assert len(multi_tensor.PREPARED) == 1  # the weights did not move: the same table


def test_weights_of_two_formats_are_two_launches(cp):
    (_, _, _, _), (ws, vs, gs, ms) = _tensors(cp, np.float32)
    (_, _, _, _), (ws16, vs16, gs16, ms16) = _tensors(cp, np.float16, mixed=True)
    cp.take()
    sgd_momentum_update_many(ws + ws16, vs + vs16, gs + gs16, 0.01, 0.9, ms + ms16)
    assert cp.kernels() == ["sgd_many", "sgd_many"]


def test_arrays_the_pass_does_not_take_are_updated_one_by_one(cp):
    """A strided gradient: that group runs the per-weight kernels (each its own launch)."""
    (hw, hv, hg, _), (ws, vs, gs, ms) = _tensors(cp, np.float32)
    gs[0] = cp.asarray(np.asfortranarray(hg[0]))
    cp.take()
    sgd_momentum_update_many(ws, vs, gs, 0.01, 0.9, ms)
    assert "sgd_many" not in cp.kernels()
    assert cp.kernels().count("sgd_same") == len(SIZES) - 1  # the strided one: the array-module code
    sgd_momentum_update(hw[2], hv[2], hg[2], 0.01, 0.9)
    np.testing.assert_array_equal(np.asarray(ws[2]), np.asarray(hw[2]))


@pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")
@pytest.mark.parametrize("dtype,mixed", [("float32", False), ("bfloat16", True)])
def test_on_a_gpu_one_launch_equals_one_kernel_per_weight(dtype, mixed):
    import cupy  # noqa: PLC0415 - only where a GPU is

    rng = np.random.default_rng(3)
    store = storage_dtype(dtype)

    def make():
        ws = [cupy.asarray(rng.standard_normal(s).astype(np.float32).astype(store)) for s in SIZES]
        vs = [cupy.zeros(s, dtype=cupy.float32 if mixed else ws[i].dtype) for i, s in enumerate(SIZES)]
        gs = [cupy.asarray(rng.standard_normal(s).astype(np.float32).astype(store)) for s in SIZES]
        ms = [w.astype(cupy.float32) if mixed else None for w in ws]
        return ws, vs, gs, ms

    a = make()
    b = tuple([x.copy() if x is not None else None for x in group] for group in a)
    for _ in range(2):
        sgd_momentum_update_many(*a[:3], 0.01, 0.9, a[3])
        for i in range(len(SIZES)):
            sgd_momentum_update(b[0][i], b[1][i], b[2][i], 0.01, 0.9, master=b[3][i])
    for x, y in zip(a[0] + a[1], b[0] + b[1]):  # bfloat16 widens to float32 exactly: equal floats, equal bits
        np.testing.assert_array_equal(cupy.asnumpy(x).astype(np.float32), cupy.asnumpy(y).astype(np.float32))
