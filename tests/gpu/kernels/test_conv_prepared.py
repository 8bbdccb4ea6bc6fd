"""The prepared path of a convolution call site (kernels.cuda.conv): the first call with a ``site``
resolves the geometry, engine, handle and workspace; every later call with the same operands only
executes the plan. On the recording cuDNN frontend (tests/support/doubles/fake_cudnn.py) and cupy double
(tests/support/doubles/fake_cupy.py); runs without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import conv as kconv
from kernels.cuda import conv, cudnn_graphs, libs, precision
from kernels.xp import gpu_available

from tests.gpu.kernels.test_gpu_engines import ENGINES
from tests.support.doubles.fake_cudnn import fake_module
from tests.support.doubles.fake_cupy import FakeCupy


@pytest.fixture
def frontend(monkeypatch):
    graphs, calls = [], []
    cp = FakeCupy().install(monkeypatch)
    monkeypatch.setattr(libs, "cudnn", lambda: fake_module(ENGINES, graphs, calls))
    monkeypatch.setattr(conv, "_time", lambda g, tensors, i: float(i))
    monkeypatch.setattr(conv, "PINS", {})
    monkeypatch.setattr(conv, "CHOICES", {})
    monkeypatch.setattr(cudnn_graphs, "_HANDLES", {})
    monkeypatch.setattr(cudnn_graphs, "_WORKSPACE", {})
    precision.set_precision("fp32")
    yield cp, graphs, calls
    precision.set_precision("fp32")


def _arrays(cp, x_shape=(2, 8, 10, 10), w_shape=(6, 8, 3, 3)):
    x = cp.asarray(np.ones(x_shape, np.float32))
    w = cp.asarray(np.ones(w_shape, np.float32))
    return x, w


def _names(calls):
    return [name for name, _ in calls]


@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (1, 0, 1, 0)])
def test_a_second_call_only_executes_the_plan(frontend, padding):
    cp, graphs, calls = frontend
    x, w = _arrays(cp)
    site = {}
    y = kconv.conv2d_forward(x, w, None, 1, padding, 1, 1, "im2col", site=site)
    first = _names(calls)
    assert "pygraph" in first and "create_handle" in first and "set_stream" in first
    calls.clear()
    cp.take()
    y2 = kconv.conv2d_forward(x, w, None, 1, padding, 1, 1, "im2col", site=site)
    assert _names(calls) == ["execute_plan_at_index"]  # no graph, handle, stream or workspace asked again
    assert y2.shape == y.shape == (2, 6, 10 if padding[0] == padding[1] else 9, 10 if padding[2] == padding[3] else 9)
    padded = padding[0] != padding[1]
    assert cp.take() == ([("memset", "zeros")] if padded else [])  # only the explicit padding's copy launches


def test_each_pass_of_a_layer_is_prepared_once_and_kept_in_its_site(frontend):
    cp, graphs, calls = frontend
    x, w = _arrays(cp)
    site = {}
    y = kconv.conv2d_forward(x, w, None, 1, 1, 1, 1, "im2col", site=site)
    dy = cp.asarray(np.ones(y.shape, np.float32))
    for step in range(3):
        if step == 1:
            assert len(graphs) == 3  # one graph per pass, built on its first call
            calls.clear()
        kconv.conv2d_forward(x, w, None, 1, 1, 1, 1, "im2col", site=site)
        kconv.conv2d_backward_data(dy, w, x.shape, 1, 1, 1, 1, "im2col", site=site)
        kconv.conv2d_backward_weights(dy, x, w.shape, 1, 1, 1, 1, "im2col", site=site)
    assert set(site) == {"fwd", "bwd_data", "bwd_weights"}
    assert _names(calls) == ["execute_plan_at_index"] * 6 and len(graphs) == 3


def test_other_operands_prepare_again_and_a_grown_workspace_is_followed(frontend):
    cp, graphs, calls = frontend
    x, w = _arrays(cp)
    site = {}
    kconv.conv2d_forward(x, w, None, 1, 1, 1, 1, "im2col", site=site)
    before = site["fwd"]
    bigger, _ = _arrays(cp, (4, 8, 10, 10))
    kconv.conv2d_forward(bigger, w, None, 1, 1, 1, 1, "im2col", site=site)
    assert site["fwd"] is not before and site["fwd"].out_shape == (4, 6, 10, 10)
    cudnn_graphs.workspace(1 << 30)  # another call needs a larger one: it is made again
    kconv.conv2d_forward(bigger, w, None, 1, 1, 1, 1, "im2col", site=site)
    assert site["fwd"].workspace_ptr == cudnn_graphs.workspace(0).data.ptr


def test_without_a_site_every_call_resolves_as_the_profiler_times_it(frontend):
    cp, graphs, calls = frontend
    x, w = _arrays(cp)
    kconv.conv2d_forward(x, w, None, 1, 1, 1, 1, "im2col")
    calls.clear()
    kconv.conv2d_forward(x, w, None, 1, 1, 1, 1, "im2col")
    assert _names(calls) == ["set_stream", "get_workspace_size_plan_at_index", "execute_plan_at_index"]
    assert len(graphs) == 1  # the choice is cached; the stream and the workspace are asked again


@pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")
@pytest.mark.parametrize("padding", [(1, 1, 1, 1), (1, 0, 2, 1)])
def test_on_a_gpu_the_prepared_path_computes_what_the_resolving_one_does(padding):
    import cupy  # noqa: PLC0415 - only where a GPU is

    rng = np.random.default_rng(5)
    x = cupy.asarray(rng.standard_normal((2, 8, 11, 9)).astype(np.float32))
    w = cupy.asarray(rng.standard_normal((6, 8, 3, 3)).astype(np.float32))
    site = {}
    args = ((2, 1), padding, (1, 1), 1, "im2col")
    for _ in range(2):  # the first call prepares, the second runs prepared
        y = kconv.conv2d_forward(x, w, None, *args, site=site)
        dy = cupy.ones_like(y)
        dx = kconv.conv2d_backward_data(dy, w, x.shape, *args, site=site)
        dw, _ = kconv.conv2d_backward_weights(dy, x, w.shape, *args, site=site)
    for got, want in ((y, kconv.conv2d_forward(x, w, None, *args)),
                      (dx, kconv.conv2d_backward_data(dy, w, x.shape, *args)),
                      (dw, kconv.conv2d_backward_weights(dy, x, w.shape, *args)[0])):
        assert got.shape == want.shape
        np.testing.assert_allclose(cupy.asnumpy(got), cupy.asnumpy(want), rtol=1e-5, atol=1e-5)
