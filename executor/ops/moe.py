"""moe (networks/ops/moe.py) split over N (samples), H (positions: each rank routes its block with
that block's capacity, as Megatron-Core counts capacity over a rank's own tokens), E (experts:
expert parallelism) and F (each expert's hidden width: expert tensor parallelism), with the kernels
of kernels.moe.

Forward, on this rank's tokens ``x`` (N_l, S, D) (under E the batch is cut by N and E together,
costmodel.parallel.shard): the router's GEMM (its weight whole on every rank), the top-k choice with
each expert's capacity per sequence and the chosen rows copied into a buffer
(kernels.moe_route.dispatch_forward: rows past the capacity dropped) (experts, N_l, capacity, D), zero where no row came. Under E the buffer's
expert blocks go to the ranks that hold those experts, one all-to-all over the expert group
(``fwd_comm``); each rank runs its ``experts / E`` experts over the rows of every rank of its
group (batched GEMMs) and a second all-to-all brings the outputs back; the combine adds each
token's rows weighted by their routing weights. Shared experts run as one dense MLP on every
token. Under F each rank holds a slice of every expert's hidden width, so its output is a partial
sum, all-reduced over F. Backward runs the same exchanges in reverse (``bwd_comm``): the output
gradient's rows to the experts, their input gradients back; the routing weights' gradient (a
dot product of each row's output and the token's output gradient) flows into the router. The
kernels run in costmodel.calls.moe' order, its calls one for one (the profiler times those).

Gradients: the experts' weights of this rank's experts from the rows of its whole expert group,
summed over N by the runtime (expert data parallelism); the router's and the shared experts' from
this rank's tokens, summed over N, H and E. Biases on the experts, the shared experts' gate and
ESEQ are refused with one line (not run yet).
"""

from __future__ import annotations

from executor.comm.collectives import alltoall_, wait_for
from executor.ops.base import LayerCtx, check_shape, memo, unsupported
from kernels import moe as k, moe_route as kr
from kernels.activation import add_forward
from kernels.reshard import copy_block
from kernels.gemm import linear_backward_data, linear_backward_weights, linear_forward
from costmodel.parallel.axes import N, E, F


def _check(ctx: LayerCtx) -> bool:
    """Refuse what does not run yet (memoised: the plan decides it)."""
    if ctx.p["bias"] or ctx.p["shared_gate"]:
        raise unsupported(ctx.layer, "a mixture of experts with biases or a shared-expert gate")
    if ctx.strategy.expert_seq > 1:
        raise unsupported(ctx.layer, "a mixture of experts with ESEQ (expert parallelism folded over "
                                     "sequence-parallel ranks)")
    if ctx.split(E) and ctx.batch % (ctx.strategy.degree(N) * ctx.strategy.degree(E)):
        raise unsupported(ctx.layer, f"expert parallelism over a batch of {ctx.batch} that N x E does not divide")
    return True


def _geometry(ctx: LayerCtx) -> tuple[int, int, int]:
    """(experts in all, this rank's experts, each expert's rows of this rank's positions of one
    sequence: its block under a sequence split, as Megatron-Core counts capacity over a rank's own
    tokens); through ``memo``: the Python between the kernels is time no kernel timing holds."""
    lo, hi = ctx.in_blocks[0][1]
    e = ctx.p["experts"]
    return e, e // ctx.strategy.degree(E), k.capacity(ctx.p["capacity_factor"], hi - lo, ctx.p["top_k"], e)


def _expert_comm(ctx: LayerCtx):
    return ctx.comms.get(ctx.strategy, (E,))


