"""attention split over N (samples) and F (heads, Megatron-style): the kernels of
costmodel.kernel_calls, in its order. Forward: ``linear.fwd`` (the fused q/k/v projection of this
rank's heads), ``attention.fwd``, ``linear.fwd`` (the output projection of those heads); backward
data: ``linear.bwd_data`` (out), ``attention.bwd``, ``linear.bwd_data`` (q/k/v); backward weights:
``linear.bwd_weights`` (out), ``linear.bwd_weights`` (q/k/v).

Under a head split (F) the q/k/v projection is column-parallel (the input is whole, the input
gradient a partial sum all-reduced over F) and the output projection row-parallel (the output is a
partial sum all-reduced over F; only the rank with F-coordinate 0 adds the output bias and
counts its gradient). A sequence split (H) would gather keys and values over the group, and rotary
positions would rotate queries and keys: neither runs yet, each refused with one line.

Weights: ``qkv_weight`` (3, Dl, D) with ``qkv_bias`` (3, Dl): query, key and value rows of this
rank's heads (head ``h`` owns features ``h*dh .. (h+1)*dh``); ``out_weight`` (D, Dl).
"""

from __future__ import annotations

from executor.backend.device import Array
from executor.ops.base import LayerCtx, check_shape, unsupported
from kernels.attention import attention_backward, attention_forward
from kernels.gemm import linear_backward_data, linear_backward_weights, linear_forward


def _split_heads(xp, qkv: Array, dh: int):
    """(N, S, 3*Dl) -> q, k, v, each (N, heads, S, dh) (contiguous, as the kernel is timed)."""
    n, s, width = qkv.shape
    t = qkv.reshape(n, s, 3, width // (3 * dh), dh).transpose(2, 0, 3, 1, 4)
    return tuple(xp.ascontiguousarray(t[j]) for j in range(3))


def _merge_heads(xp, o: Array) -> Array:
    """(N, heads, S, dh) -> (N, S, heads*dh)."""
    n, h, s, dh = o.shape
    return xp.ascontiguousarray(o.transpose(0, 2, 1, 3)).reshape(n, s, h * dh)


def _fused_weight(ctx: LayerCtx):
    w = ctx.weights["qkv_weight"]
    b = ctx.weights.get("qkv_bias")
    return w.reshape(-1, w.shape[-1]), (None if b is None else b.reshape(-1))


def _owns_out_bias(ctx: LayerCtx) -> bool:
    return "out_bias" in ctx.weights and ctx.coord("F") == 0


def forward(ctx: LayerCtx, xs):
    if ctx.split("H"):
        raise unsupported(ctx.layer, "attention split over the sequence (H)")
    if ctx.p.get("rotary"):
        raise unsupported(ctx.layer, "attention with rotary positions")
    (x,) = xs
    dh = ctx.layer.in_shapes[0][1] // ctx.p["heads"]
    w_qkv, b_qkv = _fused_weight(ctx)
    with ctx.span("fwd_compute"):
        qkv = linear_forward(x, w_qkv, b_qkv)
        q, k, v = _split_heads(ctx.xp, qkv, dh)
        o, core = attention_forward(q, k, v, causal=bool(ctx.p["causal"]))
        o2 = _merge_heads(ctx.xp, o)
        y = linear_forward(o2, ctx.weights["out_weight"],
                           ctx.weights["out_bias"] if _owns_out_bias(ctx) else None)
    y = ctx.xp.ascontiguousarray(y)
    ctx.allreduce(y, ("F",), "fwd_comm")
    return check_shape(ctx, y), (x, o2, core)


def backward(ctx: LayerCtx, dy, cache):
    x, o2, core = cache
    w_qkv, b_qkv = _fused_weight(ctx)
    w_out = ctx.weights["out_weight"]
    dh = ctx.layer.in_shapes[0][1] // ctx.p["heads"]
    xp = ctx.xp
    with ctx.span("bwd_compute"):
        do2 = linear_backward_data(dy, w_out)
        n, s, dl = do2.shape
        do = xp.ascontiguousarray(do2.reshape(n, s, dl // dh, dh).transpose(0, 2, 1, 3))
        dq, dk, dv = attention_backward(do, core)
        dqkv = xp.ascontiguousarray(xp.stack([dq, dk, dv]).transpose(1, 3, 0, 2, 4)).reshape(n, s, 3 * dl)
        dx = linear_backward_data(dqkv, w_qkv)
        dw_out, db_out = linear_backward_weights(dy, o2, "out_bias" in ctx.weights)
        dw_qkv, db_qkv = linear_backward_weights(dqkv, x, b_qkv is not None)
    dx = xp.ascontiguousarray(dx)
    ctx.allreduce(dx, ("F",), "bwd_comm")
    grads = {"qkv_weight": dw_qkv.reshape(ctx.weights["qkv_weight"].shape), "out_weight": dw_out}
    if b_qkv is not None:
        grads["qkv_bias"] = db_qkv.reshape(ctx.weights["qkv_bias"].shape)
    if "out_bias" in ctx.weights:
        grads["out_bias"] = db_out if _owns_out_bias(ctx) else xp.zeros_like(db_out)
    return [dx], grads
