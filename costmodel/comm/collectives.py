"""Communication cost of MPI collectives in the alpha-beta-gamma model, one function per collective.

Sources, cited by short name in each docstring:

- [Dryden]: N. Dryden, "Parallelism in Training Deep Neural Networks" (lecture slides), the
  "Collectives for deep learning" slides (Reduce-scatter, Allgather, Allreduce).
- [Ben-Nun & Hoefler 2019]: T. Ben-Nun and T. Hoefler, "Demystifying Parallel and Distributed Deep
  Learning: An In-Depth Concurrency Analysis", ACM Computing Surveys 52(4), 2019.

Notation [Dryden]: ``n`` bytes, ``p`` ranks, ``alpha`` seconds per message, ``beta`` seconds per
byte sent, ``gamma`` seconds per byte reduced; ``lg`` is log2. Every function returns seconds and
returns exactly ``0.0`` when ``p == 1`` or ``nbytes == 0``. The formulas are tabulated with their
sources in docs/collectives.md.

Non-power-of-two ``p`` is handled as MPICH does: algorithms that need a power of two (recursive
doubling / halving, Rabenseifner) first fold the ``p - p'`` extra ranks into partners
(``p'`` = largest power of two <= p; one extra step of ``alpha + n beta (+ n gamma)``), run on
``p'`` ranks, and unfold the result (one more step). Tree algorithms use ``ceil(lg p)`` rounds.

``algorithm="auto"`` picks by ``rule`` (:func:`choose_algorithm`): ``"mpi"`` follows MPICH's
default selection (:mod:`costmodel.comm.selection`), ``"cheapest"`` the minimum over
``ALGORITHMS``. The two-level cost of a group spanning nodes, ``collective_s``, builds on these in
:mod:`costmodel.comm.groups`.
"""

from __future__ import annotations

import math

from costmodel.comm.selection import ALGORITHMS, MPICH_THRESHOLDS, RULES, check_names, mpich_algorithm, pof2
from costmodel.machine.model import LinkLevel
from networks.errors import DnnplanError

__all__ = ["ALGORITHMS", "COST_FUNCTIONS", "MPICH_THRESHOLDS", "RULES", "allgather_s", "allreduce_s",
           "alltoall_s", "alltoallv_s", "broadcast_s", "choose_algorithm", "reduce_s", "reduce_scatter_s",
           "sendrecv_s"]


def choose_algorithm(collective: str, nbytes: float, p: int, link: LinkLevel,
                     rule: str = "mpi") -> str:
    """The algorithm that runs ``collective`` of ``nbytes`` over ``p`` ranks on ``link``.

    ``rule="mpi"``: MPICH's default selection (:func:`costmodel.comm.selection.mpich_algorithm`,
    thresholds in :data:`MPICH_THRESHOLDS`); ``rule="cheapest"``: the minimum of the
    alpha-beta-gamma costs of this module [Dryden] over ``ALGORITHMS[collective]``.
    ``nbytes`` means what the collective's cost function says it means.
    """
    check_names(collective, rule)
    if rule == "mpi":
        return mpich_algorithm(collective, float(nbytes), p)
    cost = COST_FUNCTIONS[collective]
    return min(ALGORITHMS[collective], key=lambda algo: cost(nbytes, p, link, algo))


# --- helpers -------------------------------------------------------------------------------------

def _check(nbytes: float, p: int) -> None:
    if isinstance(p, bool) or not isinstance(p, int) or p < 1:
        raise ValueError(f"group size p must be a positive integer, got {p!r}")
    if not (nbytes >= 0 and math.isfinite(nbytes)):
        raise ValueError(f"nbytes must be a finite number >= 0, got {nbytes!r}")


def _trivial(nbytes: float, p: int) -> bool:
    _check(nbytes, p)
    return p == 1 or nbytes == 0


def _ceil_lg(p: int) -> int:
    """ceil(log2 p): rounds of a binomial tree or a Bruck exchange."""
    return (p - 1).bit_length()


def _lg(p: int) -> int:
    """log2 of a power of two."""
    return p.bit_length() - 1


def _fold(nbytes: float, p: int, link: LinkLevel, reduce: bool) -> float:
    """MPICH's non-power-of-two fold: the p - p' extra ranks send their whole buffer to a partner
    (which reduces it when ``reduce``) before the power-of-two algorithm; 0 when p is a power of 2."""
    if p == pof2(p):
        return 0.0
    gamma = link.gamma_s_per_byte if reduce else 0.0
    return link.alpha_s + nbytes * (link.beta_s_per_byte + gamma)


def _resolve(collective: str, algorithm: str, nbytes: float, p: int, link: LinkLevel,
             rule: str) -> str:
    if algorithm == "auto":
        return choose_algorithm(collective, nbytes, p, link, rule=rule)
    if algorithm not in ALGORITHMS[collective]:
        raise DnnplanError(f"unknown {collective} algorithm '{algorithm}'", field="algorithm",
                           hint=f"use auto or one of {', '.join(ALGORITHMS[collective])}")
    return algorithm


