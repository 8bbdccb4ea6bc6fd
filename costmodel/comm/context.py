"""Context parallelism (pure): attention over a sequence split across a group (the ``H`` degree of
an attention layer), its keys and values exchanged over that group (docs/costmodel.md, "Context
parallelism").

Each of the ``c`` ranks holds the queries, keys and values of ``S / c`` positions (causal: the two
chunks ``i`` and ``2c - 1 - i`` of ``S / 2c``, Megatron-Core's load balance, costmodel.calls.flash), and
every query needs every key. Two ways to exchange them, both priced; the cheaper (exposed) one is
taken, and the collective names it:

* ``allgather`` (Llama 3, Dubey et al. 2024, section 3.3.2: "we first all-gather the K and V
  tensors, and then compute attention output for the local query chunk"): forward an all-gather
  of the local keys and values (``n = c kv`` bytes gathered), backward a reduce-scatter of their
  gradients (``n`` per rank in); in the critical path.
* ``ring`` (ring attention, Liu et al. 2023; Megatron-Core / Transformer Engine's
  ``AttnFuncWithCPAndKVP2P``, ``cp_comm_type="p2p"``): ``c`` steps, each computing the local queries
  against one chunk of keys while the next chunk moves one hop along the ring. Forward ``c - 1``
  sends of ``kv``; backward ``c`` steps sending ``kv``, then ``kv`` and its gradient (``2 kv``) for
  ``c - 2`` steps, then the gradient alone: ``2 (c - 1) kv`` in all. Each send overlaps one step's
  attention (a ``1 / c`` share of the core's time; the load balance makes the steps alike), so
  only what exceeds it is exposed: ``sum over sends of max(0, send - step)``. A send crosses the
  slowest link the group spans (one hop of a ring that leaves a node crosses the network).

``kv`` is the local keys and values: ``batch x S/c x 2 kv_heads x head_dim`` elements (grouped-query
attention exchanges only its key/value heads). The weight gradients are summed over the sequence
group with the samples' (the ``H`` split lists every weight in ``partial_weight_grad``).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.parallel.axes import H
from costmodel.comm.groups import collective_s
from costmodel.comm.collectives import sendrecv_s
from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import LocalLayer
from costmodel.comm.spans import slowest_span
from costmodel.machine.model import Machine
from costmodel.parallel.strategy import Strategy
from networks.ops.attention import head_shape

#: How the keys and values of a split sequence are exchanged (module docstring)
EXCHANGES = ("ring", "allgather")


def kv_bytes(local: LocalLayer, itemsize: int) -> int:
    """The local keys and values of an attention shard, in bytes."""
    s_l, d = local.in_shapes[0]
    _, kv, dh = head_shape(local.p, d)
    return local.batch * s_l * 2 * kv * dh * itemsize


def core_share(local: LocalLayer, pass_: str, kernel: str, sram_bytes: int) -> float:
    """The attention core's share of a pass's FLOPs (its kernel against the projections'): what a
    ring step overlaps is the core's time, not the projections' before and after the ring."""
    calls = kernel_calls(local, pass_, kernel, sram_bytes)
    total = sum(c.flops for c in calls)
    return sum(c.flops for c in calls if c.kernel.startswith("attention.")) / total if total else 0.0


def _ring_sends(c: int, kv: float) -> tuple[list[float], list[float]]:
    """Bytes of each ring send, forward and backward (module docstring)."""
    return [kv] * (c - 1), [kv] + [2 * kv] * (c - 2) + [kv]


@dataclass(frozen=True)
class Exchange:
    """A split sequence's key/value exchange, priced before what hides it: the all-gather's
    comms, each ring phase's send seconds, and the exchange the layer, the machine (a CPU's executor)
    or the framework fixes (None: the cheaper when exposed). :meth:`comms` adds the core's time; the
    algorithms of one shard share the rest (their core differs)."""

    gathered: tuple[tuple, ...]  # (purpose, phase, collective, bytes, group, exposed, link seconds)
    ring: tuple[tuple[str, int, tuple[float, ...]], ...]  # (phase, bytes sent, each send's seconds)
    group: int
    chosen: str | None

    def comms(self, core_s: tuple[float, float]) -> list[tuple]:
        """:func:`context_comms` with the core's forward and backward seconds ``core_s``."""
        ring = []
        for (phase, sent, times), core in zip(self.ring, core_s):
            step = core / self.group
            exposed = 0.0 if max(times, default=0.0) <= step else sum(max(0.0, t - step) for t in times)
            ring.append(("kv", phase, "ring", sent, self.group, exposed, sum(times)))
        gathered = list(self.gathered)
        if self.chosen:  # the framework's, where the network names it; dnnplan's executor's on the CPU
            return ring if self.chosen == "ring" else gathered
        return min((ring, gathered), key=lambda comms: (sum(x[5] for x in comms), comms is gathered))


def context_exchange(layer, strategy: Strategy, local: LocalLayer, itemsize: int, machine: Machine,
                     rule: str = "mpi", span: tuple[int, int] | None = None,
                     framework: str | None = None) -> Exchange | None:
    """The :class:`Exchange` of an attention layer whose sequence the strategy splits (None
    otherwise); ``span``: the slowest sequence group's ``machine.group_span`` (costmodel.comm.spans),
    where the caller knows it; ``framework``: the exchange the framework runs where the layer names
    none (costmodel.frameworks.framework's ``context_parallel``; None: the cheaper)."""
    c = strategy.degree(H)
    if layer.op != "attention" or c == 1:
        return None
    kv = kv_bytes(local, itemsize)
    per_node, nodes = slowest_span(strategy, (H,), machine) if span is None else span
    gather = [("kv", "fwd", "allgather", c * kv, c), ("kv", "bwd", "reduce_scatter", c * kv, c)]
    gathered = tuple((*g, t, t) for g in gather
                     for t in [collective_s(g[2], g[3], per_node, nodes, machine, rule=rule, cold=True)])
    link = machine.link_spanning(nodes)
    ring = []
    timed: dict[float, float] = {}  # the ring's sends take two sizes: each priced once
    for phase, sends in zip(("fwd", "bwd"), _ring_sends(c, kv)):
        times = tuple(timed[n] if n in timed else timed.setdefault(n, sendrecv_s(n, link)) for n in sends)
        ring.append((phase, int(sum(sends)), times))
    chosen = layer.p.get("context_exchange") or ("allgather" if machine.device.kind == "cpu" else framework)
    return Exchange(gathered, tuple(ring), c, chosen)


def context_comms(layer, strategy: Strategy, local: LocalLayer, itemsize: int, machine: Machine,
                  core_s: tuple[float, float], rule: str = "mpi") -> list[tuple]:
    """(purpose, phase, collective, bytes, group, exposed seconds, link seconds) of the key/value
    exchange of an attention layer whose sequence the strategy splits (none otherwise): the one its
    ``context_exchange`` parameter names, else on a CPU machine (whose executor is dnnplan's, which
    all-gathers: executor.ops.attention_context) the all-gather, else the cheaper of :data:`EXCHANGES`
    by exposed time; ``core_s``: the core's forward and backward seconds."""
    exchange = context_exchange(layer, strategy, local, itemsize, machine, rule)
    return [] if exchange is None else exchange.comms(core_s)
