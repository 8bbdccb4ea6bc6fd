"""The collectives of expert parallelism (pure): a mixture-of-experts layer's tokens dispatched to
the ranks holding their experts and combined back (docs/costmodel.md, "Mixture of experts"), by
the layer's token dispatcher (networks.ops.moe.dispatcher; costmodel.choices.moe_dispatch).

``alltoall``: Lepikhin et al., "GShard" (ICLR 2021), section 3.2, and Megatron-Core's ``alltoall``
token dispatcher (``MoEAlltoAllTokenDispatcher``): with the experts split over a group of ``e``
ranks (the ``E`` degree), each rank routes its own tokens and sends every (token, chosen expert)
row to the rank holding that expert, one all-to-all; the experts' outputs come back by a second,
and the backward pass runs both again on the gradients (the combine's first). Each rank sends its
whole dispatch buffer as executor.ops.moe does: ``capacity`` rows of every local sequence for
every expert, padded with zeros where fewer came (``experts x N_local x capacity`` rows of ``D``
elements, ``capacity = ceil(capacity_factor x S x top_k / experts)``, costmodel.calls.moe; the
load assumption of networks/ops/moe.py made exact as the buffer is), ``1/e`` of it to every rank
of the group, its own share included: the all-to-all's ``nbytes``,
``costmodel.comm.collectives.alltoall_s`` (pairwise: ``(e-1)(a + n/e b)``; a group spanning nodes in
two levels, costmodel.comm.groups).

``flex``: Megatron-Core's flex dispatcher on DeepEP's normal kernels or HybridEP (DeepEP's
README; HybridEP's implementation guide, "RDMA communication pattern": "Hybrid-EP first performs IB
communication between peer GPUs, then each rank distributes the received inter-node data locally",
the two overlapped). A token is sent once to each rank holding any of its ``k`` experts, not once
per expert, and across nodes once to each node holding any, to the rank of the same local index,
which forwards it over NVLink; the combine runs the same paths back, summing within a node before
it crosses the network. With the group's ``X`` experts ``X / G`` to each of its ``G = q N`` ranks
(``q`` a node, ``N`` nodes) and each token's ``k`` experts ``k`` distinct ones drawn evenly (the
load assumption; Megatron-Core's ``moe_router_force_load_balancing``, which NVIDIA's benchmarks
set), a token misses a set of ``m`` experts with probability
``miss(m) = C(X - m, k) / C(X, k)``. Per rank of ``T`` tokens of ``D`` elements:

- across nodes (RDMA, to the ``N - 1`` peers): ``T (N - 1) (1 - miss(X / N)) D`` elements;
- within the node (NVLink, to the ``q - 1`` others): the rank forwards its own tokens and those its
  ``N - 1`` peers sent it, each to the other ranks of the node holding any of its experts:
  ``N T (q - 1) (1 - miss(X / G)) D`` elements (summed over every token, those that miss the
  node adding none);

each times ``capacity_factor`` (the busiest rank receives that times its even share), and the
dispatch takes the longer of the two stages, ``max((N - 1) a_inter + bytes b_inter,
(q - 1) a_intra + bytes b_intra)``: the stages are pipelined in chunks (the first chunk's fill is
not counted). Four per layer, as above.

The experts' weight gradients are summed over the ranks holding the same experts, the samples' and
sequence's (expert data parallelism: ``partial_weight_grad`` of the N and H splits,
costmodel.comm.weight_sync).
"""

from __future__ import annotations

from costmodel.parallel.axes import E
from costmodel.parallel.shard import LocalLayer
from costmodel.comm.spans import slowest_span
from costmodel.machine.model import Machine
from costmodel.calls.moe import capacity
from costmodel.parallel.strategy import Strategy
from networks.ir import Layer
from networks.ops.moe import dispatcher

#: The four exchanges of an expert split: forward dispatch and combine, backward their gradients
PASSES = (("dispatch", "fwd"), ("combine", "fwd"), ("combine_grad", "bwd"), ("dispatch_grad", "bwd"))


def expert_collectives(layer: Layer, strategy: Strategy, local: LocalLayer, itemsize: int) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of an expert split's all-to-all dispatch and combine:
    two all-to-alls forward, two backward, each of the rows this rank routes (module docstring);
    none under the flex dispatcher (:func:`flex_exchanges`)."""
    if layer.op != "moe" or strategy.degree(E) == 1 or dispatcher(layer.p) != "alltoall":
        return []
    s, d = local.in_shapes[0]
    p = local.p
    experts = p.get("experts_total", p["experts"])
    rows = experts * local.batch * capacity(p["capacity_factor"], s, p["top_k"], experts)
    nbytes = rows * d * itemsize
    return [(purpose, phase, "alltoall", nbytes, (E,)) for purpose, phase in PASSES]


def miss(experts: int, held: int, top_k: int) -> float:
    """The chance that a token's ``top_k`` distinct experts, drawn evenly from ``experts``, avoid
    ``held`` of them: ``C(experts - held, top_k) / C(experts, top_k)``."""
    out = 1.0
    for i in range(top_k):
        out *= max(0, experts - held - i) / (experts - i)
    return out


def flex_bytes(local: LocalLayer, itemsize: int, per_node: int, nodes: int) -> tuple[float, float]:
    """(bytes a rank sends across nodes, bytes it writes to the other ranks of its node) in one
    flex dispatch or combine of a group of ``per_node`` ranks on each of ``nodes`` nodes (module
    docstring)."""
    s, d = local.in_shapes[0]
    p = local.p
    experts, k = p.get("experts_total", p["experts"]), p["top_k"]
    ranks = per_node * nodes
    token = local.batch * s * d * itemsize * p["capacity_factor"]
    inter = token * (nodes - 1) * (1 - miss(experts, experts // nodes, k))
    intra = token * nodes * (per_node - 1) * (1 - miss(experts, experts // ranks, k))
    return inter, intra


def flex_seconds(inter_bytes: float, intra_bytes: float, per_node: int, nodes: int, machine: Machine) -> float:
    """One flex dispatch or combine: the longer of its pipelined stages (module docstring)."""
    cross = (nodes - 1) * machine.inter.alpha_s + inter_bytes * machine.inter.beta_s_per_byte if nodes > 1 else 0.0
    local = ((per_node - 1) * machine.intra.alpha_s + intra_bytes * machine.intra.beta_s_per_byte
             if per_node > 1 else 0.0)
    return max(cross, local)


def flex_exchanges(layer: Layer, strategy: Strategy, local: LocalLayer, itemsize: int,
                   machine: Machine) -> list[tuple]:
    """(purpose, phase, collective, bytes, group, seconds) of an expert split's four exchanges under
    the flex dispatcher (bytes: what a rank sends across nodes and within its node); none under
    the all-to-all (:func:`expert_collectives`)."""
    if layer.op != "moe" or strategy.degree(E) == 1 or dispatcher(layer.p) != "flex":
        return []
    per_node, nodes = slowest_span(strategy, (E,), machine)
    inter, intra = flex_bytes(local, itemsize, per_node, nodes)
    secs = flex_seconds(inter, intra, per_node, nodes, machine)
    return [(purpose, phase, "flex", int(inter + intra), per_node * nodes, secs) for purpose, phase in PASSES]
