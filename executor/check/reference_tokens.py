"""The reference step's transformer ops on whole tensors (one process, all heads, the whole
vocabulary): embedding, attention and the tied LM head's weight (executor.check.reference).

Written apart from the distributed ops (executor.ops.embedding, executor.ops.attention), so a
distribution bug cannot hide in code both sides share: queries, keys and values are three separate
projections of the whole width (their input gradients summed), where the distributed op runs one
fused projection of its heads, and grouped-query attention repeats each key/value head over its
query heads (``numpy.repeat``) and sums their gradients back, where the distributed op and the kernel
broadcast them; the embedding is a plain gather and ``numpy.add.at`` over the whole
table. The GEMM, attention and RMSNorm kernels are the same (kernels.gemm, kernels.attention,
kernels.norm); ``qk_norm`` and ``rotary`` act on each (sample, head) block of queries and keys, the
rotation written here on those blocks from the angle tables (kernels.rotary.tables) where the
distributed op rotates its projection's columns.
"""

from __future__ import annotations

import numpy as np

from kernels import attention as attn, gemm
from kernels.norm import rmsnorm_backward, rmsnorm_forward
from kernels.rotary import tables
from networks.ops.attention import QK_NORM_EPS


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


def _rotate(a: np.ndarray, inverse: bool) -> np.ndarray:
    """RoFormer's rotation of (N, heads, S, dh) blocks by position: ``a cos + (-a2, a1) sin``; its
    transpose (``inverse``) ``a cos + (a2 sin, -a1 sin)``."""
    n, h, s, dh = a.shape
    cos, sin = tables(np, s, dh, a.dtype)
    half = dh // 2
    b = a * sin if inverse else a
    turned = np.concatenate([b[..., half:], -b[..., :half]] if inverse else [-b[..., half:], b[..., :half]], axis=-1)
    return a * cos + (turned if inverse else turned * sin)


def _positions(q: np.ndarray, k: np.ndarray, w: dict, p: dict):
    """``qk_norm`` then ``rotary`` on the whole query and key heads: ``(q, k, norm caches)``."""
    caches = (None, None)
    if p.get("qk_norm"):
        (q, cq), (k, ck) = rmsnorm_forward(q, w["q_norm"], QK_NORM_EPS), rmsnorm_forward(k, w["k_norm"], QK_NORM_EPS)
        caches = (cq, ck)
    if p.get("rotary"):
        q, k = _rotate(q, False), _rotate(k, False)
    return q, k, caches


def attention_forward(x: np.ndarray, w: dict, p: dict):
    heads = p["heads"]
    kv = p.get("kv_heads") or heads
    q, k, v = (_heads(gemm.linear_forward(x, wj, bj), n) for (wj, bj), n in zip(_projections(w), (heads, kv, kv)))
    q, k, norms = _positions(q, k, w, p)
    k, v = np.repeat(k, heads // kv, axis=1), np.repeat(v, heads // kv, axis=1)
    o, core = attn.attention_forward(q, k, v, causal=bool(p["causal"]))
    o2 = _unheads(o)
    y = gemm.linear_forward(o2, w["out_weight"], w.get("out_bias"))
    return y, (x, o2, core, norms)


def attention_backward(dy: np.ndarray, cache, w: dict, p: dict):
    x, o2, core, norms = cache
    do2, dw_out, db_out = gemm.linear_backward(dy, o2, w["out_weight"], "out_bias" in w)
    heads = p["heads"]
    kv = p.get("kv_heads") or heads
    dq, dk, dv = attn.attention_backward(_heads(do2, heads), core)
    n, _, s, dh = dk.shape
    dk, dv = (g.reshape(n, kv, heads // kv, s, dh).sum(axis=2) for g in (dk, dv))
    if p.get("rotary"):
        dq, dk = _rotate(dq, True), _rotate(dk, True)
    scales = {}
    if p.get("qk_norm"):
        (dq, scales["q_norm"]), (dk, scales["k_norm"]) = rmsnorm_backward(dq, norms[0]), rmsnorm_backward(dk, norms[1])
    dx = np.zeros_like(x)
    dws, dbs = [], []
    for (wj, _), g in zip(_projections(w), (dq, dk, dv)):
        dxj, dwj, dbj = gemm.linear_backward(_unheads(g), x, wj, True)
        dx += dxj
        dws.append(dwj)
        dbs.append(dbj)
    grads = {"out_weight": dw_out, **scales}
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
