"""GEMMs through cuBLAS (``cublasGemmEx`` / ``cublasGemmStridedBatchedEx`` via cupy.cuda.cublas), in
the operands' format with float32 accumulation, TF32 when the process runs tf32
(kernels.cuda.precision.compute_type); and the fully connected layer on them (kernels.gemm's
signatures).

cupy.matmul reaches cuBLAS for 2-D operands but raises TypeError on batched bfloat16 (the H100
probe, 2026-11-27), and picks its own compute type; calling cuBLAS directly gives one path for
every format and batch, with the compute type stated. cuBLAS is column-major: a row-major
``C = op(A) op(B)`` is computed as the column-major ``C^T = op(B)^T op(A)^T``, which reads the
row-major buffers as they are (:func:`operands`, pure, tested on the CPU). While a CUDA graph
captures the step, the same calls go to cuBLAS past CuPy, which refuses them
(kernels.cuda.cublas_direct).
"""

from __future__ import annotations

from typing import Callable

import numpy

from kernels.cuda import cublas_direct, libs
from kernels.cuda.launch import fits, from_float32, i64, run
from kernels.cuda.precision import CUBLAS_COMPUTE_64F, CUDA_DATA_TYPE, compute_type
from kernels.cuda.reduce import column_sums

OP_N, OP_T = 0, 1
GEMM_DEFAULT = -1


def operands(m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> dict:
    """cuBLAS's arguments for row-major ``C (m x n) = op(A) op(B)`` with ``A`` stored (m, k), or
    (k, m) when ``trans_a``, and ``B`` stored (k, n), or (n, k) when ``trans_b``: the call computes
    ``C^T = op(B)^T op(A)^T`` in column-major terms, B first."""
    return {"transa": OP_T if trans_b else OP_N, "transb": OP_T if trans_a else OP_N,
            "m": n, "n": m, "k": k, "lda": k if trans_b else n, "ldb": m if trans_a else k, "ldc": n}


def _dims(a, b, trans_a: bool, trans_b: bool) -> tuple[int, int, int, int, int, int]:
    """(m, n, k, batch, batch of a, batch of b); a batch of 1 is broadcast."""
    m, ka = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if ka != kb:
        raise ValueError(f"gemm: inner sizes differ ({ka} and {kb})")
    ba = a.shape[0] if a.ndim == 3 else 1
    bb = b.shape[0] if b.ndim == 3 else 1
    batch = max(ba, bb)
    if ba not in (1, batch) or bb not in (1, batch):
        raise ValueError(f"gemm: batches {ba} and {bb} do not broadcast")
    return int(m), int(n), int(ka), int(batch), int(ba), int(bb)


def matmul(a, b, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0):
    """``alpha op(a) op(b)`` for 2-D or 3-D (batched) operands of one format."""
    cp = libs.cupy()
    a, b = cp.ascontiguousarray(a), cp.ascontiguousarray(b)
    if a.dtype != b.dtype or a.dtype.name not in CUDA_DATA_TYPE or a.ndim not in (2, 3) or b.ndim not in (2, 3):
        raise ValueError(f"gemm: operands {a.dtype}{a.shape} and {b.dtype}{b.shape}")
    m, n, k, batch, ba, bb = _dims(a, b, trans_a, trans_b)
    batched = a.ndim == 3 or b.ndim == 3
    c = cp.empty((batch, m, n) if batched else (m, n), dtype=a.dtype)
    if c.size == 0:
        return c
    if k == 0:
        c.fill(0)
        return c
    ops = operands(m, n, k, trans_a, trans_b)
    code, ctype = CUDA_DATA_TYPE[a.dtype.name], compute_type(a.dtype.name)
    scalar = numpy.float64 if ctype == CUBLAS_COMPUTE_64F else numpy.float32
    al, be = numpy.array([alpha], dtype=scalar), numpy.array([0.0], dtype=scalar)
    direct = cublas_direct.captured_handle()  # a CUDA graph capturing: cuBLAS called past CuPy's wrappers
    cublas, handle = ((cp.cuda.cublas, cp.cuda.device.get_cublas_handle()) if direct is None
                      else (cublas_direct, direct))
    if not batched:
        cublas.gemmEx(handle, ops["transa"], ops["transb"], ops["m"], ops["n"], ops["k"], al.ctypes.data,
                      b.data.ptr, code, ops["lda"], a.data.ptr, code, ops["ldb"], be.ctypes.data,
                      c.data.ptr, code, ops["ldc"], ctype, GEMM_DEFAULT)
    else:
        cublas.gemmStridedBatchedEx(handle, ops["transa"], ops["transb"], ops["m"], ops["n"], ops["k"], al.ctypes.data,
                                    b.data.ptr, code, ops["lda"], 0 if bb == 1 else k * n,
                                    a.data.ptr, code, ops["ldb"], 0 if ba == 1 else m * k, be.ctypes.data,
                                    c.data.ptr, code, ops["ldc"], m * n, batch, ctype, GEMM_DEFAULT)
    return c


def gemm(a, b, trans_a=False, trans_b=False, *, fallback: Callable):
    if a.ndim > 3 or b.ndim > 3:
        return fallback(a, b, trans_a, trans_b)
    return matmul(a, b, trans_a, trans_b)


def _add_bias(y, b):
    if b is None:
        return y
    b = b.astype(y.dtype, copy=False)
    if fits(y, b):
        run("bias_rows", y.dtype.name, y.size, (y, b, i64(y.size), i64(b.size)))
    else:
        y += b
    return y


def _bias_grad(dy2):
    if fits(dy2):
        return from_float32(column_sums(dy2)[0], dy2.dtype)
    return dy2.sum(axis=0)


def linear_forward(x, w, b=None, *, fallback: Callable):
    lead = x.shape[:-1]
    y = matmul(x.reshape(-1, x.shape[-1]), w, trans_b=True)
    return _add_bias(y, b).reshape(*lead, w.shape[0])


def linear_backward(dy, x, w, with_bias=True, *, fallback: Callable):
    f, c = w.shape
    dy2 = libs.cupy().ascontiguousarray(dy.reshape(-1, f))
    dx = matmul(dy2, w).reshape(*x.shape)
    dw = matmul(dy2, x.reshape(-1, c), trans_a=True)
    return dx, dw, (_bias_grad(dy2) if with_bias else None)


def linear_backward_data(dy, w, *, fallback: Callable):
    f, c = w.shape
    return matmul(dy.reshape(-1, f), w).reshape(*dy.shape[:-1], c)


def linear_backward_weights(dy, x, with_bias=True, *, fallback: Callable):
    f, c = dy.shape[-1], x.shape[-1]
    dy2 = libs.cupy().ascontiguousarray(dy.reshape(-1, f))
    return matmul(dy2, x.reshape(-1, c), trans_a=True), (_bias_grad(dy2) if with_bias else None)
