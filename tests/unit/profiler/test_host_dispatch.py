"""A framework's per-op dispatch cost (profiler.timing.host_dispatch) and the framework file
fragment stating it (costmodel.frameworks.host_fragment): the statistics, the loop, a recorded
torch double, a missing framework refused in one line, and the fragment loading as a framework."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from costmodel.frameworks.framework import framework_from_dict
from costmodel.frameworks.host_fragment import host_fragment
from networks.errors import DnnplanError
from profiler.timing.host_dispatch import measure_host, per_call_stats, time_loop


def test_the_time_per_call_is_each_loops_over_its_calls_with_their_standard_deviation():
    mean, spread = per_call_stats([2.0e-3, 4.0e-3], 1000)
    assert mean == pytest.approx(3.0e-6) and spread == pytest.approx(2 ** 0.5 * 1e-6)
    assert per_call_stats([5e-3], 1000) == (pytest.approx(5e-6), 0.0)


def test_a_loop_calls_the_op_calls_times_and_synchronises_once():
    seen, ticks = [], iter([10.0, 10.5])
    got = time_loop(lambda: seen.append(1), 4, sync=lambda: seen.append("sync"), clock=lambda: next(ticks))
    assert got == 0.5 and seen == [1, 1, 1, 1, "sync"]


class _Torch(SimpleNamespace):
    """A recorded double of the torch calls `profile --host` makes (no GPU): it records each call."""

    def __init__(self):
        calls: list[str] = []

        def op(name):
            return lambda *a, **k: calls.append(name)
        super().__init__(__version__="2.9.0", calls=calls, cuda=SimpleNamespace(is_available=lambda: False),
                         ones=lambda *a, **k: calls.append("ones"), add=op("add"), mul=op("mul"), relu=op("relu"),
                         matmul=op("matmul"), nn=SimpleNamespace(functional=SimpleNamespace(conv2d=op("conv2d"))))


def test_torch_is_timed_op_by_op_with_a_warm_up_loop_where_it_imports():
    torch = _Torch()
    got = measure_host("torch", calls=10, repeats=3, importer=lambda name: torch)
    assert (got.framework, got.version, got.device) == ("torch", "2.9.0", "cpu")
    assert [o.name for o in got.ops] == ["add", "mul", "relu", "matmul 1x1", "conv2d 3x3", "add (autograd)"]
    assert torch.calls.count("conv2d") == 10 * (3 + 1)  # three loops and the warm-up's
    assert torch.calls.count("add") == 2 * 10 * 4  # add and add under autograd
    assert all(o.mean_s > 0 and o.spread_s >= 0 and o.repeats == 3 for o in got.ops)
    assert got.op_s == pytest.approx(sum(o.mean_s for o in got.ops) / 6)


class _Cupy(SimpleNamespace):
    """A recorded double of the cupy calls `profile --host --framework cupy` makes: each op's name."""

    def __init__(self, devices: int = 1):
        calls: list[str] = []

        def op(name):
            return lambda *a, **k: calls.append(name)

        def count():
            if not devices:
                raise RuntimeError("cudaErrorNoDevice")
            return devices
        super().__init__(__version__="14.2.0", calls=calls, float32="float32", ones=op("ones"), add=op("add"),
                         multiply=op("mul"), maximum=op("max"), matmul=op("matmul"), sum=op("sum"),
                         cuda=SimpleNamespace(runtime=SimpleNamespace(getDeviceCount=count),
                                              Device=lambda: SimpleNamespace(synchronize=op("sync"))))


def test_cupy_is_timed_on_the_gpu_and_refused_in_one_line_without_one():
    cp = _Cupy()
    got = measure_host("cupy", calls=10, repeats=3, importer=lambda name: cp)
    assert (got.framework, got.version, got.device) == ("cupy", "14.2.0", "cuda")
    assert [o.name for o in got.ops] == ["add", "mul", "relu", "matmul 1x1", "sum"]
    assert cp.calls.count("matmul") == 10 * 4 and cp.calls.count("sync") == 5 * 4  # each loop ends synchronised
    with pytest.raises(DnnplanError, match="cupy finds no usable CUDA device") as err:
        measure_host("cupy", importer=lambda name: _Cupy(devices=0))
    assert "\n" not in str(err.value)


def test_a_framework_not_installed_or_unknown_is_one_line():
    def missing(name):
        raise ImportError(name)
    with pytest.raises(DnnplanError) as err:
        measure_host("torch", importer=missing)
    assert "torch is not installed" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(DnnplanError, match="unknown --framework jax"):
        measure_host("jax")


def test_numpy_is_timed_here():
    got = measure_host("numpy", calls=50, repeats=2)
    assert got.device == "cpu" and len(got.ops) == 5 and got.op_s > 0


def test_the_fragment_is_a_framework_files_host_keys_measured_with_its_source():
    fragment = host_fragment(2.345678e-6, "torch", "2.9.0", "cuda", "x86_64, 2 cores", "2026-12-02")
    fw = framework_from_dict({"name": "mine", "about": "my torch", **fragment})
    assert fw.host.op_s.value == 2.35e-6 and fw.host.op_s.basis == "measured"
    assert "torch 2.9.0 on cuda, x86_64, 2 cores, 2026-12-02" in fw.host.op_s.source
