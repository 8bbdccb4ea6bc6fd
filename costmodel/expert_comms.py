"""The collectives of expert parallelism (pure): a mixture-of-experts layer's tokens dispatched to
the ranks holding their experts and combined back (docs/costmodel.md, "Mixture of experts").

Lepikhin et al., "GShard" (ICLR 2021), section 3.2, and Megatron-Core's ``alltoall`` token
dispatcher (``MoEAlltoAllTokenDispatcher``): with the experts split over a group of ``e`` ranks
(the ``E`` degree), each rank routes its own tokens and sends every (token, chosen expert) row to
the rank holding that expert, one all-to-all; the experts' outputs come back by a second, and the
backward pass runs both again on the gradients (the combine's first). Each rank sends its whole
dispatch buffer as executor.ops.moe does: ``capacity`` rows of every local sequence for every
expert, padded with zeros where fewer came (``experts x N_local x capacity`` rows of ``D``
elements, ``capacity = ceil(capacity_factor x S x top_k / experts)``, costmodel.moe_calls; the
load assumption of networks/ops/moe.py made exact as the buffer is), ``1/e`` of it to every rank
of the group, its own share included: the all-to-all's ``nbytes``,
``costmodel.collectives.alltoall_s`` (pairwise: ``(e-1)(a + n/e b)``; a group spanning nodes in
two levels, costmodel.collective_groups). The experts' weight gradients are summed over the ranks
holding the same experts, the samples' and sequence's (expert data parallelism: ``partial_weight_grad``
of the N and H splits, costmodel.weight_sync).
"""

from __future__ import annotations

from costmodel.layer_layouts import LocalLayer
from costmodel.moe_calls import capacity
from costmodel.strategy import Strategy
from networks.ir import Layer


def expert_collectives(layer: Layer, strategy: Strategy, local: LocalLayer, itemsize: int) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of an expert split's dispatch and combine: two
    all-to-alls forward, two backward, each of the rows this rank routes (module docstring)."""
    if layer.op != "moe" or strategy.degree("E") == 1:
        return []
    s, d = local.in_shapes[0]
    p = local.p
    experts = p.get("experts_total", p["experts"])
    rows = experts * local.batch * capacity(p["capacity_factor"], s, p["top_k"], experts)
    nbytes = rows * d * itemsize
    return [("dispatch", "fwd", "alltoall", nbytes, ("E",)), ("combine", "fwd", "alltoall", nbytes, ("E",)),
            ("combine_grad", "bwd", "alltoall", nbytes, ("E",)), ("dispatch_grad", "bwd", "alltoall", nbytes, ("E",))]
