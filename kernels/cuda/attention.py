"""The attention core on the GPU, in the two algorithms the planner names
(costmodel/calls/attention.py: ``ATTENTION_ALGORITHMS = ("flash", "materialized")``):

* ``flash``: cuDNN's fused scaled dot-product attention (the frontend's ``sdpa`` and
  ``sdpa_backward`` graphs): the score matrix never leaves the chip; the forward keeps the output
  and each row's softmax statistics (float32) for the backward, which recomputes the scores
  (Dao et al., "FlashAttention", 2022). cuDNN runs it on float16 and bfloat16 operands with a head
  size that is a multiple of 8 up to 256.
* ``materialized``: the scores written to memory, as kernels.attention and Megatron-LM's unfused
  attention do: batched cuBLAS GEMMs (``q k^T``, ``p v``; backward ``p^T do``, ``do v^T``,
  ``ds k``, ``ds^T q``) and one fused pass each for the masked, scaled softmax and its backward.

``algorithm=""`` is the device's default: flash where cuDNN runs it, else materialized; a flash
request cuDNN cannot run (float32, an odd head size) runs materialized too, and the cache's
``algorithm`` says which ran. q: (N, heads, S, dh); k, v: (N, kv_heads, S, dh), ``kv_heads`` dividing
``heads`` (grouped-query attention: cuDNN's SDPA takes fewer key/value heads as they are; the
materialised GEMMs repeat each key/value head over its query heads and sum their gradients back);
causal masks key j > query i, aligned to the end when Sq < Sk (cuDNN's bottom-right causal mask then).
"""

from __future__ import annotations

import math
from typing import Callable

from kernels.cuda import libs
from kernels.cuda.cudnn_graphs import CUDNN_GRAPHS, cudnn_type, execute, handle, strides
from kernels.cuda.gemm import matmul
from kernels.cuda.launch import f32, fits, i32, i64, run_grid

ALGORITHMS = ("flash", "materialized")


def flash_supported(dtype_name: str, dh: int) -> bool:
    """Whether cuDNN's fused attention takes these operands (module docstring)."""
    return dtype_name in ("float16", "bfloat16") and dh % 8 == 0 and dh <= 256


def chosen(algorithm: str, dtype_name: str, dh: int) -> str:
    """The algorithm that runs for a request (module docstring)."""
    if algorithm not in ("", *ALGORITHMS):
        raise ValueError(f"unknown attention algorithm {algorithm!r}; choose one of {ALGORITHMS}")
    if algorithm in ("", "flash") and flash_supported(dtype_name, dh):
        return "flash"
    return "materialized"


def _mask_args(causal: bool, sq: int, sk: int) -> dict:
    if not causal:
        return {}
    return {"use_causal_mask": True} if sq == sk else {"use_causal_mask_bottom_right": True}


def _flash_fwd_graph(shape_q, shape_k, dtype_name, causal, scale):
    cudnn = libs.cudnn()
    io = cudnn_type(dtype_name)
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle())
    q = g.tensor(name="Q", dim=list(shape_q), stride=strides(shape_q), data_type=io)
    k = g.tensor(name="K", dim=list(shape_k), stride=strides(shape_k), data_type=io)
    v = g.tensor(name="V", dim=list(shape_k), stride=strides(shape_k), data_type=io)
    o, stats = g.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=True, attn_scale=scale,
                      **_mask_args(causal, shape_q[2], shape_k[2]))
    o.set_output(True).set_dim(list(shape_q)).set_stride(strides(shape_q)).set_data_type(io)
    stats.set_output(True).set_data_type(cudnn.data_type.FLOAT)
    g.build([cudnn.heur_mode.A])
    return g, (q, k, v, o, stats)


def _flash_bwd_graph(shape_q, shape_k, dtype_name, causal, scale):
    cudnn = libs.cudnn()
    io = cudnn_type(dtype_name)
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                      compute_data_type=cudnn.data_type.FLOAT, handle=handle())
    q = g.tensor(name="Q", dim=list(shape_q), stride=strides(shape_q), data_type=io)
    k = g.tensor(name="K", dim=list(shape_k), stride=strides(shape_k), data_type=io)
    v = g.tensor(name="V", dim=list(shape_k), stride=strides(shape_k), data_type=io)
    o = g.tensor(name="O", dim=list(shape_q), stride=strides(shape_q), data_type=io)
    do = g.tensor(name="dO", dim=list(shape_q), stride=strides(shape_q), data_type=io)
    stats_shape = (*shape_q[:3], 1)
    stats = g.tensor(name="stats", dim=list(stats_shape), stride=strides(stats_shape),
                     data_type=cudnn.data_type.FLOAT)
    dq, dk, dv = g.sdpa_backward(name="sdpa_backward", q=q, k=k, v=v, o=o, dO=do, stats=stats, attn_scale=scale,
                                 **_mask_args(causal, shape_q[2], shape_k[2]))
    for t, shape in ((dq, shape_q), (dk, shape_k), (dv, shape_k)):
        t.set_output(True).set_dim(list(shape)).set_stride(strides(shape)).set_data_type(io)
    g.build([cudnn.heur_mode.A])
    return g, (q, k, v, o, do, stats, dq, dk, dv)


