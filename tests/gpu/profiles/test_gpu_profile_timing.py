"""The profiler's harness times a kernel call on cupy, on operands of the call's shapes (skipped
without cupy + CUDA). `dnnplan profile` and the harness on the CPU: tests/cli/profile/test_profile_command.py."""

from __future__ import annotations

import pytest

from costmodel.calls.kernel_call import linear_call
from kernels.xp import gpu_available
from profiler.timing.harness import QUICK, build, time_call

pytestmark = pytest.mark.usefixtures("dnnplan_cache")


@pytest.mark.gpu
def test_cupy_timing_matches_kernel_shapes():
    if not gpu_available():
        pytest.skip("no cupy / CUDA device")
    import cupy as cp  # noqa: PLC0415 - optional GPU dependency, absent on CPU-only machines
    call = linear_call("linear.fwd", 512, 512, 512, True, "float32", 4)
    e = time_call(call, cp, QUICK)
    assert e.median_s > 0
    y = build(call, cp)()
    assert isinstance(y, cp.ndarray) and y.shape == (512, 512)
