"""The collectives one layer runs under a strategy, priced (pure): :class:`Comm`.

A split contraction's reductions (costmodel.comm.tensor), op-specific ones (batch-norm statistics,
a vocabulary-parallel loss's numbers; an expert split's dispatch and combine, costmodel.comm.expert;
attention's keys and values over a split sequence, costmodel.comm.context), and the weights'
gradient sums or ZeRO's reduce-scatters and gathers (costmodel.comm.weight_sync), each over the
ranks of its group (:func:`group_time`). costmodel.layer.cost adds them to the layer's passes,
update and memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.choices.optimizer import Optimizer
from costmodel.comm.context import context_exchange, core_share
from costmodel.comm.expert import expert_collectives, flex_exchanges
from costmodel.comm.groups import collective_s
from costmodel.comm.spans import slowest_span
from costmodel.comm.tensor import tensor_collectives
from costmodel.comm.weight_sync import replica_sums, weight_collectives
from costmodel.layer.replaced import replaced
from costmodel.machine.model import Machine
from costmodel.parallel.axes import H
from costmodel.parallel.shard import LocalLayer, dim_splits
from costmodel.parallel.strategy import Strategy
from networks.ir import DTYPE_BYTES, Layer
from networks.ops.base import prod


@dataclass(frozen=True)
class Comm:
    """One collective a layer runs: what it is for, the phase, bytes per rank and group size, and
    its time: ``seconds`` is what the step waits for (its exposed time), ``link_s`` the time its
    messages hold the link where that differs (a context-parallel ring hidden under attention's
    steps, costmodel.comm.context); None: the same."""

    purpose: str  # "partial_sum", "input_grad", "output_grad", "input_gather", "stats", "kv", "grad_sync", "param_gather"
    phase: str  # "fwd", "bwd", "sync"
    collective: str
    nbytes: int
    group: int
    seconds: float
    link_s: float | None = None

    @property
    def link_time(self) -> float:
        """The time its messages hold the link (``seconds`` unless part of it is hidden)."""
        return self.seconds if self.link_s is None else self.link_s

    def timed(self, seconds: float, link_s: float | None) -> "Comm":
        """This collective with other times (the planner asks it for every candidate's every
        collective, costmodel.comm.overlap: :func:`replaced`)."""
        return replaced(self, seconds=seconds, link_s=link_s)

    def in_phase(self, phase: str) -> "Comm":
        """This collective run in another phase (a recomputed forward's, in backward: :func:`replaced`)."""
        return replaced(self, phase=phase)


def group_time(collective: str, nbytes: float, strategy: Strategy, dims, machine: Machine,
               rule: str = "mpi", cold: bool = False, within: int = 0, memo: dict | None = None) -> float:
    """Time of a collective over the ranks that differ only along ``dims`` (the slowest such group,
    costmodel.comm.spans; with ``within``, its first ``within`` ranks: neighbours along one dimension
    holding the same replica, costmodel.comm.weight_sync.replica_sums); ``cold``: right after a layer's kernels
    (``Machine.fitted_cold``). Inside one node, a time measured in the run for exactly this
    collective (``Machine.measured``) comes first. ``memo``: what a caller pricing many layers keeps,
    one machine and compute model a memo (``planner.problem.priced_layers``); here the times, by
    collective, bytes, span, rule and ``cold``: the time is a function of them alone."""
    dims = tuple(dims)
    if not dims or nbytes <= 0 or (within or strategy.group_size(dims)) == 1:
        return 0.0
    per_node, nodes = _group_span(strategy, dims, machine, within)
    key = (collective, nbytes, per_node, nodes, rule, cold)
    if memo is not None and key in memo:
        return memo[key]
    got = machine.measured_s(collective, int(nbytes), per_node, cold) if nodes == 1 else None
    if got is None:
        got = collective_s(collective, nbytes, per_node, nodes, machine, rule=rule, cold=cold)
    if memo is not None:
        memo[key] = got
    return got


def _group_span(strategy: Strategy, dims: tuple[str, ...], machine: Machine, within: int = 0) -> tuple[int, int]:
    """``machine.group_span`` of the slowest group along ``dims`` (of the groups of its first
    ``within`` ranks when given): costmodel.comm.spans."""
    return slowest_span(strategy, dims, machine, within)


def layer_comms(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, opt: Optimizer,
                rule: str, kernel: str, passes: tuple[float, float], memo: dict | None = None) -> list[Comm]:
    """A layer's collectives under a strategy (docs/costmodel.md, "Per layer"): a split contraction's
    reductions (costmodel.comm.tensor), op-specific ones (statistics; an expert split's dispatch and
    combine, costmodel.comm.expert; attention's keys and values over a split sequence,
    costmodel.comm.context, whose ring hides under the core: ``passes``, the forward and
    backward-data seconds), the weights' gradient sums (costmodel.comm.weight_sync). ``memo``:
    :func:`group_time`'s."""
    head, tail = shard_comms(layer, strategy, local, machine, rule, kernel, passes, memo)
    return head + weight_comms(layer, strategy, local, machine, opt, rule, memo) + tail


def _comms(strategy: Strategy, machine: Machine, rule: str, memo: dict | None, calls) -> list[Comm]:
    """Each (purpose, phase, collective, bytes, dims[, within]) of ``calls`` with bytes to move over
    a group of more than its own rank, priced (:func:`group_time`)."""
    out = []
    for purpose, phase, collective, nbytes, dims, *within in calls:
        dims, within = tuple(dims), within[0] if within else 0
        if not dims or nbytes <= 0:
            continue
        # partial sums, input gradients and statistics follow the layer's kernels (cold caches);
        # the executor makes the weight-gradient allreduces back to back (runtime.step)
        secs = group_time(collective, nbytes, strategy, dims, machine, rule, cold=phase != "sync", within=within,
                          memo=memo)
        out.append(Comm(purpose, phase, collective, int(nbytes), within or strategy.group_size(dims), secs))
    return out


def shard_comms(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, rule: str, kernel: str,
                 passes: tuple[float, float], memo: dict | None,
                 exchange: str | None = None) -> tuple[list[Comm], list[Comm]]:
    """:func:`layer_comms` but the weights' own (the optimiser's): those before them (the split's
    reductions, statistics, expert and key/value exchanges, ``exchange`` the framework's:
    :func:`framework_exchange`) and those after (the sums of replicated grouped weights)."""
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    active = [(dim, dim_splits(layer)[dim]) for dim, _ in strategy.degrees]
    head = _comms(strategy, machine, rule, memo, tensor_collectives(layer, strategy, local, itemsize)
                  + _extra_collectives(active, local, strategy, itemsize)
                  + expert_collectives(layer, strategy, local, itemsize))
    head += kv_comms(layer, strategy, local, machine, rule, kernel, passes, memo, exchange)
    head += [Comm(*c) for c in flex_exchanges(layer, strategy, local, itemsize, machine)]
    tail = _comms(strategy, machine, rule, memo,
                  [(purpose, phase, collective, nbytes, (dim,), share) for purpose, phase, collective, nbytes, dim, share
                   in replica_sums(active, dict(strategy.degrees), dict(local.weight_shapes), itemsize)])
    return head, tail


def weight_comms(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, opt: Optimizer, rule: str,
                  memo: dict | None) -> list[Comm]:
    """The weights' gradient sums, or ZeRO's reduce-scatters and gathers (costmodel.comm.weight_sync)."""
    active = [(dim, dim_splits(layer)[dim]) for dim, _ in strategy.degrees]
    return _comms(strategy, machine, rule, memo, weight_collectives(layer, active, dict(local.weight_shapes),
                                                                    DTYPE_BYTES.get(layer.dtype, 4), opt))


def framework_exchange(compute) -> str | None:
    """The exchange of a split sequence's keys and values the compute model's framework runs
    (costmodel.frameworks.framework's ``context_parallel``: Megatron-LM's ring, torchtitan's
    all-gather), None where it states none (the cheaper for each layer)."""
    return getattr(getattr(compute, "framework", None), "context_exchange", None)


def kv_comms(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, rule: str, kernel: str,
             passes: tuple[float, float], memo: dict | None = None, exchange: str | None = None) -> list[Comm]:
    """The keys and values an attention layer over a split sequence exchanges
    (costmodel.comm.context), their ring hidden under the core's share of ``passes`` (the forward
    and backward-data seconds of ``kernel``); none for any other layer or split. ``memo``: as
    :func:`group_time`'s (one machine a memo), these kept by all the other arguments."""
    if layer.op != "attention" or strategy.degree(H) == 1:
        return []
    if memo is not None:
        key = ("kv", layer, strategy, local, rule, kernel, passes, exchange)
        got = memo.get(key)
        if got is None:
            got = memo[key] = tuple(_kv_comms(layer, strategy, local, machine, rule, kernel, passes, memo, exchange))
        return list(got)
    return _kv_comms(layer, strategy, local, machine, rule, kernel, passes, None, exchange)


def _kv_comms(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, rule: str, kernel: str,
              passes: tuple[float, float], memo: dict | None, exchange: str | None = None) -> list[Comm]:
    """:func:`kv_comms` priced; the exchange kept in ``memo`` for the shard's other algorithms
    (only the core's time differs)."""
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    key = ("kv-exchange", layer, strategy, local, rule, exchange)
    priced = None if memo is None else memo.get(key)
    if priced is None:
        priced = context_exchange(layer, strategy, local, itemsize, machine, rule,
                                  _group_span(strategy, (H,), machine), exchange)
        if memo is not None:
            memo[key] = priced
    sram = machine.device.sram_bytes
    shares = None if memo is None else memo.get(("core-share", local, kernel, sram))
    if shares is None:  # the core's share of each pass: its kernel's, whatever the algorithm's passes
        shares = tuple(core_share(local, pass_, kernel, sram) for pass_ in ("fwd", "bwd_data"))
        if memo is not None:
            memo[("core-share", local, kernel, sram)] = shares
    return [Comm(*c) for c in priced.comms(tuple(t * share for t, share in zip(passes, shares)))]


def _extra_collectives(active, local: LocalLayer, strategy: Strategy, itemsize: int) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of an op's ``DimSplit.extra`` collectives (batch-norm
    statistics, a vocabulary-parallel loss's per-token numbers), over the dims that declare them."""
    extra_dims = [d for d, s in active if s.extra]
    if not extra_dims:
        return []
    out = []
    for ex in dict((s.dim, s) for _, s in active if s.extra)[extra_dims[0]].extra:
        base = {"channels": local.in_shapes[0][0], "rows": local.batch * prod(local.in_shapes[0][:-1]),
                "output": local.batch * prod(local.out_shape)}[ex.per]
        contrib = ex.factor * base * itemsize
        nbytes = contrib * strategy.group_size(extra_dims) if ex.collective == "allgather" else contrib
        out.append(({"channels": "stats", "rows": "stats", "output": "kv"}[ex.per], ex.phase, ex.collective,
                    nbytes, extra_dims))
    return out