def _graph(kind: str, q, k, causal: bool, scale: float):
    key = (kind, tuple(q.shape), tuple(k.shape), q.dtype.name, bool(causal), libs.cupy().cuda.Device().id)
    got = CUDNN_GRAPHS.get(key)
    if got is None:
        build = _flash_fwd_graph if kind == "sdpa" else _flash_bwd_graph
        got = CUDNN_GRAPHS[key] = build(tuple(q.shape), tuple(k.shape), q.dtype.name, causal, scale)
    return got


def _flash_forward(q, k, v, causal: bool, scale: float):
    cp = libs.cupy()
    g, (tq, tk, tv, to, ts) = _graph("sdpa", q, k, causal, scale)
    o = cp.empty_like(q)
    stats = cp.empty((*q.shape[:3], 1), dtype=cp.float32)
    execute(g, {tq: q, tk: k, tv: v, to: o, ts: stats})
    return o, stats


def _flash_backward(do, c):
    cp = libs.cupy()
    q, k, v = c["q"], c["k"], c["v"]
    g, (tq, tk, tv, to, tdo, ts, tdq, tdk, tdv) = _graph("sdpa_backward", q, k, c["causal"], c["scale"])
    dq, dk, dv = cp.empty_like(q), cp.empty_like(k), cp.empty_like(v)
    execute(g, {tq: q, tk: k, tv: v, to: c["o"], tdo: cp.ascontiguousarray(do), ts: c["stats"],
                tdq: dq, tdk: dk, tdv: dv})
    return dq, dk, dv


def _rows(name: str, s, *args):
    rows = s.size // s.shape[-1]
    sk = int(s.shape[-1])
    threads = int(min(1024, max(32, ((sk // 8 + 31) // 32) * 32)))
    run_grid(name, s.dtype.name, (rows,), (threads,), args)


def _per_query_head(t, heads: int):
    """Key or value heads repeated over their query heads (grouped-query attention)."""
    return t if t.shape[1] == heads else libs.cupy().repeat(t, heads // t.shape[1], axis=1)


def _per_kv_head(g, kv_heads: int):
    """A gradient over the query heads summed back onto each key/value head."""
    n, h, s, dh = g.shape
    return g if h == kv_heads else g.reshape(n, kv_heads, h // kv_heads, s, dh).sum(axis=2)


def _materialized_forward(q, k, v, causal: bool, scale: float):
    n, h, sq, dh = q.shape
    k, v = _per_query_head(k, h), _per_query_head(v, h)
    sk = k.shape[2]
    q3, k3, v3 = (t.reshape(n * h, t.shape[2], dh) for t in (q, k, v))
    p = matmul(q3, k3, trans_b=True)
    _rows("softmax_rows", p, p, i64(n * h * sq), i32(sq), i32(sk), f32(scale), i32(int(bool(causal))))
    o = matmul(p, v3).reshape(n, h, sq, dh)
    return o, p


def _materialized_backward(do, c):
    q, p, scale = c["q"], c["p"], c["scale"]
    n, h, sq, dh = q.shape
    kv = c["k"].shape[1]
    k, v = _per_query_head(c["k"], h), _per_query_head(c["v"], h)
    q3, k3, v3 = (t.reshape(n * h, t.shape[2], dh) for t in (q, k, v))
    do3 = libs.cupy().ascontiguousarray(do).reshape(n * h, sq, dh)
    dv = matmul(p, do3, trans_a=True)
    ds = matmul(do3, v3, trans_b=True)
    _rows("softmax_bwd_rows", ds, p, ds, i32(ds.shape[-1]))
    dq = matmul(ds, k3, alpha=scale)
    dk = matmul(ds, q3, trans_a=True, alpha=scale)
    return dq.reshape(q.shape), _per_kv_head(dk.reshape(k.shape), kv), _per_kv_head(dv.reshape(v.shape), kv)


def attention_forward(q, k, v, causal=False, algorithm: str = "", *, fallback: Callable):
    if not fits(q, k, v):
        return fallback(q, k, v, causal, algorithm)
    scale = 1.0 / math.sqrt(q.shape[-1])
    algo = chosen(algorithm, q.dtype.name, int(q.shape[-1]))
    cache = {"q": q, "k": k, "v": v, "scale": scale, "causal": bool(causal), "algorithm": algo}
    if algo == "flash":
        o, cache["stats"] = _flash_forward(q, k, v, bool(causal), scale)
        cache["o"] = o
    else:
        o, cache["p"] = _materialized_forward(q, k, v, bool(causal), scale)
    return o, cache


def attention_backward(do, cache, *, fallback: Callable):
    if "algorithm" not in cache:
        return fallback(do, cache)
    if cache["algorithm"] == "flash":
        return _flash_backward(do, cache)
    return _materialized_backward(do, cache)
