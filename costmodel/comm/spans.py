"""The link domains a strategy's communicator groups span: the slowest group's (pure).

A strategy's groups along some grid dimensions (its tensor groups, its expert groups, ...) are
translations of rank 0's group: the group of first rank ``b`` is ``b`` plus rank 0's members. Every
group runs its collective at once and the step waits for the slowest, so a collective is priced on
the group that crosses the most link domains (``Machine.domain_size`` ranks each, in rank order),
not on rank 0's. Where the domain is a multiple of the group's extent every group is rank 0's
alike; where it is not (GB200 NVL72's 72-GPU domain and tensor groups of 16 on 144 GPUs: ranks
64-79 hold one group across domains 0 and 1), rank 0's group stays inside one domain and others
do not.

Only a first rank's residue modulo the domain decides how its group lies across domains (a
multiple of the domain moves it to the next domain whole): the residues are the sums of the other
dimensions' coordinates times their strides, modulo the domain, at most ``domain_size`` values.

A pipeline's stages run one stage's strategy each on its own ranks, stage ``s`` on ``[s d, (s + 1) d)``
(``costmodel.step.pipeline``), and its pace is the slowest stage's. Where ``d`` and the domain
neither divides the other, later stages lie across the domains unlike stage 0 (Llama 3.1 405B on
256 GB200s in 8 stages of 32: stage 2 holds ranks 64-95, across racks 0 and 1). A stage is priced
on :func:`pipeline_view` of the machine, which names the other stages' first ranks
(``Machine.copies``), and every collective on the slowest group of every stage: each stage priced
as the slowest, one pricing for all (the planner prices one stage's layers for every stage).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from math import prod

from costmodel.machine.model import Machine
from costmodel.parallel.axes import DATA, GRID_ORDER, axes_of
from costmodel.parallel.strategy import Strategy


def first_residues(strategy: Strategy, dims: tuple[str, ...], domain: int, within: int = 0) -> tuple[int, ...]:
    """The residues modulo ``domain`` of the first ranks of ``strategy``'s groups along ``dims``
    (the ranks whose coordinate along every one of ``dims`` is 0; with ``within``, the groups of
    ``within`` consecutive members of those, as ``costmodel.comm.weight_sync.replica_sums`` takes
    them), sorted."""
    seen = {0}
    group = set(dims)
    for i, name in enumerate(GRID_ORDER):
        k, s = strategy.radix[i], strategy.strides[i]
        if k == 1 or name in group or s % domain == 0:
            continue
        steps = {(c * s) % domain for c in range(min(k, domain))}
        seen = {(r + t) % domain for r in seen for t in steps}
    if within:
        members = strategy.group_array(0, dims)
        starts = {int(m) % domain for m in members[::within]}
        seen = {(r + t) % domain for r in seen for t in starts}
    return tuple(sorted(seen))


@lru_cache(maxsize=None)
def slowest_span(strategy: Strategy, dims: tuple[str, ...], machine: Machine, within: int = 0) -> tuple[int, int]:
    """``(ranks_per_domain, domains_spanned)`` (``Machine.group_span``) of the group along ``dims``
    that spans the most link domains (of those, the most ranks in one domain): every group's where
    they all lie alike, rank 0's included (module docstring). ``within``: the groups of the first
    ``within`` members (``costmodel.layer.comms.group_time``). Memoised: the planner asks often."""
    members = strategy.group_array(0, dims)
    if within:
        members = members[:within]
    first = machine.group_span(members)
    domain = machine.domain_size
    offsets = members % domain
    residues = first_residues(strategy, dims, domain, within)
    if machine.copies:  # the other stages' groups too (pipeline_view)
        residues = tuple(sorted({(r + c) % domain for r in residues for c in (0, *machine.copies)}))
    if residues[-1] + int(offsets.max()) < domain:  # no residue moves a member past its domain's end
        return first
    spans = {machine.group_span(members + r) for r in residues}
    return max(spans, key=lambda span: (span[1], span[0]))


def pipeline_view(machine: Machine, devices: int, stages: int) -> Machine:
    """``machine`` as one stage of ``stages`` over ``devices`` ranks sees it: the other stages'
    first ranks modulo the domain as its ``copies`` (module docstring); ``machine`` itself where
    every stage lies across the domains as stage 0 (each stage's first rank a multiple of the
    domain: one stage, or stages of whole domains)."""
    domain, d = machine.domain_size, devices // max(1, stages)
    copies = tuple(sorted({(s * d) % domain for s in range(1, stages)} - {0}))
    return dataclasses.replace(machine, copies=copies) if copies else machine


@dataclass(frozen=True)
class Crossing:
    """Groups of one axis some of which lie across more link domains than rank 0's: the step waits
    for the slowest (:func:`slowest_span`). ``size``: the ranks a group; ``first``: the domains
    rank 0's group spans; ``slowest``: the most any group spans."""

    axis: str
    size: int
    first: int
    slowest: int


def crossings(strategies, machine: Machine, sequence: bool = True) -> tuple[Crossing, ...]:
    """Each layer axis (``costmodel.parallel.axes.axes_of(sequence)``, data parallelism aside: its
    groups span the nodes anyway) whose groups in some of ``strategies`` lie across more link
    domains than rank 0's group does, the worst such size of each axis: a layout whose degrees do
    not divide the domain, groups that start inside one domain and end in the next (module
    docstring). ``machine``: the view the strategies are priced on (:func:`pipeline_view` for a
    pipeline's stage)."""
    worst: dict[str, Crossing] = {}
    for strategy in dict.fromkeys(s.plain for s in strategies):  # in order: the first of equals named
        for axis in axes_of(sequence):
            if axis is DATA:
                continue
            dims = tuple(d for d in axis.letters if strategy.degree(d) > 1)
            if not dims:
                continue
            size = prod(strategy.degree(d) for d in dims)
            first = machine.group_span(strategy.group_array(0, dims))[1]
            slowest = slowest_span(strategy, dims, machine)[1]
            if slowest > first and (axis.name not in worst or slowest > worst[axis.name].slowest):
                worst[axis.name] = Crossing(axis.name, size, first, slowest)
    return tuple(worst[a.name] for a in axes_of(sequence) if a.name in worst)
