"""Scaled dot-product attention core for multi-head self-attention: batched GEMMs and a softmax.

q, k, v: (N, heads, S, dh). scores = q k^T / sqrt(dh) (causal: key j > query i masked out),
p = softmax(scores), o = p v. Backward (with the stored p):
  dv = p^T do,  dp = do v^T,  ds = p (dp - rowsum(dp p)),  dq = ds k / sqrt(dh),  dk = ds^T q / sqrt(dh)
"""

from __future__ import annotations

import math

from kernels.dispatch import device_kernel
from kernels.xp import module_of


@device_kernel("attention.fwd")
def attention_forward(q, k, v, causal=False):
    xp = module_of(q)
    scale = 1.0 / math.sqrt(q.shape[-1])
    s = xp.matmul(q, k.swapaxes(-1, -2)) * q.dtype.type(scale)
    if causal:
        sq, sk = s.shape[-2:]
        mask = xp.triu(xp.ones((sq, sk), dtype=bool), k=1 + sk - sq)
        s = xp.where(mask, xp.asarray(-xp.inf, dtype=s.dtype), s)
    s -= s.max(axis=-1, keepdims=True)
    p = xp.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = xp.matmul(p, v)
    return o, {"q": q, "k": k, "v": v, "p": p, "scale": scale}


@device_kernel("attention.bwd")
def attention_backward(do, cache):
    """(dq, dk, dv)."""
    xp = module_of(do)
    q, k, v, p = cache["q"], cache["k"], cache["v"], cache["p"]
    scale = do.dtype.type(cache["scale"])
    dv = xp.matmul(p.swapaxes(-1, -2), do)
    ds = xp.matmul(do, v.swapaxes(-1, -2))  # dp, turned into ds in place: one score-sized buffer
    ds -= xp.einsum("...ij,...ij->...i", ds, p)[..., None]
    ds *= p
    dq = xp.matmul(ds, k)
    dq *= scale
    dk = xp.matmul(ds.swapaxes(-1, -2), q)
    dk *= scale
    return dq, dk, dv
