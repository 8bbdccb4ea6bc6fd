"""A kernel's context in a training step: the calls the step makes just before it.

A kernel inside a step does not start from a fixed cache state. After a layer that streams more
than the last-level cache (alexnet's fc6 reads 150 MB of weights), the next kernels' code and data
come from memory, and small kernels (alexnet's relu6 and drop7) take several times as long as with
warm code; between small layers (lenet5's fc1, relu3, fc2, fc3, loss) everything stays in cache
(docs/executor.md, "``--fresh-profile``: the prediction's kernels timed inside the run", has the
measured times). :func:`preceding_calls` gives, per kernel call, the two calls before it in the
step (the step repeats, so the first call's are the last two); what they move bounds the reuse
distance of its code and data (Mattson et al., "Evaluation techniques for storage hierarchies",
IBM Systems Journal 9(2), 1970), and profiler.inrun runs them before timing it. Two, not one:
drop7 follows relu6 (64 KB) but finds its random-number code evicted by fc6 before that. Not
reuse per kernel (the bytes since the same kernel last ran): that calls the backward pass of
lenet5's fc3 cold, though it reuses the BLAS code fc3's forward pass has just run, and prices it
about three times too slow.

The order is the executor's: every layer's forward pass in network order, the backward passes in
reverse order (input gradient, then weight gradient, then the sums of its input gradients into
producers' gradients that an earlier-processed reader has already started), then the updates in
network order.
Reshard copies and collectives are left out (small next to the kernels around them).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from costmodel.kernel_calls import KernelCall, backward_calls, grad_sum_calls, kernel_calls, update_calls
from costmodel.layer_layouts import local_layer
from costmodel.strategy import Strategy
from networks.ir import Network


def step_calls(net: Network, batch: int, strategies: Mapping[str, Strategy],
               algorithms: Mapping[str, str]) -> list[KernelCall]:
    """The kernel calls of one training step of one rank, in the order the executor makes them."""
    shards = [(layer, local_layer(layer, strategies[layer.name], batch), algorithms.get(layer.name, ""))
              for layer in net.layers]
    local_of = {layer.name: loc for layer, loc, _ in shards}
    fwd = [c for _, loc, algo in shards for c in kernel_calls(loc, "fwd", algo)]
    bwd = []
    has_grad: set[str] = set()
    for layer, loc, algo in reversed(shards):
        bwd += backward_calls(loc, algo)
        for src in layer.inputs:  # the gradient goes back to its producer, summed with earlier ones
            if src in local_of:
                if src in has_grad:
                    bwd += grad_sum_calls(local_of[src], 2)
                has_grad.add(src)
    upd = [c for _, loc, _ in shards for c in update_calls(loc)]
    return fwd + bwd + upd


def preceding_calls(calls: Iterable[KernelCall], window: int = 2) -> dict[str, tuple[KernelCall, ...]]:
    """Per call key, the ``window`` calls just before it in ``calls`` (one step, repeated), in step
    order, at the run whose window moves the median bytes (the lower one of an even count) among
    the key's runs: what profiler.inrun replays before timing the call."""
    seq = list(calls)
    n = len(seq)
    runs: dict[str, list[tuple[KernelCall, ...]]] = {}
    for i, c in enumerate(seq):
        runs.setdefault(c.key, []).append(tuple(seq[(i - k) % n] for k in range(min(window, n - 1), 0, -1)))
    out = {}
    for key, found in runs.items():
        ranked = sorted(found, key=lambda before: sum(c.bytes for c in before))
        out[key] = ranked[(len(ranked) - 1) // 2]
    return out


def updates_of(calls: Iterable[KernelCall]) -> list[KernelCall]:
    """The optimiser's update calls of one step, in step order, repeats kept (profiler.inrun times
    them as the step runs them: back to back, each on its own operands)."""
    return [c for c in calls if c.kernel.startswith("sgd.")]
