"""The stopping rule every timing loop shares (profiler.timing.harness.enough; the CPU harness and the
GPU's CUDA-event loop, profiler.timing.gpu): at least min_reps samples, then a tight enough
median, max_reps samples or the time cap, whichever comes first."""

import time

from costmodel.calls.kernel_call import KernelCall
from profiler.timing.harness import TimingPolicy, enough

CALL = KernelCall("relu.fwd", (1000,), "float32", "", 1000, 8000)
POLICY = TimingPolicy(min_reps=3, max_reps=6, rel_ci=0.03, time_cap_s=60.0)


def test_fewer_than_min_reps_is_never_enough():
    assert not enough([1e-3, 1e-3], CALL, POLICY, time.perf_counter())


def test_identical_samples_are_enough_at_min_reps():
    assert enough([1e-3] * 3, CALL, POLICY, time.perf_counter())


def test_scattered_samples_go_on_until_max_reps():
    scattered = [1e-3, 3e-3, 0.5e-3, 2e-3, 4e-3]
    assert not enough(scattered, CALL, POLICY, time.perf_counter())
    assert enough(scattered + [1e-3], CALL, POLICY, time.perf_counter())


def test_the_time_cap_ends_scattered_samples():
    scattered = [1e-3, 3e-3, 0.5e-3]
    assert enough(scattered, CALL, POLICY, time.perf_counter() - 61.0)
