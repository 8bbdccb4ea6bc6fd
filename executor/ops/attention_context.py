"""Attention over a sequence split (``H``, context parallelism) in the executor: the keys and values
all-gathered over the sequence group, their gradients reduce-scattered back (the ``allgather``
exchange of costmodel.comm.context, as Llama 3 runs it: Dubey et al. 2024, section 3.3.2).

Rank ``i`` of a group of ``c`` holds the contiguous block of positions ``[i S/c, (i+1) S/c)`` of every
layer (the layout algebra's H block, costmodel.parallel.layout.interval; uneven where ``c`` does not divide S). Forward, after its queries, keys and values are made (and
normalised and rotated at their own positions: executor.ops.attention), one all-gather over the
group (``fwd_comm``) gives every rank the keys and values of the whole sequence; a causal layer's
queries then attend the keys up to their block's end, which is the core's
own mask for queries that are the last of their keys (kernels.attention), so the core runs as it is.
Backward, the core's key and value gradients over those keys are zero-padded to the whole sequence
and reduce-scattered over the group (``bwd_comm``): each rank receives the sum of every rank's
gradient of its own block. Unlike the load-balanced chunks the cost model prices FlashAttention
with (costmodel.calls.flash: each rank two chunks, ``i`` and ``2c - 1 - i``), the contiguous blocks leave
the last rank of a causal layer every key: the straggler, as the materialised core is priced.
"""

from __future__ import annotations

from costmodel.parallel.axes import H
from costmodel.parallel.layout import interval
from executor.comm.collectives import displacements, wait_for
from executor.ops.base import LayerCtx, memo
from kernels.attention import attention_backward, attention_forward


def _group(ctx: LayerCtx):
    sub = ctx.comms.get(ctx.strategy, (H,))
    if sub is not None and sub.rank != ctx.coord(H):  # the blocks are exchanged in rank order
        raise RuntimeError(f"layer {ctx.layer.name}: sequence group rank {sub.rank} is not its H coordinate "
                           f"{ctx.coord('H')}")
    return sub


def _blocks(ctx: LayerCtx) -> list[tuple[int, int]]:
    """Every sequence rank's positions ``[a, b)``, in rank order (costmodel.parallel.layout.interval)."""
    s, c = ctx.layer.in_shapes[0][0], ctx.strategy.degree(H)
    return [interval(s, c, i) for i in range(c)]


def keys_seen(ctx: LayerCtx) -> int:
    """The keys this rank's queries attend: up to its block's end (causal), else the whole sequence."""
    return _blocks(ctx)[ctx.coord(H)][1] if ctx.p["causal"] else ctx.layer.in_shapes[0][0]


def _heads(xp, a, width: int):
    """(N, S, heads x width) -> (N, heads, S, width), contiguous."""
    n, s, w = a.shape
    return xp.ascontiguousarray(a.reshape(n, s, w // width, width).transpose(0, 2, 1, 3))


def _merged(xp, a):
    """(N, heads, S, width) -> (N, S, heads x width), contiguous."""
    n, h, s, w = a.shape
    return xp.ascontiguousarray(a.transpose(0, 2, 1, 3)).reshape(n, s, h * w)


def gather(ctx: LayerCtx, kv2):
    """Every rank's keys and values (N, S_l, W) as the whole sequence's (N, S, W)."""
    sub, xp = memo(ctx, _group), ctx.xp
    n, _, w = kv2.shape
    blocks = memo(ctx, _blocks)
    counts = [n * (b - a) * w for a, b in blocks]
    recv = xp.empty(sum(counts), dtype=kv2.dtype)
    wait_for(sub, ctx.timers, ctx.layer.name)
    with ctx.span("fwd_comm"):
        sub.allgather(xp.ascontiguousarray(kv2).reshape(-1), recv, counts, displacements(counts))
    parts = [recv[o:o + k].reshape(n, b - a, w) for o, k, (a, b) in zip(displacements(counts), counts, blocks)]
    return xp.concatenate(parts, axis=1)


def scatter(ctx: LayerCtx, grads):
    """The sum over the group of every rank's key and value gradients (N, keys seen, W), each rank's
    own block of positions (N, S_l, W)."""
    sub, xp = memo(ctx, _group), ctx.xp
    n, seen, w = grads.shape
    blocks = memo(ctx, _blocks)
    full = xp.zeros((n, blocks[-1][1], w), dtype=grads.dtype)
    full[:, :seen] = grads
    send = xp.concatenate([xp.ascontiguousarray(full[:, a:b]).reshape(-1) for a, b in blocks])
    a, b = blocks[ctx.coord(H)]
    recv = xp.empty((n, b - a, w), dtype=grads.dtype)
    wait_for(sub, ctx.timers, ctx.layer.name)
    with ctx.span("bwd_comm"):
        sub.reduce_scatter(send, recv.reshape(-1), [n * (hi - lo) * w for lo, hi in blocks])
    return recv


def core_forward(ctx: LayerCtx, qkv, dh: int, dl: int, algorithm: str):
    """The core of this rank's queries against the gathered keys and values: ``(o2, cache)``, o2
    (N, S_l, heads dh)."""
    xp = ctx.xp
    with ctx.span("fwd_compute"):
        kv2 = xp.ascontiguousarray(qkv[..., dl:])
    every = gather(ctx, kv2)[:, :memo(ctx, keys_seen)]
    dkv = every.shape[-1] // 2
    with ctx.span("fwd_compute"):
        q, k, v = _heads(xp, qkv[..., :dl], dh), _heads(xp, every[..., :dkv], dh), _heads(xp, every[..., dkv:], dh)
        o, core = attention_forward(q, k, v, causal=bool(ctx.p["causal"]), algorithm=algorithm)
        return _merged(xp, o), core


def core_backward(ctx: LayerCtx, do2, core, dh: int):
    """The gradient of :func:`core_forward`'s ``qkv`` (this rank's block) from its output's;
    ``core``: the core's cache."""
    xp = ctx.xp
    with ctx.span("bwd_compute"):
        dq, dk, dv = attention_backward(_heads(xp, do2, dh), core)
        grads = xp.concatenate([_merged(xp, dk), _merged(xp, dv)], axis=-1)
    mine = scatter(ctx, grads)
    with ctx.span("bwd_compute"):
        return xp.concatenate([_merged(xp, dq), mine], axis=-1)
