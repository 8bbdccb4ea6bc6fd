"""Which collective algorithm runs, and the two-level cost of a group that spans nodes.

Split out of :mod:`costmodel.collectives` (which re-exports everything here) to keep each file
short. The single-level formulas live there and are imported lazily, so this module has no
import-time dependency on them.

``rule="mpi"`` reproduces MPICH's default ("auto") algorithm selection, the decision trees of
``MPIR_Allreduce_intra_auto`` & co. in MPICH 3.x, kept as the fallback of MPICH 4's JSON
selection, with the control variables' documented defaults (:data:`MPICH_THRESHOLDS`):

- allreduce: recursive doubling if ``n <= MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE`` (2048 B) or the
  element count ``n / ELEMENT_BYTES`` is below p' (largest power of two <= p); else Rabenseifner.
- reduce: binomial tree if ``n <= MPIR_CVAR_REDUCE_SHORT_MSG_SIZE`` (2048 B) or count < p';
  else reduce-scatter + gather.
- reduce_scatter (commutative op): recursive halving if
  ``n < MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE`` (512 KiB); else pairwise (= ring).
- allgather (``n`` = gathered total): recursive doubling if ``n < MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE``
  (512 KiB) and p is a power of two; else Bruck if ``n < MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE``
  (80 KiB); else ring.
- broadcast: binomial tree if ``n < MPIR_CVAR_BCAST_SHORT_MSG_SIZE`` (12 KiB) or
  ``p < MPIR_CVAR_BCAST_MIN_PROCS`` (8); else scatter + recursive-doubling allgather if
  ``n < MPIR_CVAR_BCAST_LONG_MSG_SIZE`` (512 KiB) and p is a power of two; else scatter + ring
  allgather.
- alltoall (block = n/p bytes per destination): Bruck if ``block <= MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE``
  (256 B) and p >= 8; else scattered (all isend/irecv) if
  ``block <= MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE`` (32 KiB); else pairwise.

``rule="cheapest"`` evaluates every algorithm in ``ALGORITHMS[collective]`` and keeps the fastest
(ties go to the earlier name).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from costmodel.machine import LinkLevel, Machine
from networks.errors import DnnplanError

#: The algorithms each collective can be costed with; the first wins ties under "cheapest".
ALGORITHMS: dict[str, tuple[str, ...]] = {
    "allreduce": ("ring", "recursive_doubling", "rabenseifner", "binomial_tree", "butterfly",
                  "parameter_server"),
    "reduce_scatter": ("ring", "recursive_halving"),
    "allgather": ("ring", "recursive_doubling", "bruck"),
    "broadcast": ("binomial_tree", "scatter_doubling_allgather", "scatter_ring_allgather"),
    "reduce": ("binomial_tree", "reduce_scatter_gather"),
    "alltoall": ("pairwise", "scattered", "bruck"),
}

RULES = ("mpi", "cheapest")

#: MPICH control variables (environment variables of the same name) and their defaults, in bytes
#: (BCAST_MIN_PROCS in ranks).
MPICH_THRESHOLDS: dict[str, int] = {
    "MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE": 2048,
    "MPIR_CVAR_REDUCE_SHORT_MSG_SIZE": 2048,
    "MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE": 524288,
    "MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE": 81920,
    "MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE": 524288,
    "MPIR_CVAR_BCAST_SHORT_MSG_SIZE": 12288,
    "MPIR_CVAR_BCAST_LONG_MSG_SIZE": 524288,
    "MPIR_CVAR_BCAST_MIN_PROCS": 8,
    "MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE": 256,
    "MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE": 32768,
}

#: Element size assumed where MPICH compares an element count (float32 gradients).
ELEMENT_BYTES = 4


def _is_pof2(p: int) -> bool:
    return p & (p - 1) == 0


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


def _mpich(collective: str, n: float, p: int) -> str:
    t = MPICH_THRESHOLDS
    count = n / ELEMENT_BYTES
    if collective == "allreduce":
        short = n <= t["MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE"] or count < _pof2(p)
        return "recursive_doubling" if short else "rabenseifner"
    if collective == "reduce":
        short = n <= t["MPIR_CVAR_REDUCE_SHORT_MSG_SIZE"] or count < _pof2(p)
        return "binomial_tree" if short else "reduce_scatter_gather"
    if collective == "reduce_scatter":
        long_ = n >= t["MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE"]
        return "ring" if long_ else "recursive_halving"
    if collective == "allgather":
        if n < t["MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE"] and _is_pof2(p):
            return "recursive_doubling"
        return "bruck" if n < t["MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE"] else "ring"
    if collective == "broadcast":
        if n < t["MPIR_CVAR_BCAST_SHORT_MSG_SIZE"] or p < t["MPIR_CVAR_BCAST_MIN_PROCS"]:
            return "binomial_tree"
        if n < t["MPIR_CVAR_BCAST_LONG_MSG_SIZE"] and _is_pof2(p):
            return "scatter_doubling_allgather"
        return "scatter_ring_allgather"
    # alltoall
    block = n / p
    if block <= t["MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE"] and p >= 8:
        return "bruck"
    return "scattered" if block <= t["MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE"] else "pairwise"


def _check_names(collective: str, rule: str) -> None:
    if collective not in ALGORITHMS:
        raise DnnplanError(f"unknown collective '{collective}'", field="collective",
                           hint=f"use one of {', '.join(ALGORITHMS)}")
    if rule not in RULES:
        raise DnnplanError(f"unknown algorithm-selection rule '{rule}'", field="rule",
                           hint=f"use one of {', '.join(RULES)}")


def choose_algorithm(collective: str, nbytes: float, p: int, link: LinkLevel,
                     rule: str = "mpi") -> str:
    """The algorithm that runs ``collective`` of ``nbytes`` over ``p`` ranks on ``link``.

    ``rule="mpi"``: MPICH's default selection (thresholds in the module docstring and
    :data:`MPICH_THRESHOLDS`); ``rule="cheapest"``: the minimum of the alpha-beta-gamma costs of
    reference/000_0882bce98377ddd2.txt (collectives slides) over ``ALGORITHMS[collective]``.
    ``nbytes`` means what the collective's cost function says it means.
    """
    _check_names(collective, rule)
    if rule == "mpi":
        return _mpich(collective, float(nbytes), p)
    from costmodel.collectives import COST_FUNCTIONS
    cost = COST_FUNCTIONS[collective]
    return min(ALGORITHMS[collective], key=lambda algo: cost(nbytes, p, link, algo))


def _links(machine_or_links: Machine | Sequence[LinkLevel], collective: str = "",
           nbytes: float = math.inf, cold: bool = False) -> tuple[LinkLevel, LinkLevel]:
    if isinstance(machine_or_links, Machine):
        return machine_or_links.link_for_collective(collective, nbytes, cold), machine_or_links.inter
    intra, inter = machine_or_links
    return intra, inter


def collective_s(collective: str, nbytes: float, ranks_per_node: int, nodes: int,
                 machine_or_links: Machine | Sequence[LinkLevel], algorithm: str = "auto",
                 rule: str = "mpi", cold: bool = False) -> float:
    """Cost of ``collective`` over a group of ``ranks_per_node * nodes`` ranks, two-level.

    ``machine_or_links`` is a :class:`Machine` or an ``(intra, inter)`` pair of link levels;
    ``ranks_per_node`` (q) and ``nodes`` (N) come from :meth:`Machine.group_span`. One node, or
    one rank per node, is the single-level formula on that link. Otherwise (all formulas from
    costmodel.collectives, citing reference/000_0882bce98377ddd2.txt and
    reference/004_f294eac0d22243ce.txt Section 2.5):

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
    _check_names(collective, rule)
    from costmodel import collectives as c
    for name, value in (("ranks_per_node", ranks_per_node), ("nodes", nodes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    intra, inter = _links(machine_or_links, collective, nbytes, cold)
    cost = c.COST_FUNCTIONS[collective]
    q, big_n, p = ranks_per_node, nodes, ranks_per_node * nodes
    if big_n == 1:
        return cost(nbytes, q, intra, algorithm, rule=rule)
    if q == 1:
        return cost(nbytes, big_n, inter, algorithm, rule=rule)
    if nbytes == 0:
        return 0.0
    n = float(nbytes)
    if collective == "allreduce":
        return (c.reduce_scatter_s(n, q, intra, rule=rule)
                + c.allreduce_s(n / q, big_n, inter, algorithm, rule=rule)
                + c.allgather_s(n, q, intra, rule=rule))
    if collective == "reduce_scatter":
        return (c.reduce_scatter_s(n, q, intra, rule=rule)
                + c.reduce_scatter_s(n / q, big_n, inter, algorithm, rule=rule))
    if collective == "allgather":
        return (c.allgather_s(n / q, big_n, inter, algorithm, rule=rule)
                + c.allgather_s(n, q, intra, rule=rule))
    if collective == "broadcast":
        return (c.broadcast_s(n, big_n, inter, algorithm, rule=rule)
                + c.broadcast_s(n, q, intra, rule=rule))
    if collective == "reduce":
        return (c.reduce_s(n, q, intra, rule=rule)
                + c.reduce_s(n, big_n, inter, algorithm, rule=rule))
    # alltoall
    algo = choose_algorithm("alltoall", n, p, inter, rule) if algorithm == "auto" else algorithm
    if algo == "bruck":
        return c.alltoall_s(n, p, inter, "bruck")
    c.alltoall_s(n, p, inter, algo)  # validates the name
    block = n / p
    return ((q - 1) * (intra.alpha_s + block * intra.beta_s_per_byte)
            + (p - q) * (inter.alpha_s + block * inter.beta_s_per_byte))
