"""The kernels an executor op calls, recorded beside those the cost model prices for it
(costmodel.calls.layer_calls), on one rank's shard of a layer with its collectives left out:
shared by tests/unit/executor/ops/test_gpt_ops.py and tests/unit/costmodel/moe/test_moe_kernel_calls.py."""

from __future__ import annotations

import numpy as np

from costmodel.calls.layer_calls import backward_calls, kernel_calls
from costmodel.parallel.layout import block
from costmodel.parallel.shard import input_layout, local_layer, output_layout, weight_layouts
from costmodel.parallel.strategy import make_strategy
from executor.ops.base import LayerCtx
from executor.runtime.synthetic import init_weights, take
from executor.runtime.timers import Timers

from tests.support.kernel_checks import RNG
from tests.support.op_checks import _NoComms


def _ctx(net, name, degrees=None, batch=2, rank=0, dtype=np.float64, seed=0):
    """The context rank ``rank`` builds for a layer (executor.runtime.stage), collectives left out."""
    layer = net.layer(name)
    degrees = degrees or {}
    strategy = make_strategy(int(np.prod(list(degrees.values()))) if degrees else 1,
                             {d: k for d, k in degrees.items() if d != "R"})
    in_ls = tuple(input_layout(layer, strategy, batch, k) for k in range(len(layer.inputs)))
    out_l = output_layout(layer, strategy, batch)
    full = init_weights(net, seed, dtype)
    wl = weight_layouts(layer, strategy)
    weights = {w: take(full[(name, w)], block(wl[w], rank)) for w, _ in layer.weights}
    return LayerCtx(layer, strategy, rank, batch, "", in_ls, out_l, tuple(block(l, rank) for l in in_ls),
                    block(out_l, rank), _NoComms(), Timers(), np, weights)


def _local(ctx, shape_of="in", k=0, seed=5):
    region = ctx.in_blocks[k] if shape_of == "in" else ctx.out_block
    return RNG(seed).standard_normal(tuple(hi - lo for lo, hi in region))


def _recording(monkeypatch, module, calls):
    """Wrap the kernels ``module`` calls so each call appends (kernel, shape) as kernel_calls names them."""
    def rows(a):
        return int(np.prod(a.shape[:-1]))
    spec = {
        "linear_forward": lambda x, w, b=None: ("linear.fwd", (rows(x), w.shape[1], w.shape[0])),
        "linear_backward_data": lambda dy, w: ("linear.bwd_data", (rows(dy), w.shape[1], w.shape[0])),
        "linear_backward_weights": lambda dy, x, b=True: ("linear.bwd_weights",
                                                          (rows(dy), x.shape[-1], dy.shape[-1])),
        "attention_forward": lambda q, k, v, causal=False, algorithm="": ("attention.fwd", (*q.shape[:3], k.shape[2],
                                                                              q.shape[3], int(causal), k.shape[1])),
        "attention_backward": lambda do, c: ("attention.bwd", (*c["q"].shape[:3], c["k"].shape[2],
                                                               c["q"].shape[3], 1, c["k"].shape[1])),
        # the core as the op calls it, on the fused projection's output (kernels.attention)
        "attention_forward_packed": lambda qkv, h, kv, causal=False, algorithm="": (
            "attention.fwd", (qkv.shape[0], h, qkv.shape[1], qkv.shape[1], qkv.shape[2] // (h + 2 * kv), int(causal), kv)),
        "attention_backward_packed": lambda do2, c, h: ("attention.bwd", (*c["q"].shape[:3], c["k"].shape[2],
                                                                          c["q"].shape[3], 1, c["k"].shape[1])),
        "concat_forward": lambda xs, axis=1: ("concat.fwd", (int(np.prod(xs[0].shape[:axis])),
                                                             int(np.prod(xs[0].shape[axis + 1:])),
                                                             *(x.shape[axis] for x in xs))),
        "softmax_xent_forward": lambda z, lab, total, lo=None: ("softmax_xent.fwd", (rows(z), z.shape[-1])),
        "softmax_xent_backward": lambda c, d=1.0: ("softmax_xent.bwd", (rows(c["p"]), c["p"].shape[-1])),
    }
    for name, describe in spec.items():
        if hasattr(module, name):
            real = getattr(module, name)

            def wrapped(*args, _real=real, _describe=describe, **kwargs):
                calls.append(_describe(*args, **kwargs))
                return _real(*args, **kwargs)
            monkeypatch.setattr(module, name, wrapped)


def _priced(ctx) -> list:
    local = local_layer(ctx.layer, ctx.strategy, ctx.batch)
    out = [(c.kernel, c.shape) for c in (*kernel_calls(local, "fwd"), *backward_calls(local))]
    # the bias flag of linear calls and the causal flag are structure, compared apart below
    return [(k, s[:3] if k.startswith("linear") else s) for k, s in out]
