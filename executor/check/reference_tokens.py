"""The reference step's transformer ops on whole tensors (one process, all heads, the whole
vocabulary): embedding, attention and the tied LM head's weight (executor.check.reference).

Written apart from the distributed ops (executor.ops.embedding, executor.ops.attention), so a
distribution bug cannot hide in code both sides share: queries, keys and values are three separate
projections of the whole width (their input gradients summed), where the distributed op runs one
fused projection of its heads, and grouped-query attention repeats each key/value head over its
query heads (``numpy.repeat``) and sums their gradients back, where the distributed op and the kernel
broadcast them; the embedding is a plain gather and ``numpy.add.at`` over the whole
table. The GEMM and attention kernels are the same (kernels.gemm, kernels.attention).
"""

from __future__ import annotations

import numpy as np

from kernels import attention as attn
from kernels import gemm
from networks.errors import DnnplanError


def embedding_forward(ids: np.ndarray, w: dict):
    y = w["tokens"][ids]
    if "positions" in w:
        y = y + w["positions"][: ids.shape[1]]
    return y, ids


def embedding_backward(dy: np.ndarray, ids: np.ndarray, w: dict):
    dtokens = np.zeros_like(w["tokens"])
    np.add.at(dtokens, ids.reshape(-1), dy.reshape(-1, dy.shape[-1]))
    grads = {"tokens": dtokens}
    if "positions" in w:
        dpos = np.zeros_like(w["positions"])
        dpos[: ids.shape[1]] = dy.sum(axis=0)
        grads["positions"] = dpos
    return [None], grads


def _heads(a: np.ndarray, heads: int) -> np.ndarray:
    n, s, d = a.shape
    return np.ascontiguousarray(a.reshape(n, s, heads, d // heads).transpose(0, 2, 1, 3))


def _projections(w: dict) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(weight, bias) of the query, key and value projections, whichever way the layer holds them."""
    if "qkv_weight" in w:
        qb = w.get("qkv_bias")
        return [(w["qkv_weight"][j], None if qb is None else qb[j]) for j in range(3)]
    out = [(w["q_weight"], w.get("q_bias"))]
    return out + [(w["kv_weight"][j], None if "kv_bias" not in w else w["kv_bias"][j]) for j in range(2)]


def _unheads(a: np.ndarray) -> np.ndarray:
    n, h, s, dh = a.shape
    return a.transpose(0, 2, 1, 3).reshape(n, s, h * dh)


def attention_forward(x: np.ndarray, w: dict, p: dict):
    if p.get("rotary"):
        raise DnnplanError("the reference step cannot run attention with rotary positions yet")
    if p.get("qk_norm"):
        raise DnnplanError("the reference step cannot run attention with per-head query/key norms yet")
    heads = p["heads"]
    kv = p.get("kv_heads") or heads
    q, k, v = (_heads(gemm.linear_forward(x, wj, bj), n) for (wj, bj), n in zip(_projections(w), (heads, kv, kv)))
    k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
    o, core = attn.attention_forward(q, k, v, causal=bool(p["causal"]))
    o2 = _unheads(o)
    y = gemm.linear_forward(o2, w["out_weight"], w.get("out_bias"))
    return y, (x, o2, core)


def attention_backward(dy: np.ndarray, cache, w: dict, p: dict):
    x, o2, core = cache
    do2, dw_out, db_out = gemm.linear_backward(dy, o2, w["out_weight"], "out_bias" in w)
    heads = p["heads"]
    kv = p.get("kv_heads") or heads
    dq, dk, dv = attn.attention_backward(_heads(do2, heads), core)
    n, _, s, dh = dk.shape
    dk, dv = (g.reshape(n, kv, heads // kv, s, dh).sum(axis=2) for g in (dk, dv))
    dx = np.zeros_like(x)
    dws, dbs = [], []
    for (wj, _), g in zip(_projections(w), (dq, dk, dv)):
        dxj, dwj, dbj = gemm.linear_backward(_unheads(g), x, wj, True)
        dx += dxj
        dws.append(dwj)
        dbs.append(dbj)
    grads = {"out_weight": dw_out}
    if "qkv_weight" in w:
        grads["qkv_weight"] = np.stack(dws)
        if "qkv_bias" in w:
            grads["qkv_bias"] = np.stack(dbs)
    else:
        grads |= {"q_weight": dws[0], "kv_weight": np.stack(dws[1:])}
        if "q_bias" in w:
            grads |= {"q_bias": dbs[0], "kv_bias": np.stack(dbs[1:])}
    if "out_bias" in w:
        grads["out_bias"] = db_out
    return [dx], grads
