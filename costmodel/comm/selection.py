"""Which algorithm MPICH runs for a collective: the algorithm names, the selection rules and
MPICH's default thresholds. The lowest of the collective modules: :mod:`costmodel.comm.collectives`
(single-level costs and :func:`~costmodel.comm.collectives.choose_algorithm`) and
:mod:`costmodel.comm.groups` (groups that span nodes) build on it.

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


def is_pof2(p: int) -> bool:
    """Whether p is a power of two."""
    return p & (p - 1) == 0


def pof2(p: int) -> int:
    """Largest power of two <= p."""
    return 1 << (p.bit_length() - 1)


def mpich_algorithm(collective: str, n: float, p: int) -> str:
    """The algorithm MPICH's default selection runs for ``collective`` of ``n`` bytes over ``p``
    ranks (the decision trees in the module docstring)."""
    t = MPICH_THRESHOLDS
    count = n / ELEMENT_BYTES
    if collective == "allreduce":
        short = n <= t["MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE"] or count < pof2(p)
        return "recursive_doubling" if short else "rabenseifner"
    if collective == "reduce":
        short = n <= t["MPIR_CVAR_REDUCE_SHORT_MSG_SIZE"] or count < pof2(p)
        return "binomial_tree" if short else "reduce_scatter_gather"
    if collective == "reduce_scatter":
        long_ = n >= t["MPIR_CVAR_REDUCE_SCATTER_COMMUTATIVE_LONG_MSG_SIZE"]
        return "ring" if long_ else "recursive_halving"
    if collective == "allgather":
        if n < t["MPIR_CVAR_ALLGATHER_LONG_MSG_SIZE"] and is_pof2(p):
            return "recursive_doubling"
        return "bruck" if n < t["MPIR_CVAR_ALLGATHER_SHORT_MSG_SIZE"] else "ring"
    if collective == "broadcast":
        if n < t["MPIR_CVAR_BCAST_SHORT_MSG_SIZE"] or p < t["MPIR_CVAR_BCAST_MIN_PROCS"]:
            return "binomial_tree"
        if n < t["MPIR_CVAR_BCAST_LONG_MSG_SIZE"] and is_pof2(p):
            return "scatter_doubling_allgather"
        return "scatter_ring_allgather"
    # alltoall
    block = n / p
    if block <= t["MPIR_CVAR_ALLTOALL_SHORT_MSG_SIZE"] and p >= 8:
        return "bruck"
    return "scattered" if block <= t["MPIR_CVAR_ALLTOALL_MEDIUM_MSG_SIZE"] else "pairwise"


def check_names(collective: str, rule: str) -> None:
    """Raise a DnnplanError for an unknown collective or selection rule."""
    if collective not in ALGORITHMS:
        raise DnnplanError(f"unknown collective '{collective}'", field="collective",
                           hint=f"use one of {', '.join(ALGORITHMS)}")
    if rule not in RULES:
        raise DnnplanError(f"unknown algorithm-selection rule '{rule}'", field="rule",
                           hint=f"use one of {', '.join(RULES)}")
