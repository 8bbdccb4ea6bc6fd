"""Synthetic operands of the transformer kernels for the timing harness (profiler.timing.harness):
attention's core on the fused q/k/v projection's output, as the executor runs it (its key/value
heads their own); the mixture-of-experts kernels (kernels.moe_route, kernels.moe): random tokens and router logits of the call's shape, routed as
the executor routes them, so the dispatch keeps and drops the rows a real step does at that
capacity; the experts' operands from a forward run of the same experts."""

from __future__ import annotations

from typing import Callable

from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.moe import ACTIVATION_CODES
from kernels import KERNELS, moe, moe_route
from kernels.attention import attention_backward, attention_forward


def moe_route_builder(call: KernelCall, f: dict, fn: Callable, ops) -> Callable[[], object]:
    """``moe_dispatch.*`` / ``moe_combine.*`` over (N, S, D) tokens and (N, S, experts) logits."""
    n, s, d, e, k, cap = (f[x] for x in ("n", "sq", "d", "experts", "top_k", "cap"))
    x, logits = ops.input(n, s, d), ops.rand(n, s, e)
    if call.kernel == "moe_dispatch.fwd":
        return lambda: fn(x, logits, k, cap, e)
    buf, rcache = moe_route.dispatch_forward(x, logits, k, cap, e)
    if call.kernel == "moe_combine.fwd":
        return lambda: fn(buf, x.shape, rcache)
    _, picked = moe_route.combine_forward(buf, x.shape, rcache)
    dy = ops.grad(n, s, d)
    if call.kernel == "moe_combine.bwd":
        return lambda: fn(dy, picked, rcache, buf.shape)
    dgates, dbuf = moe_route.combine_backward(dy, picked, rcache, buf.shape)
    return lambda: fn(dbuf, dgates, x.shape, rcache)  # moe_dispatch.bwd


def moe_experts_builder(call: KernelCall, f: dict, fn: Callable, ops) -> Callable[[], object]:
    """``moe_experts.*``: ``e`` experts over ``rows`` rows each, as the executor runs them."""
    e, rows, d, h = (f[x] for x in ("e", "rows", "d", "hidden"))
    gated, act = bool(f["gated"]), ACTIVATION_CODES[f["act"]]
    x = ops.input(e, rows, d)
    w_in, w_out = ops.rand(e, (2 if gated else 1) * h, d), ops.rand(e, d, h)
    if call.kernel == "moe_experts.fwd":
        return lambda: fn(x, w_in, w_out, act, gated)
    out, cache = moe.experts_forward(x, w_in, w_out, act, gated)
    dout = ops.grad(*out.shape)
    if call.kernel == "moe_experts.bwd_data":
        return lambda: fn(dout, cache, w_in, w_out, act, gated)
    _, dpre = moe.experts_backward_data(dout, cache, w_in, w_out, act, gated)
    return lambda: fn(dout, dpre, cache)


def attention_builder(call: KernelCall, f: dict, fn: Callable, ops) -> Callable[[], object]:
    """The core on the fused q/k/v projection's output, as the executor runs it
    (kernels.attention.attention_forward_packed); a shard whose queries are not all of its keys
    (a sequence split, which the executor does not run) times the core alone."""
    r = ops.rand
    n, hd, sq, sk, dh = (f[x] for x in ("n", "heads", "sq", "sk", "dh"))
    kv = f.get("kv_heads", hd)  # grouped-query attention: its own key/value heads
    causal = bool(f["causal"])
    # the algorithm the call prices ("" is the materialised core, costmodel.calls.attention): a GPU
    # left to its default would run flash for a materialised call
    algorithm = call.algo or "materialized"
    if sq != sk:
        q, kk, v = r(n, hd, sq, dh), r(n, kv, sk, dh), r(n, kv, sk, dh)
        o, cache = attention_forward(q, kk, v, causal, algorithm=algorithm)
        if call.kernel.endswith(".fwd"):
            return lambda: attention_forward(q, kk, v, causal, algorithm=algorithm)
        do = ops.grad(*o.shape)
        return lambda: attention_backward(do, cache)
    qkv = ops.input(n, sq, (hd + 2 * kv) * dh) if call.kernel.endswith(".fwd") else r(n, sq, (hd + 2 * kv) * dh)
    if call.kernel.endswith(".fwd"):
        return lambda: fn(qkv, hd, kv, causal, algorithm=algorithm)
    o2, cache = KERNELS["attention.fwd"](qkv, hd, kv, causal, algorithm=algorithm)
    do2 = ops.grad(*o2.shape)
    return lambda: fn(do2, cache, hd)
