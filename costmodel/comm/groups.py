"""The cost of a collective over a group of ranks that may span nodes: two levels, each priced by
the single-level formulas of :mod:`costmodel.comm.collectives` (docs/collectives.md, "Groups that span
nodes").

The decompositions follow N. Dryden, "Parallelism in Training Deep Neural Networks" (lecture
slides, "Collectives for deep learning") and T. Ben-Nun and T. Hoefler, "Demystifying Parallel and
Distributed Deep Learning: An In-Depth Concurrency Analysis" (ACM Computing Surveys 52(4), 2019),
Section 2.5.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from costmodel.comm.selection import check_names
from costmodel.comm.collectives import (COST_FUNCTIONS, allgather_s, allreduce_s, alltoall_s, broadcast_s,
                                        choose_algorithm, reduce_s, reduce_scatter_s)
from costmodel.machine.model import LinkLevel, Machine


def _links(machine_or_links: Machine | Sequence[LinkLevel], collective: str = "",
           nbytes: float = math.inf, cold: bool = False) -> tuple[LinkLevel, LinkLevel]:
    if isinstance(machine_or_links, Machine):
        return machine_or_links.link_for_collective(collective, nbytes, cold), machine_or_links.inter
    intra, inter = machine_or_links
    return intra, inter


def _check_span(ranks_per_node: int, nodes: int) -> None:
    for name, value in (("ranks_per_node", ranks_per_node), ("nodes", nodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


def collective_s(collective: str, nbytes: float, ranks_per_node: int, nodes: int,
                 machine_or_links: Machine | Sequence[LinkLevel], algorithm: str = "auto",
                 rule: str = "mpi", cold: bool = False) -> float:
    """Cost of ``collective`` over a group of ``ranks_per_node * nodes`` ranks, two-level.

    ``machine_or_links`` is a :class:`Machine` or an ``(intra, inter)`` pair of link levels;
    ``ranks_per_node`` (q) and ``nodes`` (N) come from :meth:`Machine.group_span`. One node, or
    one rank per node, is the single-level formula on that link. Otherwise (all formulas from
    :mod:`costmodel.comm.collectives`; decompositions after Dryden's collectives slides and Ben-Nun &
    Hoefler 2019, Section 2.5):

    - allreduce(n)      = reduce_scatter_intra(n, q) + allreduce_inter(n/q, N) + allgather_intra(n, q)
    - reduce_scatter(n) = reduce_scatter_intra(n, q) + reduce_scatter_inter(n/q, N)
    - allgather(n)      = allgather_inter(n/q, N) + allgather_intra(n, q)
    - broadcast(n)      = broadcast_inter(n, N) + broadcast_intra(n, q)
    - reduce(n)         = reduce_intra(n, q) + reduce_inter(n, N)
    - alltoall(n), pairwise/scattered = (q-1)(a_intra + n/p b_intra) + (p-q)(a_inter + n/p b_inter),
      p = qN (each step exchanges one n/p block, on-node partners over the intra link);
      bruck = alltoall_inter(n, p) (its rounds mix partners, so every round pays the inter link).

    The q inter-node collectives run at once, one per local index, each over the inter link's
    per-device bandwidth. ``algorithm`` names the inter-node stage's algorithm (or the single
    level's; for alltoall the whole exchange's); intra-node stages pick theirs by ``rule``.
    ``cold``: the collective follows a layer's kernels (``Machine.fitted_cold``).
    """
    check_names(collective, rule)
    _check_span(ranks_per_node, nodes)
    intra, inter = _links(machine_or_links, collective, nbytes, cold)
    cost = COST_FUNCTIONS[collective]
    q, big_n = ranks_per_node, nodes
    if big_n == 1:
        return cost(nbytes, q, intra, algorithm, rule=rule)
    if q == 1:
        return cost(nbytes, big_n, inter, algorithm, rule=rule)
    if nbytes == 0:
        return 0.0
    if collective == "alltoall":
        return _alltoall_two_level(float(nbytes), q, big_n, intra, inter, algorithm, rule)
    return _staged(collective, float(nbytes), q, big_n, intra, inter, algorithm, rule)


def _staged(collective: str, n: float, q: int, big_n: int, intra: LinkLevel, inter: LinkLevel,
            algorithm: str, rule: str) -> float:
    """The intra-node and inter-node stages of a (reduce-)scatter/gather/broadcast-type collective."""
    if collective == "allreduce":
        return (reduce_scatter_s(n, q, intra, rule=rule)
                + allreduce_s(n / q, big_n, inter, algorithm, rule=rule)
                + allgather_s(n, q, intra, rule=rule))
    if collective == "reduce_scatter":
        return (reduce_scatter_s(n, q, intra, rule=rule)
                + reduce_scatter_s(n / q, big_n, inter, algorithm, rule=rule))
    if collective == "allgather":
        return (allgather_s(n / q, big_n, inter, algorithm, rule=rule)
                + allgather_s(n, q, intra, rule=rule))
    if collective == "broadcast":
        return (broadcast_s(n, big_n, inter, algorithm, rule=rule)
                + broadcast_s(n, q, intra, rule=rule))
    # reduce
    return (reduce_s(n, q, intra, rule=rule)
            + reduce_s(n, big_n, inter, algorithm, rule=rule))


def _alltoall_two_level(n: float, q: int, big_n: int, intra: LinkLevel, inter: LinkLevel,
                        algorithm: str, rule: str) -> float:
    """An all-to-all over q ranks on each of N nodes: Bruck pays the inter link on every round;
    pairwise and scattered send each n/p block over the link to its partner."""
    p = q * big_n
    algo = choose_algorithm("alltoall", n, p, inter, rule) if algorithm == "auto" else algorithm
    if algo == "bruck":
        return alltoall_s(n, p, inter, "bruck")
    alltoall_s(n, p, inter, algo)  # validates the name
    block = n / p
    return ((q - 1) * (intra.alpha_s + block * intra.beta_s_per_byte)
            + (p - q) * (inter.alpha_s + block * inter.beta_s_per_byte))