def _exchange(ctx: LayerCtx, buf, phase: str):
    """(experts, N_l, cap, D) -> (local experts, G N_l cap, D): every rank's rows for this rank's
    experts (G: the expert group's size); the received blocks reordered by one ``reshard.copy``
    in the pass's compute span (costmodel.calls.moe prices it)."""
    sub = memo(ctx, _expert_comm)
    e, el, _ = memo(ctx, _geometry)
    g = e // el
    if sub is None:
        return buf.reshape(el, -1, buf.shape[-1])
    got = ctx.xp.empty_like(buf)
    wait_for(sub, ctx.timers, ctx.layer.name)
    with ctx.span(phase):
        alltoall_(sub, ctx.xp.ascontiguousarray(buf), got)
    # got: (G sources, local experts, N_l cap D) -> (local experts, G sources, N_l cap D)
    out = ctx.xp.empty((el, g, got.size // e), dtype=got.dtype)
    with ctx.span(phase.replace("comm", "compute")):
        copy_block(out, got.reshape(g, el, -1).transpose(1, 0, 2))
    return out.reshape(el, -1, buf.shape[-1])


def _return(ctx: LayerCtx, rows, shape, phase: str):
    """The inverse of :func:`_exchange`: each source rank's rows back, as (experts, N_l, cap, D)."""
    sub = memo(ctx, _expert_comm)
    if sub is None:
        return rows.reshape(shape)
    e, el, _ = memo(ctx, _geometry)
    send = ctx.xp.empty((e // el, el, rows.size // e), dtype=rows.dtype)
    with ctx.span(phase.replace("comm", "compute")):
        copy_block(send, rows.reshape(el, e // el, -1).transpose(1, 0, 2))
    got = ctx.xp.empty(shape, dtype=rows.dtype)
    wait_for(sub, ctx.timers, ctx.layer.name)
    with ctx.span(phase):
        alltoall_(sub, send, got)
    return got


def _shared(ctx: LayerCtx) -> bool:
    return "shared_in" in ctx.weights


def forward(ctx: LayerCtx, xs):
    (x,) = xs
    xp, w, p = ctx.xp, ctx.weights, ctx.p
    n, s, d = x.shape
    memo(ctx, _check)
    e, el, cap = memo(ctx, _geometry)
    with ctx.span("fwd_compute"):
        logits = linear_forward(x, w["router"])
        buf, rcache = kr.dispatch_forward(x, logits, p["top_k"], cap, e)
    rows = _exchange(ctx, buf, "fwd_comm")
    with ctx.span("fwd_compute"):
        out, ecache = k.experts_forward(rows, w["w_in"], w["w_out"], p["activation"], p["gated"])
    back = _return(ctx, out, (e, n, cap, d), "fwd_comm")
    with ctx.span("fwd_compute"):
        y, picked = kr.combine_forward(back, x.shape, rcache)
        scache = None
        if _shared(ctx):
            sy, scache = k.experts_forward(x.reshape(1, n * s, d), w["shared_in"][None], w["shared_out"][None],
                                           p["activation"], p["gated"])
            y, _ = add_forward(y, sy.reshape(n, s, d))
    y = xp.ascontiguousarray(y)
    ctx.allreduce(y, (F,), "fwd_comm")
    return check_shape(ctx, y), (x, rcache, picked, ecache, scache)


def backward(ctx: LayerCtx, dy, cache):
    """The kernels of costmodel.calls.moe in its order: every input-gradient kernel, then the weights'."""
    x, rcache, picked, ecache, scache = cache
    xp, w, p = ctx.xp, ctx.weights, ctx.p
    n, s, d = x.shape
    e, _, cap = memo(ctx, _geometry)
    with ctx.span("bwd_compute"):
        dgates, dbuf = kr.combine_backward(dy, picked, rcache, (e, n, cap, d))
    drows_in = _exchange(ctx, dbuf, "bwd_comm")
    with ctx.span("bwd_compute"):
        drows, dpre = k.experts_backward_data(drows_in, ecache, w["w_in"], w["w_out"], p["activation"], p["gated"])
    dback = _return(ctx, drows, (e, n, cap, d), "bwd_comm")
    with ctx.span("bwd_compute"):
        dx, dlogits = kr.dispatch_backward(dback, dgates, x.shape, rcache)
        dx, _ = add_forward(dx, linear_backward_data(dlogits, w["router"]))
        dys = dy.reshape(1, n * s, d)
        if scache is not None:
            dsx, sdpre = k.experts_backward_data(dys, scache, w["shared_in"][None], w["shared_out"][None],
                                                 p["activation"], p["gated"])
            dx, _ = add_forward(dx, dsx.reshape(n, s, d))
        dw_router, _ = linear_backward_weights(dlogits, x, False)
        dw_in, dw_out = k.experts_backward_weights(drows_in, dpre, ecache)
        grads = {"router": dw_router, "w_in": dw_in, "w_out": dw_out}
        if scache is not None:
            dsi, dso = k.experts_backward_weights(dys, sdpre, scache)
            grads |= {"shared_in": dsi[0], "shared_out": dso[0]}
    dx = xp.ascontiguousarray(dx)
    ctx.allreduce(dx, (F,), "bwd_comm")
    return [dx], grads
