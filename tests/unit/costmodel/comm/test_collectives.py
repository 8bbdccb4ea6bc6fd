"""Collective costs: hand-computed values from the slide formulas, edge cases, selection, hierarchy.

Expected values are written out as arithmetic from Dryden, "Parallelism in Training Deep Neural
Networks" (lecture slides, the collectives part) and Ben-Nun & Hoefler, "Demystifying Parallel and
Distributed Deep Learning" (ACM Computing Surveys 2019), Section 2.5, never by calling the code
under test.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from costmodel.comm.groups import collective_s
from costmodel.comm.collectives import (ALGORITHMS, COST_FUNCTIONS, MPICH_THRESHOLDS, allgather_s, allreduce_s,
                                        alltoall_s, alltoallv_s, broadcast_s, choose_algorithm, reduce_s,
                                        reduce_scatter_s, sendrecv_s)
from costmodel.machine.model import DeviceSpec, LinkLevel, Machine
from networks.errors import DnnplanError

# Round numbers so the arithmetic below is easy to check by hand.
A, B, G = 2e-6, 1e-9, 1e-10          # 2 us per message, 1 GB/s, 10 GB/s reduction
LINK = LinkLevel("test", A, B, G)
INTRA = LinkLevel("intra", 1e-6, 1e-11, 1e-12)
INTER = LinkLevel("inter", 5e-6, 4e-11, 1e-12)
MB = 1_000_000


def close(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0)


# --- allreduce, each algorithm at (p, n) points ----------------------------------------------------

@pytest.mark.parametrize("p,n", [(2, 1000), (8, MB), (64, 4 * MB)])
def test_allreduce_power_of_two_matches_slides(p, n):
    lg = {2: 1, 8: 3, 64: 6}[p]
    ring = 2 * (p - 1) * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G
    rd = lg * A + lg * n * B + lg * n * G
    rabe = 2 * lg * A + 2 * (p - 1) / p * n * B + (p - 1) / p * n * G
    tree = 2 * lg * A + 2 * lg * n * B + lg * n * G
    ps = 2 * p * A + 2 * p * n * B + p * n * G
    assert close(allreduce_s(n, p, LINK, "ring"), ring)
    assert close(allreduce_s(n, p, LINK, "recursive_doubling"), rd)
    assert close(allreduce_s(n, p, LINK, "butterfly"), rd)
    assert close(allreduce_s(n, p, LINK, "rabenseifner"), rabe)
    assert close(allreduce_s(n, p, LINK, "binomial_tree"), tree)
    assert close(allreduce_s(n, p, LINK, "parameter_server"), ps)


def test_allreduce_8_ranks_1mb_ring_in_numbers():
    # 2*7*2us + 2*(7/8)*1e6*1ns + (7/8)*1e6*0.1ns = 28us + 1750us + 87.5us
    assert close(allreduce_s(MB, 8, LINK, "ring"), 28e-6 + 1750e-6 + 87.5e-6)


def test_allreduce_non_power_of_two_adds_mpich_fold_and_unfold():
    p, n = 6, MB          # p' = 4, lg p' = 2
    fold = A + n * B + n * G
    unfold = A + n * B
    rd = fold + 2 * (A + n * B + n * G) + unfold
    rabe = fold + 2 * 2 * A + 2 * 3 / 4 * n * B + 3 / 4 * n * G + unfold
    assert close(allreduce_s(n, p, LINK, "recursive_doubling"), rd)
    assert close(allreduce_s(n, p, LINK, "rabenseifner"), rabe)
    # binomial tree and butterfly: ceil(lg 6) = 3 rounds
    assert close(allreduce_s(n, p, LINK, "binomial_tree"), 6 * A + 6 * n * B + 3 * n * G)
    assert close(allreduce_s(n, p, LINK, "butterfly"), 3 * (A + n * B + n * G))
    # ring has no power-of-two requirement
    assert close(allreduce_s(n, p, LINK, "ring"), 10 * A + 10 / 6 * n * B + 5 / 6 * n * G)


# --- the other collectives -------------------------------------------------------------------------

@pytest.mark.parametrize("p,lg,n", [(4, 2, 4096), (16, 4, MB)])
def test_reduce_scatter_allgather_power_of_two(p, lg, n):
    f = (p - 1) / p
    assert close(reduce_scatter_s(n, p, LINK, "ring"), (p - 1) * A + f * n * B + f * n * G)
    assert close(reduce_scatter_s(n, p, LINK, "recursive_halving"), lg * A + f * n * B + f * n * G)
    assert close(allgather_s(n, p, LINK, "ring"), (p - 1) * A + f * n * B)
    assert close(allgather_s(n, p, LINK, "recursive_doubling"), lg * A + f * n * B)
    assert close(allgather_s(n, p, LINK, "bruck"), lg * A + f * n * B)


def test_reduce_scatter_recursive_halving_non_power_of_two():
    p, n = 12, 1200       # p' = 8: fold, 3 halving steps on 8 ranks, send 100 bytes back
    expected = (A + n * B + n * G) + 3 * A + 7 / 8 * n * (B + G) + (A + 100 * B)
    assert close(reduce_scatter_s(n, p, LINK, "recursive_halving"), expected)


def test_allgather_non_power_of_two():
    assert close(allgather_s(6000, 6, LINK, "bruck"), 3 * A + 5000 * B)
    assert close(allgather_s(6000, 6, LINK, "recursive_doubling"), 5 * A + 5000 * B)


@pytest.mark.parametrize("p,k,n", [(8, 3, MB), (5, 3, 1000)])
def test_broadcast(p, k, n):
    f = (p - 1) / p
    assert close(broadcast_s(n, p, LINK, "binomial_tree"), k * (A + n * B))
    assert close(broadcast_s(n, p, LINK, "scatter_doubling_allgather"), 2 * k * A + 2 * f * n * B)
    assert close(broadcast_s(n, p, LINK, "scatter_ring_allgather"),
                 (k + p - 1) * A + 2 * f * n * B)


def test_reduce():
    n = MB
    assert close(reduce_s(n, 8, LINK, "binomial_tree"), 3 * (A + n * B + n * G))
    assert close(reduce_s(n, 8, LINK, "reduce_scatter_gather"),
                 3 * A + 7 / 8 * n * (B + G) + 3 * A + 7 / 8 * n * B)
    # p = 6: fold onto p' = 4 first
    assert close(reduce_s(n, 6, LINK, "reduce_scatter_gather"),
                 (A + n * B + n * G) + 4 * A + 3 / 4 * n * (2 * B + G))


def test_alltoall_and_point_to_point():
    n = 8000              # 1000 bytes to each of 8 ranks
    assert close(alltoall_s(n, 8, LINK, "pairwise"), 7 * (A + 1000 * B))
    assert close(alltoall_s(n, 8, LINK, "scattered"), 7 * (A + 1000 * B))
    assert close(alltoall_s(n, 8, LINK, "bruck"), 3 * (A + 4000 * B))
    assert close(alltoallv_s(3000, 5000, 4, LINK), 4 * A + 5000 * B)
    assert close(sendrecv_s(1234, LINK), A + 1234 * B)


# --- zero cases, monotonicity ----------------------------------------------------------------------

@pytest.mark.parametrize("collective", sorted(ALGORITHMS))
def test_one_rank_or_no_bytes_is_exactly_zero(collective):
    cost = COST_FUNCTIONS[collective]
    for algo in ("auto",) + ALGORITHMS[collective]:
        assert cost(MB, 1, LINK, algo) == 0.0
        assert cost(0, 64, LINK, algo) == 0.0
        assert collective_s(collective, 0, 8, 4, (INTRA, INTER), algo) == 0.0
        assert collective_s(collective, MB, 1, 1, (INTRA, INTER), algo) == 0.0
    assert sendrecv_s(0, LINK) == 0.0
    assert alltoallv_s(0, 0, 5, LINK) == 0.0
    assert alltoallv_s(100, 100, 0, LINK) == 0.0


@settings(max_examples=200, deadline=None)
@given(collective=st.sampled_from(sorted(ALGORITHMS)), p=st.integers(2, 300),
       n=st.integers(1, 10**9), extra=st.integers(1, 10**9), data=st.data())
def test_monotone_in_bytes(collective, p, n, extra, data):
    algo = data.draw(st.sampled_from(ALGORITHMS[collective]))
    cost = COST_FUNCTIONS[collective]
    assert 0 < cost(n, p, LINK, algo) < cost(n + extra, p, LINK, algo)


@settings(max_examples=100, deadline=None)
@given(collective=st.sampled_from(sorted(ALGORITHMS)), p=st.integers(2, 300),
       n=st.integers(1, 10**9), rule=st.sampled_from(["mpi", "cheapest"]))
def test_auto_costs_what_the_chosen_algorithm_costs(collective, p, n, rule):
    cost = COST_FUNCTIONS[collective]
    chosen = choose_algorithm(collective, n, p, LINK, rule)
    assert chosen in ALGORITHMS[collective]
    assert cost(n, p, LINK, rule=rule) == cost(n, p, LINK, chosen)
    if rule == "cheapest":
        assert all(cost(n, p, LINK, chosen) <= cost(n, p, LINK, a) for a in ALGORITHMS[collective])


# --- selection -------------------------------------------------------------------------------------

def test_ring_beats_recursive_doubling_only_for_large_messages():
    p = 64
    assert allreduce_s(8, p, LINK, "ring") > allreduce_s(8, p, LINK, "recursive_doubling")
    assert allreduce_s(100 * MB, p, LINK, "ring") < allreduce_s(100 * MB, p, LINK, "recursive_doubling")
    assert choose_algorithm("allreduce", 8, p, LINK, "cheapest") == "recursive_doubling"
    assert choose_algorithm("allreduce", 100 * MB, p, LINK, "cheapest") != "recursive_doubling"
    assert choose_algorithm("allgather", 64, 60, LINK, "cheapest") == "bruck"


def test_mpich_rule_thresholds():
    assert MPICH_THRESHOLDS["MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE"] == 2048
    assert choose_algorithm("allreduce", 2048, 16, LINK) == "recursive_doubling"
    assert choose_algorithm("allreduce", 2052, 16, LINK) == "rabenseifner"
    assert choose_algorithm("allgather", 512 * 1024 - 1, 16, LINK) == "recursive_doubling"
    assert choose_algorithm("allgather", 512 * 1024, 16, LINK) == "ring"
    assert choose_algorithm("allgather", 1000, 12, LINK) == "bruck"
    assert choose_algorithm("allgather", 100_000, 12, LINK) == "ring"
    assert choose_algorithm("broadcast", 12 * 1024 - 1, 64, LINK) == "binomial_tree"
    assert choose_algorithm("broadcast", MB, 4, LINK) == "binomial_tree"
    assert choose_algorithm("broadcast", 12 * 1024, 64, LINK) == "scatter_doubling_allgather"
    assert choose_algorithm("broadcast", 12 * 1024, 48, LINK) == "scatter_ring_allgather"
    assert choose_algorithm("broadcast", MB, 64, LINK) == "scatter_ring_allgather"
    assert choose_algorithm("reduce_scatter", 1000, 8, LINK) == "recursive_halving"
    assert choose_algorithm("reduce_scatter", MB, 8, LINK) == "ring"
    assert choose_algorithm("reduce", 1000, 8, LINK) == "binomial_tree"
    assert choose_algorithm("reduce", MB, 8, LINK) == "reduce_scatter_gather"
    assert choose_algorithm("alltoall", 256 * 8, 8, LINK) == "bruck"
    assert choose_algorithm("alltoall", 256 * 4, 4, LINK) == "scattered"
    assert choose_algorithm("alltoall", 40_000 * 8, 8, LINK) == "pairwise"


def test_unknown_names_are_user_errors():
    with pytest.raises(DnnplanError, match="allreduce algorithm 'rign'"):
        allreduce_s(MB, 4, LINK, "rign")
    with pytest.raises(DnnplanError, match="collective 'allreduse'"):
        choose_algorithm("allreduse", MB, 4, LINK)
    with pytest.raises(DnnplanError, match="rule 'fastest'"):
        choose_algorithm("allreduce", MB, 4, LINK, rule="fastest")
    with pytest.raises(ValueError):
        allreduce_s(-1, 4, LINK)


# --- hierarchical ----------------------------------------------------------------------------------

def _machine() -> Machine:
    device = DeviceSpec("d", {"float32": 1e12}, 1e12, 2**30)
    return Machine("m", 8, None, device, INTRA, INTER)


def test_group_inside_one_node_uses_only_the_intra_link():
    m = _machine()
    ranks = list(range(8, 16))
    q, nodes = m.group_span(ranks)
    assert (q, nodes) == (8, 1) and m.link_for(ranks) is INTRA
    for algo in ALGORITHMS["allreduce"]:
        assert collective_s("allreduce", MB, q, nodes, m, algo) == allreduce_s(MB, 8, INTRA, algo)
    # an unusable inter link changes nothing inside a node
    slow = LinkLevel("slow", 1.0, 1.0, 1.0)
    assert collective_s("allgather", MB, 8, 1, (INTRA, slow)) == allgather_s(MB, 8, INTRA)


def test_hierarchical_allreduce_formula():
    n, q, nodes = 64 * MB, 8, 4
    expected = (reduce_scatter_s(n, q, INTRA, "ring") + allreduce_s(n / q, nodes, INTER, "ring")
                + allgather_s(n, q, INTRA, "ring"))
    # at 64 MB MPICH picks pairwise reduce-scatter and ring allgather inside the node
    assert close(collective_s("allreduce", n, q, nodes, (INTRA, INTER), "ring"), expected)
    # one rank per node: the flat formula on the inter link
    assert collective_s("allreduce", n, 1, 4, (INTRA, INTER), "ring") == allreduce_s(n, 4, INTER, "ring")


@pytest.mark.parametrize("collective", sorted(ALGORITHMS))
@pytest.mark.parametrize("n", [64, MB, 256 * MB])
def test_spanning_nodes_costs_more_than_one_node(collective, n):
    inside = collective_s(collective, n, 8, 1, (INTRA, INTER))
    across = collective_s(collective, n, 4, 2, (INTRA, INTER))
    spread = collective_s(collective, n, 1, 8, (INTRA, INTER))
    assert inside < across and inside < spread


def test_hierarchical_alltoall_charges_off_node_blocks_to_inter():
    n, q, nodes = 8 * MB, 4, 2     # 1 MB per destination, 8 ranks
    expected = 3 * (INTRA.alpha_s + MB * INTRA.beta_s_per_byte) + \
        4 * (INTER.alpha_s + MB * INTER.beta_s_per_byte)
    assert close(collective_s("alltoall", n / 2, q, nodes, (INTRA, INTER), "pairwise"),
                 3 * (INTRA.alpha_s + MB / 2 * INTRA.beta_s_per_byte)
                 + 4 * (INTER.alpha_s + MB / 2 * INTER.beta_s_per_byte))
    assert close(collective_s("alltoall", n, q, nodes, (INTRA, INTER), "pairwise"), expected)
