"""A layer's op against the kernel calls the cost model prices for it, on one rank's shard.

For tiny-gqa's attention and tiny-moe's mixture of experts (batch 4 on one rank, float32), times
the executor's op (``executor.ops.attention`` / ``executor.ops.moe``: forward, and backward with
its weight gradients) and, interleaved with it in the same loop, each priced kernel call
(``costmodel.calls.layer_calls``) built and run by the profiler's harness; prints the medians and the
op's excess over its kernels: the Python between the kernels inside the layer's spans, which no
kernel timing holds (docs/VALIDATION.md, "Grouped-query attention and mixtures of experts").

    python bench/kernels/bench_op_kernels.py [--reps 1500] [--batch 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import input_layout, local_layer, output_layout, weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import make_strategy
from executor.ops import attention, moe
from executor.ops.base import LayerCtx
from executor.runtime.synthetic import init_weights, take
from executor.runtime.timers import Timers
from networks.loader import load_network
from profiler.timing.harness import build


class _NoComms:
    def get(self, strategy, dims):
        return None


def _ctx(net_name: str, name: str, batch: int):
    net = load_network(net_name)
    layer, strategy = net.layer(name), make_strategy(1, {})
    in_l, out_l = input_layout(layer, strategy, batch, 0), output_layout(layer, strategy, batch)
    full, wl = init_weights(net, 0, np.float32), weight_layouts(layer, strategy)
    weights = {w: take(full[(name, w)], block(wl[w], 0)) for w, _ in layer.weights}
    return LayerCtx(layer, strategy, 0, batch, "", (in_l,), out_l, (block(in_l, 0),), block(out_l, 0), _NoComms(),
                    Timers(), np, weights)


def _sample(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    for net_name, name, op in (("tiny-gqa", "h0.attn", attention), ("tiny-moe", "h0.moe", moe)):
        ctx = _ctx(net_name, name, args.batch)
        x = np.random.default_rng(0).standard_normal((args.batch, *ctx.layer.in_shapes[0])).astype(np.float32)
        y, cache = op.forward(ctx, [x])
        local = local_layer(ctx.layer, ctx.strategy, args.batch)
        fwd = [build(c, np) for c in kernel_calls(local, "fwd")]
        bwd = [build(c, np) for c in kernel_calls(local, "bwd_data") + kernel_calls(local, "bwd_weights")]
        got: dict[str, list[float]] = {"op fwd": [], "kernels fwd": [], "op bwd": [], "kernels bwd": []}
        for _ in range(args.reps):
            got["op fwd"].append(_sample(lambda: op.forward(ctx, [x])))
            got["op bwd"].append(_sample(lambda: op.backward(ctx, y, cache)))
            got["kernels fwd"].append(sum(_sample(k) for k in fwd))
            got["kernels bwd"].append(sum(_sample(k) for k in bwd))
        med = {k: sorted(v)[len(v) // 2] * 1e6 for k, v in got.items()}
        print(f"{net_name} {name} batch {args.batch}: forward op {med['op fwd']:.1f} us, its priced kernels "
              f"{med['kernels fwd']:.1f} us ({med['op fwd'] / med['kernels fwd'] - 1:+.0%}); backward op "
              f"{med['op bwd']:.1f} us, kernels {med['kernels bwd']:.1f} us ({med['op bwd'] / med['kernels bwd'] - 1:+.0%})")


if __name__ == "__main__":
    main()
