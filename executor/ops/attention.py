"""attention split over N (samples) and F (heads, Megatron-style): the kernels of
costmodel.calls.layer_calls, in its order. Forward: ``linear.fwd`` (the fused q/k/v projection of this
rank's heads), ``attention.fwd``, ``linear.fwd`` (the output projection of those heads); backward
data: ``linear.bwd_data`` (out), ``attention.bwd``, ``linear.bwd_data`` (q/k/v); backward weights:
``linear.bwd_weights`` (out), ``linear.bwd_weights`` (q/k/v).

Under a head split (F) the q/k/v projection is column-parallel (the input is whole, the input
gradient a partial sum all-reduced over F) and the output projection row-parallel (the output is a
partial sum all-reduced over F; only the rank with F-coordinate 0 adds the output bias and
counts its gradient). Under a sequence split (H) the keys and values are all-gathered over the
group and their gradients reduce-scattered back (executor.ops.attention_context).

Between the projection and the core, ``qk_norm`` normalises each query and key head by RMSNorm over
its ``dh`` features (``layernorm.fwd`` in the cost model: costmodel.calls.proxies.qk_norm_calls;
the scales ``q_norm`` and ``k_norm`` whole on every rank, their gradients partial sums over F, as
the op's split declares), then ``rotary`` rotates them by position (kernels.rotary): both on the
projection's query and key columns of this rank's heads, at their positions (under H, its block's).

Weights: ``qkv_weight`` (3, Dl, D) with ``qkv_bias`` (3, Dl): query, key and value rows of this
rank's heads (head ``h`` owns features ``h*dh .. (h+1)*dh``); ``out_weight`` (D, Dl). Grouped-query
attention (``kv_heads`` < ``heads``, networks.ops.attention) holds ``q_weight`` (Dl, D) and
``kv_weight`` (2, Dkvl, D) with ``q_bias`` and ``kv_bias``: the head split keeps whole key/value
groups with their query heads on a rank, and the two are stacked into one projection of width
``Dl + 2 Dkvl`` (the one ``linear.fwd`` the cost model prices; the concatenation is a
``concat.fwd`` it prices too). Above ``kv_heads`` ranks each key/value
head lies on ``F / kv_heads`` neighbouring ranks, each of which computes its gradient from its own
query heads only: those are summed over the replicas (one all-reduce over F of a buffer holding
every key/value head, each rank's in its own slot) before the runtime's sums over the samples.
The core (kernels.attention.attention_forward_packed and its backward) takes the projection's
output as it is and splits, and merges, the heads itself, so the timed kernel is what runs. It
runs the algorithm the plan chose for the layer (``flash`` or ``materialized``,
costmodel.calls.attention; ``""`` is the device's default).
"""

from __future__ import annotations

from costmodel.parallel.axes import H, F
from costmodel.calls.attention import ATTENTION_ALGORITHMS
from costmodel.calls.algorithms import kernel_algorithm
from executor.backend.device import Array
from executor.ops import attention_context as context
from executor.ops.base import LayerCtx, check_shape, unsupported
from kernels.activation import concat_forward
from kernels.attention import attention_backward_packed, attention_forward_packed
from kernels.gemm import linear_backward_data, linear_backward_weights, linear_forward
from kernels.norm import rmsnorm_backward, rmsnorm_forward
from kernels.rotary import rotary_backward, rotary_forward
from networks.ops.attention import QK_NORM_EPS


def _grouped(ctx: LayerCtx) -> bool:
    return "q_weight" in ctx.weights


def _widths(ctx: LayerCtx) -> tuple[int, int, int]:
    """(head width dh, this rank's query width Dl, its key/value width Dkvl)."""
    d = ctx.layer.in_shapes[0][1]
    dh = ctx.p.get("head_dim") or d // ctx.p["heads"]
    if _grouped(ctx):
        return dh, ctx.weights["q_weight"].shape[0], ctx.weights["kv_weight"].shape[1]
    dl = ctx.weights["qkv_weight"].shape[1]
    return dh, dl, dl


