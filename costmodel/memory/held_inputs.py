"""Which copy of a layer's input the executor holds from forward to backward (pure).

The per-layer memory count (``layer_cost.Memory.activations``, what the planner sums under its
limit) keeps a saved output once, at its producer's layout, and a layer split over a windowed
dimension keeps its received block (halos included) besides. The executor keeps, in each layer's
cache, the input its backward needs: the producer's array itself when the edge moves nothing
(``layout.same_blocks``: ``executor.comm.reshard.reshard`` hands back the same array), else the block the
reshard wrote (max pooling keeps neither: :data:`KEEPS_NO_INPUT`). It lets a producer's output go
after its last reader in forward unless the producer's own backward needs it (``saves ==
"output"``) or a reader holds it unmoved.

So, on the step's memory timeline (``step.StepPrediction``), per layer:

* minus its saved output when every reader that needs it received it through a reshard and its
  own backward does not need it (the output is gone before backward);
* plus, for each input it needs and received through a reshard, that block, unless the per-layer
  count holds it already (a windowed split); minus, under a windowed split, the block the count
  holds for an input that arrived unmoved (a pool whose windows do not cross the split rows).

The planner's per-layer count stays as it is (its bound is checked against the solver's); this
moves only the predicted peak to what the executor holds.
"""

from __future__ import annotations

from functools import lru_cache

from costmodel.layer.cost import activation_bytes
from costmodel.parallel.shard import input_layout, local_layer, output_layout, received_block_bytes, windowed
from costmodel.parallel.layout import Layout, max_block_extents, reduce_pair, same_blocks
from costmodel.parallel.strategy import Strategy
from networks.ir import DTYPE_BYTES, Network
from networks.ops.catalogue import OPS
from networks.ops.base import prod


@lru_cache(maxsize=65536)
def _unmoved(src: Layout, dst: Layout) -> bool:
    """Whether every rank holds exactly its block under both (``layout.same_blocks``), over the
    fewer ranks of ``layout.reduce_pair`` (a per-rank property, unchanged by its shift)."""
    return src == dst or same_blocks(*reduce_pair(src, dst))


#: Ops whose executor kernel keeps none of its input for backward, though the cost model counts it
#: as PyTorch does: max pooling keeps only the position of each maximum (kernels.pool).
KEEPS_NO_INPUT = frozenset({"maxpool2d"})


def held_deltas(net: Network, batch: int, strategies: dict[str, Strategy], saved: dict[str, bool],
                algorithms: dict[str, str]) -> dict[str, int]:
    """Layer name -> bytes the executor holds beyond (or, negative, short of) the layer's
    per-layer activation count, from its forward to its backward (module docstring)."""
    by_name = {layer.name: layer for layer in net.layers}
    deltas = dict.fromkeys(by_name, 0)
    moved_all = {name: saved[name] and OPS[layer.op].saves != "output" for name, layer in by_name.items()}
    edges: dict[tuple, tuple[bool, int]] = {}  # (reader, strategy, slot, producer, its strategy) -> (unmoved, bytes)
    for reader in net.layers:
        if OPS[reader.op].saves != "inputs":
            continue
        strat = strategies[reader.name]
        local = local_layer(reader, strat, batch) if windowed(reader, strat) else None  # halo blocks counted
        keeps = reader.op not in KEEPS_NO_INPUT
        for slot, src in enumerate(reader.inputs):
            if src not in by_name:
                continue
            producer = by_name[src]
            # an edge's layouts are those of its layers' costs, not their names: a transformer's
            # blocks repeat each edge (llama3.1-405b: 1,012 layers), its layouts made once
            key = (reader.unnamed(), strat, slot, producer.unnamed(), strategies[src])
            if key not in edges:
                need = input_layout(reader, strat, batch, slot)
                edges[key] = (_unmoved(output_layout(producer, strategies[src], batch), need),
                              prod(max_block_extents(need)) * DTYPE_BYTES.get(producer.dtype, 4))
            unmoved, received = edges[key]
            if keeps and unmoved:
                moved_all[src] = False  # the reader holds the producer's own array
            if local is not None and (unmoved or not keeps):  # the block the per-layer count holds is none
                deltas[reader.name] -= received_block_bytes(local, slot)
            elif keeps and not unmoved and local is None:  # a received block the per-layer count does not hold
                deltas[reader.name] += received
    for name, gone in moved_all.items():
        if gone:
            layer, strat = by_name[name], strategies[name]
            local, algo = local_layer(layer, strat, batch), algorithms.get(name, "")
            deltas[name] -= (activation_bytes(local, strat, True, algo, batch)
                             - activation_bytes(local, strat, False, algo, batch))
    return deltas
