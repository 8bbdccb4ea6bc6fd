"""Scaled dot-product attention core for multi-head self-attention: batched GEMMs and a softmax.

q: (N, heads, S, dh); k, v: (N, kv_heads, S, dh) with ``kv_heads`` dividing ``heads`` (grouped-query
attention, Ainslie et al. 2023: query head ``h`` reads key/value head ``h // (heads / kv_heads)``;
``kv_heads == heads`` is multi-head attention). scores = q k^T / sqrt(dh) (causal: key j > query i
masked out), p = softmax(scores), o = p v. Backward (with the stored p):
  dv = p^T do,  dp = do v^T,  ds = p (dp - rowsum(dp p)),  dq = ds k / sqrt(dh),  dk = ds^T q / sqrt(dh)
with dk and dv summed over the query heads of each group. The groups are a broadcast axis of the
batched GEMMs (q as (N, kv_heads, group, S, dh) against k as (N, kv_heads, 1, S, dh)), so no key or
value is copied per query head.

This is the ``materialized`` algorithm (the scores written to memory); ``algorithm`` names the one
a plan chose for the layer (costmodel.calls.attention.ATTENTION_ALGORITHMS). The host has only this
one, so it runs whatever is asked; on a GPU the same name runs kernels.cuda.attention, where
``flash`` is cuDNN's fused kernel.
"""

from __future__ import annotations

import math

from kernels.dispatch import device_kernel
from kernels.xp import module_of


def _grouped(q, kv_heads: int):
    """q (N, H, S, dh) -> (N, KV, H/KV, S, dh): each key/value head's query heads together."""
    n, h, s, dh = q.shape
    return q.reshape(n, kv_heads, h // kv_heads, s, dh)


@device_kernel("attention.fwd")
def attention_forward(q, k, v, causal=False, algorithm: str = ""):
    xp = module_of(q)
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{k.shape[1]} key/value heads cannot serve {q.shape[1]} query heads")
    scale = 1.0 / math.sqrt(q.shape[-1])
    k5, v5 = k[:, :, None], v[:, :, None]
    s = xp.matmul(_grouped(q, k.shape[1]), k5.swapaxes(-1, -2)) * q.dtype.type(scale)
    if causal:
        sq, sk = s.shape[-2:]
        mask = xp.triu(xp.ones((sq, sk), dtype=bool), k=1 + sk - sq)
        s = xp.where(mask, xp.asarray(-xp.inf, dtype=s.dtype), s)
    s -= s.max(axis=-1, keepdims=True)
    p = xp.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = xp.matmul(p, v5).reshape(q.shape)
    return o, {"q": q, "k": k, "v": v, "p": p, "scale": scale}


@device_kernel("attention.bwd")
def attention_backward(do, cache):
    """(dq, dk, dv)."""
    xp = module_of(do)
    q, k, v, p = cache["q"], cache["k"], cache["v"], cache["p"]
    kv = k.shape[1]
    scale = do.dtype.type(cache["scale"])
    do5 = _grouped(do, kv)
    dv = xp.matmul(p.swapaxes(-1, -2), do5).sum(axis=2)
    ds = xp.matmul(do5, v[:, :, None].swapaxes(-1, -2))  # dp, turned into ds in place: one score-sized buffer
    ds -= xp.einsum("...ij,...ij->...i", ds, p)[..., None]
    ds *= p
    dq = xp.matmul(ds, k[:, :, None]).reshape(q.shape)
    dq *= scale
    dk = xp.matmul(ds.swapaxes(-1, -2), _grouped(q, kv)).sum(axis=2)
    dk *= scale
    return dq, dk, dv


def _merge(xp, o):
    """(N, heads, S, dh) -> (N, S, heads dh), contiguous."""
    n, h, s, dh = o.shape
    return xp.ascontiguousarray(o.transpose(0, 2, 1, 3)).reshape(n, s, h * dh)


def attention_forward_packed(qkv, heads: int, kv_heads: int, causal=False, algorithm: str = ""):
    """The core as the executor runs it, on the fused q/k/v projection's output ``qkv`` (N, S,
    (heads + 2 kv_heads) dh): split into contiguous per-head q, k and v, :func:`attention_forward`
    (on a GPU the device's kernel), its output merged back to (N, S, heads dh). ``(o2, cache)``.
    The ``attention.fwd`` the profiler times: the copies around the core are part of it."""
    xp = module_of(qkv)
    n, s, w = qkv.shape
    dh = w // (heads + 2 * kv_heads)
    dl, dkv = heads * dh, kv_heads * dh
    q, k, v = (xp.ascontiguousarray(t.reshape(n, s, t.shape[-1] // dh, dh).transpose(0, 2, 1, 3))
               for t in (qkv[..., :dl], qkv[..., dl:dl + dkv], qkv[..., dl + dkv:]))
    o, cache = attention_forward(q, k, v, causal=causal, algorithm=algorithm)
    return _merge(xp, o), cache


def attention_backward_packed(do2, cache, heads: int):
    """The gradient of :func:`attention_forward_packed`'s ``qkv`` from its output's ``do2``
    (N, S, heads dh): split into heads, :func:`attention_backward`, merged and concatenated as the
    fused projection lays them out (the ``attention.bwd`` the profiler times)."""
    xp = module_of(do2)
    n, s, dl = do2.shape
    do = xp.ascontiguousarray(do2.reshape(n, s, heads, dl // heads).transpose(0, 2, 1, 3))
    dq, dk, dv = attention_backward(do, cache)
    return xp.concatenate([_merge(xp, g) for g in (dq, dk, dv)], axis=-1)


#: The packed cores the registry times reach the device's kernel through the core they wrap, which
#: dispatches by array module (kernels.dispatch.device_kernel): the copies around it stay host code
attention_forward_packed.reaches = attention_forward
attention_backward_packed.reaches = attention_backward
