"""The attention algorithm a plan chose for a layer reaches the kernel that runs it (issue 52): the
executor's attention op and the profiler's timing harness pass it on, and on a GPU array the
kernel dispatch runs cuDNN's fused attention for ``flash`` and the materialised GEMMs for
``materialized`` (kernels.cuda.attention), here on stand-in device arrays with the two GPU paths
recorded instead of run (no GPU on this machine; the GPU's own numerics: tests/gpu/kernels/test_gpu_kernels.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.calls.kernel_call import KernelCall
from costmodel.parallel.shard import input_layout, output_layout, weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import make_strategy
from executor.ops import attention as attention_op
from executor.ops.base import LayerCtx
from executor.runtime.synthetic import init_weights, take
from executor.runtime.timers import Timers
from kernels import attention as attention_kernels, KERNELS
from kernels.cuda import attention as cuda_attention
from networks.loader import load_network
from profiler.timing import harness


class _NoComms:
    def get(self, strategy, dims):
        return None


def _attention_ctx(algo: str) -> LayerCtx:
    net = load_network("tiny-gqa")
    layer = net.layer("h0.attn")
    strategy = make_strategy(1, {})
    in_ls = (input_layout(layer, strategy, 2, 0),)
    out_l = output_layout(layer, strategy, 2)
    full = init_weights(net, 0, np.float64)
    wl = weight_layouts(layer, strategy)
    weights = {w: take(full[(layer.name, w)], block(wl[w], 0)) for w, _ in layer.weights}
    return LayerCtx(layer, strategy, 0, 2, algo, in_ls, out_l, (block(in_ls[0], 0),), block(out_l, 0), _NoComms(),
                    Timers(), np, weights)


@pytest.mark.parametrize("planned,runs", [("flash", "flash"), ("materialized", "materialized"),
                                          ("flash+recompute", "flash"), ("", ""), ("recompute", "")])
def test_the_executor_op_runs_the_planned_attention_algorithm(monkeypatch, planned, runs):
    seen = []
    real = attention_op.attention_forward_packed  # the core on the fused projection's output

    def spy(qkv, heads, kv_heads, causal=False, algorithm=""):
        seen.append(algorithm)
        return real(qkv, heads, kv_heads, causal, algorithm)
    monkeypatch.setattr(attention_op, "attention_forward_packed", spy)
    ctx = _attention_ctx(planned)
    x = np.random.default_rng(0).standard_normal((2, 16, 32))
    attention_op.forward(ctx, [x])
    assert seen == [runs]


@pytest.mark.parametrize("algo,runs", [("flash", "flash"), ("", "materialized")])
@pytest.mark.parametrize("kernel", ["attention.fwd", "attention.bwd"])
def test_the_profiler_times_the_algorithm_the_call_prices(monkeypatch, algo, runs, kernel):
    """A materialised call (algorithm "" in the cost model) is timed materialised, not as the GPU's default."""
    seen = []
    real = KERNELS["attention.fwd"]

    def spy(q, k, v, causal=False, algorithm=""):
        seen.append(algorithm)
        return real(q, k, v, causal, algorithm)
    monkeypatch.setitem(KERNELS, "attention.fwd", spy)
    call = KernelCall(kernel, (1, 2, 4, 4, 8, 1), "float32", algo, 1, 1)
    harness.build(call, np)()
    assert seen and set(seen) == {runs}


class _DeviceArray:
    """A stand-in for a cupy array: what the dispatch and the algorithm choice read of one."""

    def __init__(self, shape, dtype="float16"):
        self.shape, self.dtype = shape, np.dtype(dtype)


_DeviceArray.__module__ = "cupy._core.core"  # kernels.dispatch tells device arrays by their type's module


@pytest.mark.parametrize("planned,runs", [("flash", "flash"), ("materialized", "materialized"), ("", "flash")])
def test_on_a_gpu_the_choice_reaches_the_fused_or_the_unfused_kernel(monkeypatch, planned, runs):
    ran = []
    monkeypatch.setattr(cuda_attention, "fits", lambda *arrays: True)
    monkeypatch.setattr(cuda_attention, "_flash_forward", lambda *a: ran.append("flash") or ("o", "stats"))
    monkeypatch.setattr(cuda_attention, "_materialized_forward", lambda *a: ran.append("materialized") or ("o", "p"))
    q, kv = _DeviceArray((2, 4, 16, 8)), _DeviceArray((2, 2, 16, 8))  # grouped-query: 2 key/value heads
    _, cache = attention_kernels.attention_forward(q, kv, kv, True, algorithm=planned)
    assert ran == [runs] and cache["algorithm"] == runs
