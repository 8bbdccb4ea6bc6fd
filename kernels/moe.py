"""Mixture-of-experts kernels over an array module (numpy or cupy): the router's top-k choice with
each expert's capacity, and a group of experts' MLPs over their token rows, forward and backward
(networks/ops/moe.py states the layer; executor.ops.moe runs it).

Router. ``probs = softmax(logits)`` over the experts; each token goes to its ``top_k`` most probable
experts (ties to the lower index), weighted by those probabilities as they are (GShard and Switch
weight by the softmax over all experts; Mixtral renormalises over the k, which only rescales).
Capacity: each expert takes at most ``capacity`` rows of one sequence (the layer's
``capacity_factor x S x top_k / experts``, rounded up: GShard, Lepikhin et al. 2021, section 2.2,
with the sequence as the group); rows past it are dropped, the token keeping its other experts'
outputs (a token dropped by all of them passes nothing, the layer adding zero). First choices are
placed before second choices, each in sequence order (GShard's Algorithm 1 orders them so). The
capacity is per sequence, so which rows are dropped depends on the sequence alone, not on how the
batch is split over ranks.

Experts. ``rows`` (experts, R, D) through ``w_in`` (experts, m hidden, D) and ``w_out`` (experts,
D, hidden): ``out = act(rows w_in^T) w_out^T`` per expert as batched GEMMs; gated (m = 2): gate and
up interleaved on ``w_in``'s rows (gate j at 2j, up j at 2j + 1, as the swiglu op reads them) and
``act(gate) * up``. Activations: ``silu`` x sigmoid(x), ``gelu`` (tanh approximation, as
kernels.activation), ``relu``. Rows of zeros stay zero (no biases), so a padded buffer's empty
rows contribute nothing, forward or backward.
"""

from __future__ import annotations

import math

from kernels.activation import silu, silu_slope
from kernels.xp import module_of

_GELU_C = math.sqrt(2.0 / math.pi)


def capacity(capacity_factor: float, seq: int, top_k: int, experts: int) -> int:
    """Rows an expert takes from one sequence (module docstring)."""
    return max(1, math.ceil(capacity_factor * seq * top_k / experts - 1e-9))


def route(logits, top_k: int, cap: int):
    """``(probs, experts, slots, gates)`` for logits (N, S, E): the softmax (N, S, E), each token's
    chosen experts (N, S, k), its row in each chosen expert's buffer of its sequence (N, S, k;
    ``-1`` where the capacity dropped it) and the routing weights (N, S, k; 0 where dropped)."""
    xp = module_of(logits)
    z = logits - logits.max(axis=-1, keepdims=True)
    probs = xp.exp(z)
    probs /= probs.sum(axis=-1, keepdims=True)
    n, s, e = probs.shape
    experts = xp.argsort(-probs, axis=-1, kind="stable")[..., :top_k]
    # choice-major order within each sequence: all first choices in sequence order, then the second
    chosen = xp.zeros((n, top_k, s, e), dtype=xp.int64)
    xp.put_along_axis(chosen, experts.transpose(0, 2, 1)[..., None], 1, axis=-1)
    seen = xp.cumsum(chosen.reshape(n, top_k * s, e), axis=1).reshape(n, top_k, s, e)
    place = xp.take_along_axis(seen, experts.transpose(0, 2, 1)[..., None], axis=-1)[..., 0] - 1
    slots = place.transpose(0, 2, 1)
    slots = xp.where(slots < cap, slots, -1)
    gates = xp.take_along_axis(probs, experts, axis=-1) * (slots >= 0)
    return probs, experts, slots, gates


def router_backward(dgates, probs, experts):
    """The logits' gradient (N, S, E) from the routing weights' (N, S, k)."""
    xp = module_of(dgates)
    dprobs = xp.zeros_like(probs)
    xp.put_along_axis(dprobs, experts, dgates, axis=-1)
    return probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))


def _act(a, activation: str):
    """(act(a), what its backward needs)."""
    xp = module_of(a)
    if activation == "relu":
        return xp.maximum(a, 0), a
    if activation == "silu":
        out, sig = silu(a)
        return out, (a, sig)
    t = xp.tanh(_GELU_C * (a + 0.044715 * a * a * a))
    return 0.5 * a * (1.0 + t), (a, t)


def _act_grad(dh, cache, activation: str):
    if activation == "relu":
        return dh * (cache > 0)
    a, t = cache
    if activation == "silu":
        return dh * silu_slope(a, t)
    return dh * (0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * a * a))


def experts_forward(rows, w_in, w_out, activation: str, gated: bool):
    """(out (E, R, D), cache) of each expert's MLP over its rows (module docstring)."""
    xp = module_of(rows)
    pre = xp.matmul(rows, w_in.swapaxes(-1, -2))
    if gated:
        a, cache = _act(pre[..., 0::2], activation)
        h = a * pre[..., 1::2]
    else:
        h, cache = _act(pre, activation)
        a = None
    out = xp.matmul(h, w_out.swapaxes(-1, -2))
    return out, (rows, pre, a, h, cache)


def experts_backward_data(dout, cache, w_in, w_out, activation: str, gated: bool):
    """(d rows, d pre-activation) of :func:`experts_forward`: the ``moe_experts.bwd_data`` kernel
    (the pre-activation's gradient is what :func:`experts_backward_weights` reads)."""
    xp = module_of(dout)
    rows, pre, a, h, act_cache = cache
    dh = xp.matmul(dout, w_out)
    if gated:
        dpre = xp.empty_like(pre)
        dpre[..., 1::2] = dh * a
        dpre[..., 0::2] = _act_grad(dh * pre[..., 1::2], act_cache, activation)
    else:
        dpre = _act_grad(dh, act_cache, activation)
    return xp.matmul(dpre, w_in), dpre


def experts_backward_weights(dout, dpre, cache):
    """(d w_in, d w_out) of :func:`experts_forward`: the ``moe_experts.bwd_weights`` kernel."""
    xp = module_of(dout)
    rows, _, _, h, _ = cache
    return xp.matmul(dpre.swapaxes(-1, -2), rows), xp.matmul(dout.swapaxes(-1, -2), h)


def experts_backward(dout, cache, w_in, w_out, activation: str, gated: bool):
    """(d rows, d w_in, d w_out) of :func:`experts_forward` (the two backward kernels in turn)."""
    drows, dpre = experts_backward_data(dout, cache, w_in, w_out, activation, gated)
    dw_in, dw_out = experts_backward_weights(dout, dpre, cache)
    return drows, dw_in, dw_out