# --- allreduce -----------------------------------------------------------------------------------

def allreduce_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
                rule: str = "mpi") -> float:
    """Allreduce (sum) of an ``nbytes`` vector held by every rank; the result on every rank.

    Sources: [Dryden], "Collectives for deep learning" / "Allreduce" slides (Parameter Server,
    Tree, Butterfly, Rabenseifner, Ring) and [Ben-Nun & Hoefler 2019], Section 2.5 (T_tree, T_bfly,
    T_pipe, T_rabe):

    - ring:             2(p-1) a + 2 (p-1)/p n b + (p-1)/p n g
    - rabenseifner:     2 lg p a + 2 (p-1)/p n b + (p-1)/p n g  (recursive-halving reduce-scatter
                        + recursive-doubling allgather; non-power-of-two p: MPICH fold/unfold)
    - recursive_doubling: lg p (a + n b + n g)  (non-power-of-two p: MPICH fold/unfold)
    - butterfly:        ceil(lg p) (a + n b + n g)  (the slides' idealised butterfly)
    - binomial_tree:    2 ceil(lg p) a + 2 ceil(lg p) n b + ceil(lg p) n g  (reduce + broadcast)
    - parameter_server: 2p a + 2p n b + p n g
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("allreduce", algorithm, nbytes, p, link, rule)
    a, b, g, n = link.alpha_s, link.beta_s_per_byte, link.gamma_s_per_byte, float(nbytes)
    if algo == "ring":
        return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b + (p - 1) / p * n * g
    if algo == "parameter_server":
        return 2 * p * a + 2 * p * n * b + p * n * g
    if algo == "binomial_tree":
        k = _ceil_lg(p)
        return 2 * k * a + 2 * k * n * b + k * n * g
    if algo == "butterfly":
        return _ceil_lg(p) * (a + n * b + n * g)
    q = pof2(p)
    extra = _fold(n, p, link, reduce=True) + _fold(n, p, link, reduce=False)
    if algo == "recursive_doubling":
        return extra + _lg(q) * (a + n * b + n * g)
    # rabenseifner
    return extra + 2 * _lg(q) * a + 2 * (q - 1) / q * n * b + (q - 1) / q * n * g


# --- reduce-scatter ------------------------------------------------------------------------------

def reduce_scatter_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
                     rule: str = "mpi") -> float:
    """Reduce-scatter: every rank holds an ``nbytes`` *input* vector and ends with its n/p block
    of the sum.

    Source: [Dryden], "Reduce-scatter" slides (Recursive-halving, Ring):

    - ring (MPICH's pairwise exchange costs the same): (p-1) a + (p-1)/p n (b + g)
    - recursive_halving: lg p a + (p-1)/p n (b + g); non-power-of-two p: MPICH folds the extra
      ranks in (a + n b + n g), halves over p' ranks, and sends their block back (a + n/p b).
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("reduce_scatter", algorithm, nbytes, p, link, rule)
    a, b, g, n = link.alpha_s, link.beta_s_per_byte, link.gamma_s_per_byte, float(nbytes)
    if algo == "ring":
        return (p - 1) * a + (p - 1) / p * n * (b + g)
    q = pof2(p)
    cost = _lg(q) * a + (q - 1) / q * n * (b + g)
    if q != p:
        cost += _fold(n, p, link, reduce=True) + a + n / p * b
    return cost


# --- allgather -----------------------------------------------------------------------------------

def allgather_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
                rule: str = "mpi") -> float:
    """Allgather: every rank contributes n/p bytes; ``nbytes`` is the size of the *gathered result*.

    Source: [Dryden], "Allgather" slides (Recursive-doubling, Ring):

    - recursive_doubling: lg p a + (p-1)/p n b; non-power-of-two p: (2 ceil(lg p) - 1) a + (p-1)/p n b,
      an approximation of MPICH's extra steps for ranks whose partner is missing (MPICH never
      selects it there)
    - ring:  (p-1) a + (p-1)/p n b
    - bruck: ceil(lg p) a + (p-1)/p n b  (MPICH's short-message choice for non-power-of-two p)
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("allgather", algorithm, nbytes, p, link, rule)
    a, b, n = link.alpha_s, link.beta_s_per_byte, float(nbytes)
    if algo == "ring":
        return (p - 1) * a + (p - 1) / p * n * b
    if algo == "recursive_doubling" and p != pof2(p):
        return (2 * _ceil_lg(p) - 1) * a + (p - 1) / p * n * b
    return _ceil_lg(p) * a + (p - 1) / p * n * b


# --- broadcast -----------------------------------------------------------------------------------

def broadcast_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
                rule: str = "mpi") -> float:
    """Broadcast of an ``nbytes`` message from one root to all ranks.

    Sources: [Dryden], "Allreduce: Tree (reduce/broadcast)" slide (the broadcast half of
    2 lg p a + 2 n lg p b) and the "Allgather" slides for the second phase:

    - binomial_tree: ceil(lg p) (a + n b)
    - scatter_doubling_allgather: binomial scatter (ceil(lg p) a + (p-1)/p n b) then
      recursive-doubling allgather (ceil(lg p) a + (p-1)/p n b)
    - scatter_ring_allgather: binomial scatter then ring allgather ((p-1) a + (p-1)/p n b)
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("broadcast", algorithm, nbytes, p, link, rule)
    a, b, n = link.alpha_s, link.beta_s_per_byte, float(nbytes)
    k = _ceil_lg(p)
    if algo == "binomial_tree":
        return k * (a + n * b)
    scatter = k * a + (p - 1) / p * n * b
    if algo == "scatter_doubling_allgather":
        return scatter + k * a + (p - 1) / p * n * b
    return scatter + (p - 1) * a + (p - 1) / p * n * b


