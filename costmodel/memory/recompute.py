"""What activation recomputation holds, beyond the per-layer view (pure).

A recomputed layer (``compute.RECOMPUTE``) runs its forward again in backward (costmodel.compute.roofline). A
repeated block recomputed whole (every layer of it but the convolutions and the loss, which full
recomputation leaves alone: :func:`costmodel.calls.algorithms.recompute_algorithms`; in a network
without blocks, the layers outside every block taken as one) is checkpointed at its input, as
Megatron-LM's full recomputation keeps each transformer layer's input and nothing inside it
(Korthikanti et al. 2022, section 5): an output of it that only recomputed layers of the same block
read is regenerated, not kept from forward to backward. While such a block's backward runs, what its
recomputation regenerated (those outputs and the internals of its recomputed layers) is held at
once: a transient of the block, added to the step's peak. Recomputed layers of a block not
recomputed whole (the planner's per-layer choice: attention's core, a dropout) are each checkpointed
at their own input and keep their output.
"""

from __future__ import annotations

from costmodel.calls.algorithms import is_recomputed, kernel_algorithm
from costmodel.layer.cost import own_kept_bytes
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import Strategy
from networks.analysis import block_of
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import prod


#: Layers full recomputation leaves alone inside a block (costmodel.calls.algorithms.recompute_algorithms)
NOT_RECOMPUTED_OPS = ("conv2d", "softmax_cross_entropy")


def checkpointed_blocks(net: Network, algorithms: dict[str, str]) -> set[str | None]:
    """The blocks (:func:`networks.analysis.block_of`; None: the layers outside every block)
    recomputed whole, so checkpointed at their input: every layer of the block but
    :data:`NOT_RECOMPUTED_OPS` recomputed, at least one of them."""
    whole: dict[str | None, bool] = {}
    for layer in net.layers:
        if layer.op in NOT_RECOMPUTED_OPS:
            continue
        block = block_of(layer)
        whole[block] = whole.get(block, True) and is_recomputed(algorithms.get(layer.name, ""))
    return {block for block, all_recomputed in whole.items() if all_recomputed}


def regenerated(net: Network, algorithms: dict[str, str]) -> set[str]:
    """Layers whose output the recomputation regenerates rather than keeps: recomputed in a block
    recomputed whole (:func:`checkpointed_blocks`), read by at least one layer, and every reader
    recomputed in the same block."""
    block = {layer.name: block_of(layer) for layer in net.layers}
    whole = checkpointed_blocks(net, algorithms)
    again = {layer.name for layer in net.layers
             if is_recomputed(algorithms.get(layer.name, "")) and block[layer.name] in whole}
    readers: dict[str, list[str]] = {layer.name: [] for layer in net.layers}
    for layer in net.layers:
        for src in layer.inputs:
            if src in readers:
                readers[src].append(layer.name)
    return {name for name in again if readers[name]
            and all(r in again and block[r] == block[name] for r in readers[name])}


def block_transient_bytes(net: Network, batch: int, strategies: dict[str, Strategy],
                          algorithms: dict[str, str], dropped: set[str]) -> int:
    """The most any one checkpointed block's recomputation holds at once per device (:func:`checkpointed_blocks`):
    the outputs it regenerates (``dropped``) and the internals its recomputed layers keep for their
    backward."""
    per_block: dict[str | None, int] = {}
    whole = checkpointed_blocks(net, algorithms)
    for layer in net.layers:
        if not is_recomputed(algorithms.get(layer.name, "")) or block_of(layer) not in whole:
            continue
        local = local_layer(layer, strategies[layer.name], batch)
        held = own_kept_bytes(local, kernel_algorithm(algorithms[layer.name]))
        if layer.name in dropped:
            held += local.batch * prod(local.out_shape) * DTYPE_BYTES.get(layer.dtype, 4)
        per_block[block_of(layer)] = per_block.get(block_of(layer), 0) + held
    return max(per_block.values(), default=0)