def _fused_weight(ctx: LayerCtx):
    """The q/k/v projection as one (Dl + 2 Dkvl, D) weight and its bias (None without); grouped:
    the query and key/value weights (and biases) concatenated (``concat.fwd``, once a step: the
    backward pass reuses them)."""
    w = ctx.weights
    if not _grouped(ctx):
        b = w.get("qkv_bias")
        return w["qkv_weight"].reshape(-1, w["qkv_weight"].shape[-1]), (None if b is None else b.reshape(-1))
    d = w["q_weight"].shape[-1]
    fused, _ = concat_forward([w["q_weight"][None], w["kv_weight"].reshape(1, -1, d)], 1)
    if "q_bias" not in w:
        return fused[0], None
    b, _ = concat_forward([w["q_bias"].reshape(1, -1, 1), w["kv_bias"].reshape(1, -1, 1)], 1)
    return fused[0], b.reshape(-1)


def _qkv_grads(ctx: LayerCtx, dw, db) -> dict[str, Array]:
    """The fused projection's gradients as the layer's weights hold them (module docstring)."""
    w = ctx.weights
    if not _grouped(ctx):
        out = {"qkv_weight": dw.reshape(w["qkv_weight"].shape)}
        if db is not None:
            out["qkv_bias"] = db.reshape(w["qkv_bias"].shape)
        return out
    dl = w["q_weight"].shape[0]
    out = {"q_weight": dw[:dl], "kv_weight": ctx.xp.ascontiguousarray(dw[dl:]).reshape(w["kv_weight"].shape)}
    if db is not None:
        out |= {"q_bias": db[:dl], "kv_bias": ctx.xp.ascontiguousarray(db[dl:]).reshape(w["kv_bias"].shape)}
    _sum_over_replicas(ctx, out)
    return out


def _sum_over_replicas(ctx: LayerCtx, grads: dict[str, Array]) -> None:
    """Sum the key/value gradients over the ranks that hold the same key/value head (module docstring)."""
    kv = ctx.p.get("kv_heads") or ctx.p["heads"]
    share = ctx.strategy.degree(F) // kv
    if share <= 1:
        return
    slot = ctx.coord(F) // share
    for name in ("kv_weight", "kv_bias"):
        if name in grads:
            every = ctx.xp.zeros((kv, *grads[name].shape), dtype=grads[name].dtype)
            every[slot] = grads[name]
            ctx.allreduce(every, (F,), "bwd_comm")
            grads[name] = ctx.xp.ascontiguousarray(every[slot])


def _heads_in(ctx: LayerCtx, qkv):
    """``qk_norm`` then ``rotary`` on the query and key columns of the projection's output ``qkv``
    (module docstring): ``(qkv, the norms' caches)``, the input as it is where the layer has neither."""
    p = ctx.p
    if not (p.get("qk_norm") or p.get("rotary")):
        return qkv, None
    dh, dl, dkv = _widths(ctx)
    n, s, _ = qkv.shape
    parts = [qkv[..., :dl], qkv[..., dl:dl + dkv]]
    norms = [None, None]
    if p.get("qk_norm"):
        for i, scale in enumerate(("q_norm", "k_norm")):
            y, norms[i] = rmsnorm_forward(parts[i].reshape(n, s, -1, dh), ctx.weights[scale], QK_NORM_EPS)
            parts[i] = y.reshape(n, s, -1)
    if p.get("rotary"):
        parts = [rotary_forward(t, dh, _start(ctx))[0] for t in parts]
    return ctx.xp.concatenate([*parts, qkv[..., dl + dkv:]], axis=-1), norms


