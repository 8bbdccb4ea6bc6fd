"""DeepSpeed's ZeRO-3 step, as published runs of it behave (pure; docs/costmodel.md, "DeepSpeed ZeRO-3").

dnnplan's own ZeRO-3 (costmodel.choices.optimizer) is what its executor runs: each layer's weights
gathered before its forward and again before its backward, the gradients reduce-scattered after,
every collective priced by the two-level (node, then network) algorithms and nothing overlapped.
The ZeRO-3 rows of Narayanan et al. SC21, Table 2 were run by DeepSpeed and behave otherwise: the
step time of GPT-3 175B is the same on 768 and on 1536 GPUs (66.7 s), of 530B the same on 1120
and 2240 (180 s, 184 s). A step whose time does not shrink with the ranks is bound by a volume per
GPU that does not either: every GPU's own network port carrying the whole model's parameters in
each pass, which is how a flat ring over all the ranks runs (each ring step bound by its slowest
hop, the inter-node link). The two-level algorithms would move an eighth of that through each
port; this model is slower than them, never faster (nothing below physics). Per micro-batch:

- every weight tensor of at least :data:`PERSISTENCE_THRESHOLD` elements is sharded over all ``N``
  ranks and gathered with its own ring allgather, ``(N - 1)(alpha + n / N beta)`` on the inter-node
  link (collectives.allgather_s); smaller ones stay whole on every rank (DeepSpeed's
  ``stage3_param_persistence_threshold``, default 1e5 elements; their gradients' sum, norms and
  biases, under a thousandth of the bytes, is left out);
- gathers run before the forward, before the recomputed forward (activation recomputation), and
  before the backward; each gradient is reduce-scattered once (ring) after its backward;
- the gathers are prefetched, so a pass takes ``max(compute, gathers)`` (DeepSpeed prefetches the
  parameters of the modules ahead: ``stage3_prefetch_bucket_size``); the reduce-scatters are
  taken as not overlapped.

So, with ``Cf``/``Cb`` the forward and backward compute (recomputation included), ``G`` one pass of
gathers, ``R`` the reduce-scatters, ``r`` 1 under recomputation, and ``m`` micro-batches::

    step = m (max(Cf, G) + max(Cb, (1 + r) G) + R) + update

The structure (which collectives overlap) was chosen with all six published rows in view; no number
in it was fitted on them (alpha and beta are the machine file's, the compute the shipped roofline's).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.comm.collectives import allgather_s, reduce_scatter_s
from costmodel.machine.model import Machine
from costmodel.step.prediction import StepPrediction
from costmodel.layer.tied import ties, with_table
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import prod

#: DeepSpeed's stage3_param_persistence_threshold default: smaller weights are never partitioned
PERSISTENCE_THRESHOLD = 100_000


@dataclass(frozen=True)
class Zero3Step:
    """One DeepSpeed ZeRO-3 step's terms (seconds; per micro-batch unless said)."""

    fwd_compute_s: float
    bwd_compute_s: float  # the recomputed forward included
    gather_s: float  # one pass of parameter gathers
    reduce_scatter_s: float
    gathers_in_backward: int  # 2 under recomputation, else 1
    micro_batches: int
    update_s: float  # once a step: the optimiser on the local shards
    memory_peak_bytes: int

    @property
    def per_micro_s(self) -> float:
        return (max(self.fwd_compute_s, self.gather_s)
                + max(self.bwd_compute_s, self.gathers_in_backward * self.gather_s) + self.reduce_scatter_s)

    @property
    def step_s(self) -> float:
        return self.micro_batches * self.per_micro_s + self.update_s

    @property
    def bubble_fraction(self) -> float:
        """No pipeline, no bubble (the pipelined predictions' field, for tables of both)."""
        return 0.0

    @property
    def exposed_comm_s(self) -> float:
        """The step's time beyond its compute and update: the gathers that compute did not hide
        and the reduce-scatters."""
        return self.step_s - self.micro_batches * (self.fwd_compute_s + self.bwd_compute_s) - self.update_s

    @property
    def comm_exposed_s(self) -> float:
        """:attr:`exposed_comm_s`, by the name every step's prediction gives it."""
        return self.exposed_comm_s

    @property
    def comm_overlapped_s(self) -> float:
        """The collectives' time compute hides: every gather and reduce-scatter of the step less
        what is exposed."""
        link = self.micro_batches * ((1 + self.gathers_in_backward) * self.gather_s + self.reduce_scatter_s)
        return max(0.0, link - self.exposed_comm_s)

    def terms(self) -> tuple[tuple[str, float], ...]:
        """The step in the terms every breakdown names (costmodel.step.breakdown): each pass with the
        gathers it waits for, the reduce-scatters as the gradient sync (every micro-batch's), the
        update; they sum to :attr:`step_s`."""
        m = self.micro_batches
        return (("forward", m * max(self.fwd_compute_s, self.gather_s)),
                ("backward", m * max(self.bwd_compute_s, self.gathers_in_backward * self.gather_s)),
                ("gradient sync", m * self.reduce_scatter_s), ("update", self.update_s))


def sharded_tensors(net: Network) -> list[int]:
    """Bytes of each weight tensor DeepSpeed shards (at least :data:`PERSISTENCE_THRESHOLD`
    elements); a tied head borrows its embedding's table, gathered again for the head."""
    heads = {head for _, head in ties(net)}
    out = []
    for layer in net.layers:
        weights = with_table(layer).weights if layer.name in heads else layer.weights
        itemsize = DTYPE_BYTES.get(layer.dtype, 4)
        out += [prod(s) * itemsize for _, s in weights if prod(s) >= PERSISTENCE_THRESHOLD]
    return out


def zero3_step(net: Network, ranks: int, micro_batches: int, compute_step: StepPrediction, machine: Machine,
               recompute: bool) -> Zero3Step:
    """DeepSpeed's ZeRO-3 step of ``net`` on ``ranks`` data-parallel ranks. ``compute_step``: the
    step of one micro-batch (all ranks' samples) predicted with every layer split over the samples
    and ZeRO stage 3 (its compute, update and memory are used; its collectives are replaced by
    DeepSpeed's, module docstring)."""
    link = machine.link_for(range(ranks))
    tensors = sharded_tensors(net)
    gather = sum(allgather_s(n, ranks, link, "ring") for n in tensors)
    scatter = sum(reduce_scatter_s(n, ranks, link, "ring") for n in tensors)
    layers = compute_step.layers
    return Zero3Step(sum(x.layer.fwd_compute_s for x in layers), sum(x.layer.bwd_compute_s for x in layers),
                     gather, scatter, 2 if recompute else 1, micro_batches, compute_step.update_s,
                     compute_step.memory_peak_bytes)
