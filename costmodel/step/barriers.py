"""The barriers a training step's collectives make, and what the pass before each one moved.

The executor runs every collective after a barrier (executor.comm.collectives.wait_for) and inside spans of
its own, with Python around it that no kernel's or isolated collective's timing holds: the
executor's code around a collective (executor.probes.collective_code measures it per kind and per the
bytes of the pass before it). This lists, for a planned step, each place the runtime
(executor.runtime.stage, executor.ops) makes one, as it makes them:

- a layer's forward reshard: one barrier before the layer's inputs are moved, when any input
  that another layer makes is not already where the layer needs it (``same_blocks``), after the
  pass of the layer run before it;
- each collective of a layer's own forward or backward (partial sums, input gradients,
  statistics; :attr:`LayerEstimate.comms` with a group of more than one rank), after that pass;
- a layer's backward reshard: one barrier before the input gradients go back, after its
  backward pass;
- the weight-gradient sums after the whole backward: one per layer and distinct group size, back
  to back (no pass before them: their code is warm).

Not counted: a pipelined plan's point-to-point sends, ZeRO's and tied tables' own collectives
beyond what the layer estimates list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from costmodel.calls.algorithms import kernel_algorithm
from costmodel.compute.dispatch import pass_bytes
from costmodel.parallel.shard import input_layout, local_layer, output_layout
from costmodel.parallel.layout import same_blocks
from costmodel.parallel.strategy import Strategy
from networks.analysis import consumers
from networks.ir import Network

ALLREDUCE, RESHARD = "allreduce", "reshard"


@dataclass(frozen=True)
class Barrier:
    layer: str
    phase: str  # "fwd", "bwd" or "sync"
    kind: str  # RESHARD (a layout change between layers) or ALLREDUCE (any collective of a layer's own)
    after_bytes: int  # what the kernels of the pass just before it moved


def _moves(net: Network, batch: int, strategies: Mapping[str, Strategy]) -> dict[str, bool]:
    """Per layer, whether any input another layer makes changes blocks on its way in."""
    by_name = {layer.name: layer for layer in net.layers}
    out = {}
    for layer in net.layers:
        out[layer.name] = any(
            not same_blocks(output_layout(by_name[src], strategies[src], batch),
                            input_layout(layer, strategies[layer.name], batch, slot))
            for slot, src in enumerate(layer.inputs) if src in by_name)
    return out


def step_barriers(net: Network, batch: int, strategies: Mapping[str, Strategy], pred,
                  algorithms: Mapping[str, str] | None = None) -> tuple[Barrier, ...]:
    """Every barrier of one step of ``pred`` (a :class:`costmodel.step.prediction.StepPrediction` of these
    strategies), in step order: the forward's, the backward's, then the gradient sums'."""
    if not strategies or next(iter(strategies.values())).p < 2:
        return ()
    algorithms = algorithms or {}
    readers = consumers(net)
    moves = _moves(net, batch, strategies)
    rows = {row.layer.name: row for row in pred.layers}
    passes = {layer.name: pass_bytes(local_layer(layer, strategies[layer.name], batch),
                                     kernel_algorithm(algorithms.get(layer.name, "")), readers[layer.name])
              for layer in net.layers}
    fwd, bwd, sync = [], [], []
    before = 0
    for layer in net.layers:
        name, comms = layer.name, rows[layer.name].layer.comms
        if moves[name]:
            fwd.append(Barrier(name, "fwd", RESHARD, before))
        fwd += [Barrier(name, "fwd", ALLREDUCE, passes[name][0]) for c in comms if c.phase == "fwd" and c.group > 1]
        before = passes[name][0]
        own = [Barrier(name, "bwd", ALLREDUCE, passes[name][1]) for c in comms if c.phase == "bwd" and c.group > 1]
        if moves[name]:
            own.append(Barrier(name, "bwd", RESHARD, passes[name][1]))
        bwd = own + bwd  # the backward runs the layers in reverse
        groups = {c.group for c in comms if c.phase == "sync" and c.group > 1}
        sync += [Barrier(name, "sync", ALLREDUCE, 0) for _ in groups]
    return tuple(fwd + bwd + sync)
