"""Shared by the executor op tests (tests/unit/executor/ops/test_*_ops.py, tests/mpi/test_execute_*.py): one
rank's shard of a layer as the executor runs it, its op checked against finite differences and the
reference step's own code, and variants of the zoo's tiny-llama written to a folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from costmodel.parallel.shard import input_layout, output_layout, weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import make_strategy
from executor.check import reference
from executor.ops.base import LayerCtx
from executor.runtime.synthetic import init_weights, take
from executor.runtime.timers import Timers
from networks.loader import load_network

from tests.support.kernel_checks import RNG, fd_directional
from tests.support.paths import ZOO


class _NoComms:
    def get(self, strategy, dims):
        return None


def one_rank_ctx(net_ref: str, name: str) -> LayerCtx:
    """Layer ``name`` of network ``net_ref`` (a zoo name or a path) on one rank, batch 2, with its
    synthetic weights in float64."""
    net = load_network(net_ref)
    layer, strategy = net.layer(name), make_strategy(1, {})
    in_l, out_l = input_layout(layer, strategy, 2, 0), output_layout(layer, strategy, 2)
    full = init_weights(net, 0, np.float64)
    wl = weight_layouts(layer, strategy)
    weights = {w: take(full[(name, w)], block(wl[w], 0)) for w, _ in layer.weights}
    return LayerCtx(layer, strategy, 0, 2, "", (in_l,), out_l, (block(in_l, 0),), block(out_l, 0), _NoComms(),
                    Timers(), np, weights)


def check_op(ctx: LayerCtx, op, width: int = 32, seq: int = 16) -> None:
    """``op``'s backward against finite differences of its forward, and both against the reference
    step's code for the layer (to 1e-10)."""
    rng = RNG(5)
    x, r = rng.standard_normal((2, seq, width)), rng.standard_normal((2, seq, width))
    names = [w for w, _ in ctx.layer.weights]
    w0 = [ctx.weights[w].copy() for w in names]

    def loss(x_, *ws):
        ctx.weights.update(zip(names, ws))
        return float(np.sum(op.forward(ctx, [x_])[0] * r))
    y, cache = op.forward(ctx, [x])
    (dx,), grads = op.backward(ctx, r, cache)
    fd_directional(loss, [x, *w0], [dx, *(grads[w] for w in names)])
    ctx.weights.update(zip(names, w0))
    y_ref, ref_cache = reference._forward(ctx.layer, [x], dict(ctx.weights), "", None)
    np.testing.assert_allclose(y, y_ref, rtol=1e-10, atol=1e-12)
    (dx_ref,), ref_grads = reference._backward(ctx.layer, r, ref_cache, dict(ctx.weights), "")
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-10, atol=1e-12)
    for w in names:
        np.testing.assert_allclose(grads[w], ref_grads[w], rtol=1e-10, atol=1e-12)


def tiny_llama_variant(folder: Path, name: str, old: str, new: str) -> str:
    """networks/zoo/tiny-llama.yaml named ``name`` with ``old`` replaced by ``new``, written to ``folder``."""
    spec = (ZOO / "tiny-llama.yaml").read_text().replace("name: tiny-llama", f"name: {name}").replace(old, new)
    assert new in spec
    path = folder / f"{name}.yaml"
    path.write_text(spec)
    return str(path)


def qwen_like(folder: Path) -> str:
    """tiny-llama with Qwen3's per-head query/key norms."""
    return tiny_llama_variant(folder, "tiny-qwen", "rotary: true}", "rotary: true, qk_norm: true}")