# --- reduce --------------------------------------------------------------------------------------

def reduce_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
             rule: str = "mpi") -> float:
    """Reduce (sum) of an ``nbytes`` vector from every rank onto one root.

    Sources: [Dryden], "Allreduce: Tree (reduce/broadcast)" slide (the reduce half) and
    "Reduce-scatter: Recursive-halving" slide; [Ben-Nun & Hoefler 2019], Section 2.5
    (Rabenseifner: reduce-scatter then gather):

    - binomial_tree: ceil(lg p) (a + n b + n g)
    - reduce_scatter_gather: recursive-halving reduce-scatter (lg p a + (p-1)/p n (b + g)) then
      binomial gather (lg p a + (p-1)/p n b); non-power-of-two p: MPICH fold (a + n b + n g)
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("reduce", algorithm, nbytes, p, link, rule)
    a, b, g, n = link.alpha_s, link.beta_s_per_byte, link.gamma_s_per_byte, float(nbytes)
    if algo == "binomial_tree":
        return _ceil_lg(p) * (a + n * b + n * g)
    q = pof2(p)
    return (_fold(n, p, link, reduce=True) + 2 * _lg(q) * a + (q - 1) / q * n * (2 * b + g))


# --- all-to-all ----------------------------------------------------------------------------------

def alltoall_s(nbytes: float, p: int, link: LinkLevel, algorithm: str = "auto", *,
               rule: str = "mpi") -> float:
    """All-to-all: ``nbytes`` is the total a rank sends (n/p to each rank, its own block included).

    The [Dryden] slides give no all-to-all; these are the same alpha-beta accounting applied to
    MPICH's algorithms ([Ben-Nun & Hoefler 2019], Section 5.2 notes fully connected
    layers "incur all-to-all communication"):

    - pairwise:  (p-1) (a + n/p b)  ((p-1) exchange steps of one block each)
    - scattered: (p-1) (a + n/p b)  (all sends posted at once; same cost with one port per rank)
    - bruck:     ceil(lg p) (a + n/2 b)  (each of ceil(lg p) rounds forwards about half the data)
    """
    if _trivial(nbytes, p):
        return 0.0
    algo = _resolve("alltoall", algorithm, nbytes, p, link, rule)
    a, b, n = link.alpha_s, link.beta_s_per_byte, float(nbytes)
    if algo == "bruck":
        return _ceil_lg(p) * (a + n / 2 * b)
    return (p - 1) * (a + n / p * b)


def alltoallv_s(send_bytes_max: float, recv_bytes_max: float, messages: int,
                link: LinkLevel) -> float:
    """Irregular exchange (``MPI_Alltoallv``, halo exchanges, reshards), costed for the busiest rank.

    ``send_bytes_max`` / ``recv_bytes_max``: the most bytes any rank sends / receives (its own
    block excluded); ``messages``: the most non-empty messages any rank sends or receives.
    Cost: ``messages a + max(send, recv) b`` (alpha-beta model of [Dryden];
    links are full duplex, so sending and receiving overlap).
    """
    for name, value in (("send_bytes_max", send_bytes_max), ("recv_bytes_max", recv_bytes_max)):
        if not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if isinstance(messages, bool) or not isinstance(messages, int) or messages < 0:
        raise ValueError(f"messages must be an integer >= 0, got {messages!r}")
    if messages == 0 or max(send_bytes_max, recv_bytes_max) == 0:
        return 0.0
    return messages * link.alpha_s + max(send_bytes_max, recv_bytes_max) * link.beta_s_per_byte


def sendrecv_s(nbytes: float, link: LinkLevel) -> float:
    """One ``MPI_Sendrecv`` of ``nbytes`` each way with one partner: ``a + n b`` (full duplex;
    the alpha-beta point-to-point cost of [Dryden])."""
    _check(nbytes, 1)
    if nbytes == 0:
        return 0.0
    return link.alpha_s + nbytes * link.beta_s_per_byte


#: Single-level cost function of each collective.
COST_FUNCTIONS = {
    "allreduce": allreduce_s,
    "reduce_scatter": reduce_scatter_s,
    "allgather": allgather_s,
    "broadcast": broadcast_s,
    "reduce": reduce_s,
    "alltoall": alltoall_s,
}

