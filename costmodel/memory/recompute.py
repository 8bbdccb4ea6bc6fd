"""What activation recomputation holds, beyond the per-layer view (pure).

A recomputed layer (``compute.RECOMPUTE``) runs its forward again in backward (costmodel.compute.roofline). When every
layer reading its output is recomputed too, inside the same repeated block (or, outside blocks,
between the same layers that are not recomputed), the recomputation regenerates that output
anyway, so it is not kept from forward to backward: Megatron-LM's full recomputation keeps each
transformer layer's input and nothing inside it (Korthikanti et al. 2022, section 5). While one
block's backward runs, what its recomputation regenerated (those outputs and the internals of its
recomputed layers) is held at once: a transient of the block, added to the step's peak.
"""

from __future__ import annotations

from costmodel.calls.algorithms import is_recomputed, kernel_algorithm
from costmodel.layer.cost import own_kept_bytes
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import Strategy
from networks.analysis import block_of
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import prod


def regenerated(net: Network, algorithms: dict[str, str]) -> set[str]:
    """Layers whose output the recomputation regenerates rather than keeps: recomputed, read by
    at least one layer, and every reader recomputed in the same block."""
    again = {layer.name for layer in net.layers if is_recomputed(algorithms.get(layer.name, ""))}
    block = {layer.name: block_of(layer) for layer in net.layers}
    readers: dict[str, list[str]] = {layer.name: [] for layer in net.layers}
    for layer in net.layers:
        for src in layer.inputs:
            if src in readers:
                readers[src].append(layer.name)
    return {name for name in again if readers[name]
            and all(r in again and block[r] == block[name] for r in readers[name])}


def block_transient_bytes(net: Network, batch: int, strategies: dict[str, Strategy],
                          algorithms: dict[str, str], dropped: set[str]) -> int:
    """The most any one block's recomputation holds at once per device: the outputs it regenerates
    (``dropped``) and the internals its recomputed layers keep for their backward."""
    per_block: dict[str | None, int] = {}
    for layer in net.layers:
        if not is_recomputed(algorithms.get(layer.name, "")):
            continue
        local = local_layer(layer, strategies[layer.name], batch)
        held = own_kept_bytes(local, kernel_algorithm(algorithms[layer.name]))
        if layer.name in dropped:
            held += local.batch * prod(local.out_shape) * DTYPE_BYTES.get(layer.dtype, 4)
        per_block[block_of(layer)] = per_block.get(block_of(layer), 0) + held
    return max(per_block.values(), default=0)
