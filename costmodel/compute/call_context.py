"""A kernel's context in a training step: the calls the step makes just before it.

A kernel inside a step does not start from a fixed cache state. After a layer that streams more
than the last-level cache (alexnet's fc6 reads 150 MB of weights), the next kernels' code and data
come from memory, and small kernels (alexnet's relu6 and drop7) take several times as long as with
warm code; between small layers (lenet5's fc1, relu3, fc2, fc3, loss) everything stays in cache
(docs/executor.md, "``--fresh-profile``: the prediction's kernels timed inside the run", has the
measured times). :func:`preceding_calls` gives, per kernel call, the two calls before it in the
step (the step repeats, so the first call's are the last two); what they move bounds the reuse
distance of its code and data (Mattson et al., "Evaluation techniques for storage hierarchies",
IBM Systems Journal 9(2), 1970), and profiler.in_step.kernels runs them before timing it. Two, not one:
drop7 follows relu6 (64 KB) but finds its random-number code evicted by fc6 before that. Not
reuse per kernel (the bytes since the same kernel last ran): that calls the backward pass of
lenet5's fc3 cold, though it reuses the BLAS code fc3's forward pass has just run, and prices it
about three times too slow. A call the step makes in several places is timed in each of its
contexts, and each layer's pass priced by the call timed where that pass makes it
(:func:`occurrences`).

The order is the executor's: every layer's forward pass in network order, the backward passes in
reverse order (input gradient, then weight gradient, then the sums of its input gradients into
producers' gradients that an earlier-processed reader has already started), then the updates in
network order.
Reshard copies and collectives are left out (small next to the kernels around them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.layer_calls import backward_calls, grad_sum_calls, kernel_calls, update_calls
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import Strategy
from networks.ir import Network


def step_calls(net: Network, batch: int, strategies: Mapping[str, Strategy],
               algorithms: Mapping[str, str]) -> list[KernelCall]:
    """The kernel calls of one training step of one rank, in the order the executor makes them."""
    return [c for _, c in step_calls_by_layer(net, batch, strategies, algorithms)]


def step_calls_by_layer(net: Network, batch: int, strategies: Mapping[str, Strategy],
                        algorithms: Mapping[str, str]) -> list[tuple[str, KernelCall]]:
    """:func:`step_calls`, each with the layer whose forward or backward pass or update makes it
    ("" for the sums of a producer's input gradients, which no pass makes)."""
    shards = [(layer, local_layer(layer, strategies[layer.name], batch), algorithms.get(layer.name, ""))
              for layer in net.layers]
    local_of = {layer.name: loc for layer, loc, _ in shards}
    fwd = [(layer.name, c) for layer, loc, algo in shards for c in kernel_calls(loc, "fwd", algo)]
    bwd: list[tuple[str, KernelCall]] = []
    has_grad: set[str] = set()
    for layer, loc, algo in reversed(shards):
        bwd += [(layer.name, c) for c in backward_calls(loc, algo)]
        for src in layer.inputs:  # the gradient goes back to its producer, summed with earlier ones
            if src in local_of:
                if src in has_grad:
                    bwd += [("", c) for c in grad_sum_calls(local_of[src], 2)]
                has_grad.add(src)
    upd = [(layer.name, c) for layer, loc, _ in shards for c in update_calls(loc)]
    return fwd + bwd + upd


def _windows(seq: list[KernelCall], window: int) -> list[tuple[KernelCall, ...]]:
    """Per position of ``seq`` (one step, repeated), the ``window`` calls just before it, in order."""
    n = len(seq)
    return [tuple(seq[(i - k) % n] for k in range(min(window, n - 1), 0, -1)) for i in range(n)]


def _keys(calls: Iterable[KernelCall]) -> tuple[str, ...]:
    return tuple(c.key for c in calls)


def preceding_calls(calls: Iterable[KernelCall], window: int = 2) -> dict[str, tuple[KernelCall, ...]]:
    """Per call key, the ``window`` calls just before it in ``calls`` (one step, repeated), in step
    order, at the run whose window moves the median bytes (the lower one of an even count) among
    the key's runs: what profiler.in_step.kernels replays before timing the call."""
    seq = list(calls)
    runs: dict[str, list[tuple[KernelCall, ...]]] = {}
    for c, before in zip(seq, _windows(seq, window)):
        runs.setdefault(c.key, []).append(before)
    out = {}
    for key, found in runs.items():
        ranked = sorted(found, key=lambda before: sum(c.bytes for c in before))
        out[key] = ranked[(len(ranked) - 1) // 2]
    return out


@dataclass(frozen=True)
class InContext(KernelCall):
    """A kernel call timed in one more of its contexts in the step (:func:`occurrences`): the same
    kernel and operands, keyed apart (``key#context``) so its samples are its own."""

    context: int = 0

    @property
    def plain_key(self) -> str:
        return KernelCall.key.fget(self)

    @property
    def key(self) -> str:
        return f"{self.plain_key}#{self.context}"


def occurrence_key(key: str, layer: str) -> str:
    """The profile-table key of call ``key`` where layer ``layer``'s pass makes it in the step: an
    entry installed for one plan (executor.session.execute.step_context_entries), looked up before the
    call's own (costmodel.compute.profiled)."""
    return f"{key}@{layer}"


def is_occurrence_key(key: str) -> bool:
    return "@" in key


def occurrences(tagged: Sequence[tuple[str, KernelCall]], window: int = 2,
                median: Mapping[str, tuple[KernelCall, ...]] | None = None) -> tuple[
        list[InContext], dict[str, tuple[KernelCall, ...]], dict[str, str]]:
    """The other contexts of the calls a step makes in more than one (``tagged``:
    :func:`step_calls_by_layer`). A key's own entry is timed in its median context
    (:func:`preceding_calls`) and prices every pass that makes the call; where the same call
    follows other calls elsewhere in the step (ResNet-18's ReLU backward after a convolution's
    backward in one block, after a gradient sum in the next; the residual addition of the forward
    pass, and the same addition summing gradients), that one context misprices the others. Returns
    (the calls to time in those other contexts, one per distinct context, their preceding calls,
    and per :func:`occurrence_key` of a layer's call the key whose entry prices it there: its own
    for its median context). Updates (timed in sequence, profiler.in_step.kernels) and gradient sums (no
    layer's pass) are left out; a call a layer's pass makes twice is priced in its last context.
    ``median``: the step's :func:`preceding_calls` with the same ``window``, when the caller has them."""
    seq = [c for _, c in tagged]
    windows = _windows(seq, window)
    median = {key: _keys(before) for key, before in (median or preceding_calls(seq, window)).items()}
    seen: dict[str, dict[tuple[str, ...], int]] = {}
    for c, before in zip(seq, windows):
        seen.setdefault(c.key, {}).setdefault(_keys(before), len(seen.get(c.key, {})))
    extra: list[InContext] = []
    before_of: dict[str, tuple[KernelCall, ...]] = {}
    where: dict[str, str] = {}
    for (layer, c), before in zip(tagged, windows):
        if not layer or c.kernel.startswith("sgd.") or len(seen[c.key]) < 2:
            continue
        if _keys(before) == median[c.key]:
            where[occurrence_key(c.key, layer)] = c.key
            continue
        call = InContext(c.kernel, c.shape, c.dtype, c.algo, c.flops, c.bytes, seen[c.key][_keys(before)])
        if call.key not in before_of:
            extra.append(call)
            before_of[call.key] = before
        where[occurrence_key(c.key, layer)] = call.key
    return extra, before_of, where


def updates_of(calls: Iterable[KernelCall]) -> list[KernelCall]:
    """The optimiser's update calls of one step, in step order, repeats kept (profiler.in_step.kernels times
    them as the step runs them: back to back, each on its own operands)."""
    return [c for c in calls if c.kernel.startswith("sgd.")]
