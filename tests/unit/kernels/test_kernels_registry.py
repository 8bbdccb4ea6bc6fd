"""The kernel registry, and the kernels the executor calls besides the layers': the SGD momentum
update and the reshard block copies (with their price in both compute models)."""

from __future__ import annotations

import numpy as np

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import DEFAULT_MACHINE, load_machine
from costmodel.calls.layer_calls import reshard_copy_call
from costmodel.compute.profile_table import ProfileTable
from costmodel.compute.profiled import ProfiledCompute
from kernels import KERNELS
from kernels.optimizer import sgd_momentum_update
from profiler.timing.harness import QUICK, time_call


def test_registry_names_callables():
    assert {"conv2d.fwd", "conv2d.bwd_data", "conv2d.bwd_weights", "gemm", "linear.fwd",
            "maxpool2d.fwd", "batchnorm.local_sums", "softmax_xent.fwd", "attention.bwd"} <= set(KERNELS)
    assert all(callable(f) for f in KERNELS.values())


def test_sgd_momentum_update_is_pytorch_sgd_in_place():
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
