"""The GPU kernel set's pure parts on the CPU: precisions and their types, the cuBLAS operand
mapping (emulated in numpy as cuBLAS reads memory), the CUDA source and the names it exports,
dispatch by array module, dropout's threshold, the profiler's operand rotation, the attention
algorithm rule. No GPU: what these prove is dnnplan's arithmetic about the libraries, not the
libraries (tests/gpu/kernels/test_gpu_kernels.py runs the kernels on a GPU)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import kernels
from costmodel.choices.precision import DATASHEET_ONLY, PRECISIONS as COST_PRECISIONS
from kernels import dispatch
from kernels.cuda import IMPLEMENTATIONS, attention, gemm, precision, source
from kernels.cuda.elementwise import dropout_threshold
from profiler.timing.gpu import DEFAULT_L2_BYTES, rotation

from tests.support.paths import ROOT


def test_precisions_are_the_cost_models():
    # every precision the cost model prices but those priced from the datasheet alone (fp8)
    assert set(precision.PRECISIONS) == set(COST_PRECISIONS) - DATASHEET_ONLY and DATASHEET_ONLY <= set(COST_PRECISIONS)
    for name, p in ((n, p) for n, p in COST_PRECISIONS.items() if n not in DATASHEET_ONLY):
        assert precision.STORAGE[name] == p.storage
        assert precision.supports("conv2d", name) and precision.supports("linear", name)
    assert not precision.supports("attention.flash", "fp32") and precision.supports("attention.flash", "bf16")
    assert all(precision.TOLERANCE[p] <= precision.CHECK_TOLERANCE[p] for p in precision.PRECISIONS)


def test_float32_mode_sets_tf32_compute_only_for_float32():
    try:
        precision.set_precision("tf32")
        assert precision.compute_type("float32") == precision.CUBLAS_COMPUTE_32F_FAST_TF32
        assert precision.compute_type("bfloat16") == precision.CUBLAS_COMPUTE_32F  # float32 accumulation
        assert precision.precision_of("float32") == "tf32" and precision.precision_of("float16") == "fp16"
        precision.set_precision("fp32")
        assert precision.compute_type("float32") == precision.CUBLAS_COMPUTE_32F
        assert precision.compute_type("float64") == precision.CUBLAS_COMPUTE_64F
        with pytest.raises(ValueError):
            precision.set_precision("int8")
    finally:
        precision.set_precision("fp32")


def _cublas_gemm(ops: dict, a_buf, b_buf, m, n, k):
    """cublasGemmEx as cuBLAS reads memory: column-major operands with leading dimensions;
    returns the column-major m x n result's buffer (the call's first operand is B, second A)."""
    def col_major(buf, rows, cols, ld):
        return np.array([[buf[c * ld + r] for c in range(cols)] for r in range(rows)])

    ra, ca = (ops["k"], ops["m"]) if ops["transa"] else (ops["m"], ops["k"])
    rb, cb = (ops["n"], ops["k"]) if ops["transb"] else (ops["k"], ops["n"])
    first = col_major(b_buf, ra, ca, ops["lda"])
    second = col_major(a_buf, rb, cb, ops["ldb"])
    first = first.T if ops["transa"] else first
    second = second.T if ops["transb"] else second
    c = first @ second  # (ops m) x (ops n), column-major
    return c.T.reshape(-1)  # its buffer: row-major of the transpose


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_cublas_operands_compute_the_row_major_product(trans_a, trans_b):
    rng = np.random.default_rng(0)
    m, n, k = 3, 5, 4
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    b = rng.standard_normal((n, k) if trans_b else (k, n))
    ops = gemm.operands(m, n, k, trans_a, trans_b)
    got = _cublas_gemm(ops, a.reshape(-1), b.reshape(-1), m, n, k).reshape(m, n)
    want = (a.T if trans_a else a) @ (b.T if trans_b else b)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert ops["ldc"] == n


def test_every_launched_kernel_is_in_the_source():
    launched = set()
    for path in (ROOT / "kernels" / "cuda").glob("*.py"):
        launched |= set(re.findall(r'(?<![\w.])run(?:_grid)?\(\s*"(\w+)"', path.read_text()))
    names = source.kernel_names()
    assert launched and launched <= set(names), launched - set(names)
    assert len(names) == len(set(names))
    for dt in source.DTYPES:
        text = source.source(dt)
        assert text.count("{") == text.count("}") and text.count("(") == text.count(")")
    with pytest.raises(ValueError):
        source.source("float64")


def test_every_gpu_kernel_has_a_numpy_kernel_that_dispatches_to_it():
    assert set(IMPLEMENTATIONS) == set(dispatch.GPU)
    timed = {name: fn for name, fn in kernels.KERNELS.items() if name in IMPLEMENTATIONS}
    assert len(timed) >= 28
    for name, fn in timed.items():  # a wrapper (the packed attention cores) names the kernel it reaches
        assert getattr(getattr(fn, "reaches", fn), "kernel_name", None) == name, name


class _DeviceLike:
    """An object whose type lives in a module named cupy, as cupy's arrays' do."""


_DeviceLike.__module__ = "cupy._core.core"


def test_dispatch_routes_by_array_module(monkeypatch):
    seen = []
    monkeypatch.setitem(dispatch.GPU, "test.kernel", lambda x, *, fallback: seen.append(("gpu", fallback)) or "gpu")

    @dispatch.device_kernel("test.kernel")
    def kernel(x):
        return "host"

    assert kernel(np.zeros(2)) == "host" and kernel(_DeviceLike()) == "gpu"
    assert seen[0][1].__name__ == "kernel" and seen[0][1](np.zeros(1)) == "host"  # the numpy kernel itself
    assert dispatch.on_device(([_DeviceLike()],)) and dispatch.on_device(({"p": _DeviceLike()},))
    assert not dispatch.on_device(({"p": np.zeros(1)},)) and not dispatch.on_device(())


def test_dropout_drops_the_rate_of_32_bit_hashes():
    assert dropout_threshold(0.0) == 0 and dropout_threshold(1.0) == 2**32 - 1
    assert dropout_threshold(0.1) == round(0.1 * 2**32)


def test_operands_rotate_past_the_l2_cache():
    assert rotation(200 * 2**20) == 1  # larger than L2 alone
    assert rotation(DEFAULT_L2_BYTES) == 2
    assert rotation(1024) == 8  # at most 8 sets
    assert rotation(10 * 2**20, l2_bytes=60 * 2**20) == 8 and rotation(30 * 2**20, l2_bytes=60 * 2**20) == 4


def test_attention_runs_flash_where_cudnn_takes_it():
    assert attention.chosen("", "bfloat16", 64) == "flash"
    assert attention.chosen("", "float32", 64) == "materialized"  # cuDNN's SDPA takes 16-bit operands
    assert attention.chosen("flash", "float16", 60) == "materialized"  # head size not a multiple of 8
    assert attention.chosen("materialized", "bfloat16", 64) == "materialized"
    with pytest.raises(ValueError):
        attention.chosen("fused", "bfloat16", 64)