def _heads_out(ctx: LayerCtx, dqkv, norms) -> tuple[object, dict]:
    """The gradient of :func:`_heads_in`'s input from its output's, and the scales' gradients;
    ``norms``: the forward's caches."""
    if norms is None:
        return dqkv, {}
    dh, dl, dkv = _widths(ctx)
    n, s, _ = dqkv.shape
    parts = [dqkv[..., :dl], dqkv[..., dl:dl + dkv]]
    if ctx.p.get("rotary"):
        parts = [rotary_backward(t, dh, _start(ctx)) for t in parts]
    grads = {}
    for i, scale in enumerate(("q_norm", "k_norm")):
        if norms[i] is not None:
            dx, grads[scale] = rmsnorm_backward(parts[i].reshape(n, s, -1, dh), norms[i])
            parts[i] = dx.reshape(n, s, -1)
    return ctx.xp.concatenate([*parts, dqkv[..., dl + dkv:]], axis=-1), grads


def _algorithm(ctx: LayerCtx) -> str:
    """The attention kernel the plan chose for the layer ("" for the device's default)."""
    got = kernel_algorithm(ctx.algo)
    return got if got in ATTENTION_ALGORITHMS else ""


def _owns_out_bias(ctx: LayerCtx) -> bool:
    return "out_bias" in ctx.weights and ctx.coord(F) == 0


def _start(ctx: LayerCtx) -> int:
    """The position of this rank's first query: its block's of a sequence split (H), else 0."""
    return ctx.in_blocks[0][1][0]


def forward(ctx: LayerCtx, xs):
    if ctx.split(H) and ctx.p.get("context_exchange") == "ring":
        raise unsupported(ctx.layer, "attention over a split sequence by a ring (context_exchange: ring; the "
                                     "executor all-gathers the keys and values)")
    (x,) = xs
    dh, dl, dkv = _widths(ctx)
    with ctx.span("fwd_compute"):
        w_qkv, b_qkv = _fused_weight(ctx)
        qkv, heads = _heads_in(ctx, linear_forward(x, w_qkv, b_qkv))
    if ctx.split(H):
        o2, core = context.core_forward(ctx, qkv, dh, dl, _algorithm(ctx))
    else:
        with ctx.span("fwd_compute"):
            o2, core = attention_forward_packed(qkv, dl // dh, dkv // dh, causal=bool(ctx.p["causal"]),
                                                algorithm=_algorithm(ctx))
    with ctx.span("fwd_compute"):
        y = linear_forward(o2, ctx.weights["out_weight"],
                           ctx.weights["out_bias"] if _owns_out_bias(ctx) else None)
    y = ctx.xp.ascontiguousarray(y)
    ctx.allreduce(y, (F,), "fwd_comm")
    return check_shape(ctx, y), (x, o2, core, w_qkv, b_qkv is not None, heads)


def backward(ctx: LayerCtx, dy, cache):
    x, o2, core, w_qkv, has_qkv_bias, heads = cache
    w_out = ctx.weights["out_weight"]
    dh, dl, _ = _widths(ctx)
    xp = ctx.xp
    with ctx.span("bwd_compute"):
        do2 = linear_backward_data(dy, w_out)
    if ctx.split(H):
        dqkv = context.core_backward(ctx, do2, core, dh)
    else:
        with ctx.span("bwd_compute"):
            dqkv = attention_backward_packed(do2, core, dl // dh)
    with ctx.span("bwd_compute"):
        dqkv, norm_grads = _heads_out(ctx, dqkv, heads)
        dx = linear_backward_data(dqkv, w_qkv)
        dw_out, db_out = linear_backward_weights(dy, o2, "out_bias" in ctx.weights)
        dw_qkv, db_qkv = linear_backward_weights(dqkv, x, has_qkv_bias)
    dx = xp.ascontiguousarray(dx)
    ctx.allreduce(dx, (F,), "bwd_comm")
    grads = {**_qkv_grads(ctx, dw_qkv, db_qkv if has_qkv_bias else None), "out_weight": dw_out, **norm_grads}
    if "out_bias" in ctx.weights:
        grads["out_bias"] = db_out if _owns_out_bias(ctx) else xp.zeros_like(db_out)
    return [dx], grads
