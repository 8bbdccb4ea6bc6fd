"""Mixture-of-experts token movement over an array module (numpy or cupy): the dispatch of each
token's chosen rows into the experts' buffers and the weighted combine of the experts' outputs back
into tokens, forward and backward (kernels.moe states the routing and the capacity;
executor.ops.moe runs these four kernels in this order: ``moe_dispatch.fwd`` after the router's
GEMM, ``moe_combine.fwd`` after the experts; ``moe_combine.bwd`` first in backward,
``moe_dispatch.bwd`` after the experts' input gradient, before the router's).

The dispatch buffer is ``(experts, N, capacity, D)``: expert ``e``'s rows of sequence ``n`` in
slot order, zero where no row came (GShard's dispatch tensor, Lepikhin et al. 2021, section 2.2,
applied by gathering rather than by an einsum over a one-hot mask). ``route`` is the cache the
four share: (probs, experts, slots, gates, kept) with ``kept`` the (sample, token, choice) indices
of the rows the capacity kept.
"""

from __future__ import annotations

from kernels.moe import route, router_backward
from kernels.xp import module_of


def dispatch_forward(x, logits, top_k: int, cap: int, experts: int):
    """(buffer (experts, N, cap, D), route): the top-k choice with capacity of every token
    (kernels.moe.route) and its kept rows copied into the experts' buffer."""
    xp = module_of(x)
    n, _, d = x.shape
    probs, chosen, slots, gates = route(logits, top_k, cap)
    buf = xp.zeros((experts, n, cap, d), dtype=x.dtype)
    ni, si, ki = xp.nonzero(slots >= 0)
    buf[chosen[ni, si, ki], ni, slots[ni, si, ki]] = x[ni, si]
    return buf, (probs, chosen, slots, gates, (ni, si, ki))


def _rows(back, rcache):
    """The kept rows of ``back`` (experts, N, cap, D), in ``kept`` order."""
    _, chosen, slots, _, (ni, si, ki) = rcache
    return back[chosen[ni, si, ki], ni, slots[ni, si, ki]]


def combine_forward(back, x_shape, rcache):
    """(y (N, S, D), the kept rows of ``back``): each token's rows weighted by their routing weights."""
    xp = module_of(back)
    _, _, _, gates, (ni, si, ki) = rcache
    picked = _rows(back, rcache)
    y = xp.zeros(x_shape, dtype=back.dtype)
    xp.add.at(y, (ni, si), gates[ni, si, ki][:, None] * picked)
    return y, picked


def combine_backward(dy, picked, rcache, buf_shape):
    """(d gates (N, S, k), d buffer (experts, N, cap, D)) of :func:`combine_forward`."""
    xp = module_of(dy)
    _, chosen, slots, gates, (ni, si, ki) = rcache
    dgates = xp.zeros_like(gates)
    dgates[ni, si, ki] = (dy[ni, si] * picked).sum(axis=-1)
    dbuf = xp.zeros(buf_shape, dtype=dy.dtype)
    dbuf[chosen[ni, si, ki], ni, slots[ni, si, ki]] = gates[ni, si, ki][:, None] * dy[ni, si]
    return dgates, dbuf


def dispatch_backward(dback, dgates, x_shape, rcache):
    """(d x (N, S, D) through the rows, d logits (N, S, experts)) of :func:`dispatch_forward`
    (the router's GEMM's input gradient is added by the caller)."""
    xp = module_of(dback)
    probs, chosen, _, _, (ni, si, _) = rcache
    dx = xp.zeros(x_shape, dtype=dback.dtype)
    xp.add.at(dx, (ni, si), _rows(dback, rcache))
    return dx, router_backward(dgates, probs, chosen)
