"""Seeded random instances for the solver tests (small graphs of every shape the planner meets)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from networks.errors import DnnplanError
from planner.solvers import (Edge, Problem, evaluate, expand_choice, min_memory, prune_dominated, solve,
                             solve_brute, solve_fixed, solve_ilp, solve_reduced)
from planner.solvers.brute import brute_tables
from planner.solvers.marginals import min_marginals
from planner.solvers.reduce import reduce_graph
from planner.solvers.minplus import min_plus, min_plus_dense

FAMILIES = ("chain", "residual", "nested", "parallel", "multi", "k4", "dense", "disconnected")


def _edges(family: str, n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    if family == "chain":
        return [(i, i + 1) for i in range(n - 1)]
    if family == "residual":  # chain with skip edges every 2-3 nodes (residual adds)
        edges = [(i, i + 1) for i in range(n - 1)]
        i = 0
        while i + 2 < n:
            step = int(rng.integers(2, 4))
            edges.append((i, min(i + step, n - 1)))
            i += step
        return edges
    if family == "nested":  # series-parallel by random series/parallel composition
        edges = [(0, 1)]
        count = 2
        while count < n:
            k = int(rng.integers(len(edges)))
            u, v = edges[k]
            if rng.random() < 0.5:  # series: subdivide u-v with a new node
                edges[k] = (u, count)
                edges.append((count, v))
            else:  # parallel: a new path u-new-v beside u-v
                edges += [(u, count), (count, v)]
            count += 1
        return _topological(edges, n)
    if family == "parallel":  # a chain or tree with duplicated edges
        edges = [(int(rng.integers(i)), i) for i in range(1, n)]
        return edges + [edges[int(rng.integers(len(edges)))] for _ in range(int(rng.integers(1, 4)))]
    if family == "multi":  # several sources and sinks
        edges = []
        for j in range(2, n):
            for i in rng.choice(j, size=min(j, int(rng.integers(1, 3))), replace=False):
                edges.append((int(i), j))
        return edges
    if family == "k4":  # a K4 (not series-parallel) with a tail
        m = min(n, 4)
        edges = [(i, j) for i in range(m) for j in range(i + 1, m)]
        return edges + [(i - 1, i) for i in range(m, n)]
    if family == "dense":  # random DAG, usually with crossings
        return [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.55]
    if family == "disconnected":
        cut = n // 2
        return [(i, i + 1) for i in range(cut - 1)] + [(i, j) for i in range(cut, n)
                                                       for j in range(i + 1, n) if rng.random() < 0.6]
    raise ValueError(family)


def _topological(edges: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """Renumber so every edge goes from a lower to a higher index."""
    indeg = {v: 0 for v in range(n)}
    out: dict[int, list[int]] = {v: [] for v in range(n)}
    for u, v in edges:
        indeg[v] += 1
        out[u].append(v)
    order, ready = [], [v for v in range(n) if indeg[v] == 0]
    while ready:
        u = ready.pop()
        order.append(u)
        for v in out[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    pos = {v: i for i, v in enumerate(order)}
    return [(pos[u], pos[v]) for u, v in edges]


def random_problem(seed: int, family: str | None = None, max_assignments: int = 200_000,
                   memory_limit: float | None = None) -> Problem:
    """A random problem: 2-8 nodes, 1-6 candidates each, at most ``max_assignments`` in all."""
    rng = np.random.default_rng(seed)
    family = family or FAMILIES[seed % len(FAMILIES)]
    n = int(rng.integers(4 if family in ("k4", "disconnected") else 2, 9))
    sizes = [int(rng.integers(1, 7)) for _ in range(n)]
    while math.prod(sizes) > max_assignments:
        sizes[int(np.argmax(sizes))] -= 1
    edges = [Edge(u, v, rng.random((sizes[u], sizes[v])) * rng.choice([0.5, 1.0, 3.0])
                  * (rng.random((sizes[u], sizes[v])) < 0.85))
             for u, v in _edges(family, n, rng)]
    return Problem(tuple(f"{family}{i}" for i in range(n)),
                   tuple(rng.random(k) for k in sizes),
                   tuple(rng.random(k) * 1e9 for k in sizes),
                   tuple(rng.random(k) * 2e8 for k in sizes),
                   tuple(edges), memory_limit)


# ---------------------------------------------------------------------------------------------
# tests

SEEDS = range(240)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _check(problem: Problem, got) -> None:
    objective, memory = evaluate(problem, got.choice)
    assert _close(objective, got.objective), (got.solver, objective, got.objective)
    assert memory == pytest.approx(got.memory, rel=1e-12)
    if problem.memory_limit is not None:
        assert memory <= problem.memory_limit * (1 + 1e-9)
    assert all(0 <= c < k for c, k in zip(got.choice, problem.sizes))


def _binding_limit(problem: Problem, seed: int) -> float | None:
    """A limit between the least memory and the unconstrained optimum's memory (None if equal)."""
    need, _ = min_memory(problem)
    free = solve_brute(problem).memory
    if free <= need * (1 + 1e-6):
        return None
    return need + np.random.default_rng(seed + 10_000).uniform(0.05, 0.95) * (free - need)


@pytest.mark.parametrize("seed", SEEDS)
def test_ilp_reduced_brute_agree(seed):
    problem = random_problem(seed)
    best = solve_brute(problem)
    for got in (solve_ilp(problem), solve_reduced(problem),
                solve_reduced(problem, enumerate_limit=0), solve(problem)):
        _check(problem, got)
        assert got.status == "optimal"
        assert _close(got.objective, best.objective), (got.solver, got.detail)


@pytest.mark.parametrize("seed", SEEDS)
def test_binding_memory_limit_agree(seed):
    free = random_problem(seed)
    limit = _binding_limit(free, seed)
    if limit is None:
        pytest.skip("the unconstrained optimum already has the least memory")
    problem = free.with_memory_limit(limit)
    best = solve_brute(problem)
    assert best.objective > solve_brute(free).objective - 1e-12
    for got in (solve_ilp(problem), solve_reduced(problem), solve(problem, "ilp"), solve(problem)):
        _check(problem, got)
        assert _close(got.objective, best.objective), (got.solver, got.detail)
        assert got.status == "optimal", (got.solver, got.detail)


def test_enough_instances_bind_memory():
    binding = sum(_binding_limit(random_problem(s), s) is not None for s in SEEDS)
    assert binding >= 150


@pytest.mark.parametrize("seed", range(0, 240, 7))
def test_non_binding_limit_uses_reduction(seed):
    free = random_problem(seed)
    got = solve_reduced(free.with_memory_limit(solve_brute(free).memory * 1.01))
    assert "optimal under the limit too" in got.detail
    assert _close(got.objective, solve_brute(free).objective)


def test_binding_limit_is_reported():
    for seed in SEEDS:
        limit = _binding_limit(random_problem(seed), seed)
        if limit is not None:
            got = solve_reduced(random_problem(seed, memory_limit=limit))
            assert "memory limit binding" in got.detail and got.solver.startswith("reduced+ilp")
            return
    pytest.fail("no binding instance")


@pytest.mark.parametrize("seed", range(0, 240, 3))
def test_min_marginals_against_enumeration(seed):
    problem = random_problem(seed, max_assignments=20_000)
    marg = min_marginals(problem)
    if marg is None:
        assert reduce_graph(problem).edges  # only where no elimination order was found
        return
    objective, _ = brute_tables(problem)
    for v, k in enumerate(problem.sizes):
        axes = tuple(a for a in range(problem.num_nodes) if a != v)
        truth = objective.min(axis=axes) if axes else objective
        assert np.allclose(marg[v], truth, rtol=1e-9, atol=1e-12), (seed, v)


def test_the_bound_rules_candidates_out_and_the_rounds_prove_the_optimum():
    ruled_out = proved_early = 0
    for seed in SEEDS:
        free = random_problem(seed, family="residual")
        limit = _binding_limit(free, seed)
        if limit is None:
            continue
        got = solve_fixed(free.with_memory_limit(limit), max_labels=0)  # the ILP rounds, not the fronts
        kept = [int(n) for n in re.findall(r"(\d+) candidates kept of", got.detail)]
        ruled_out += bool(kept) and min(kept) < sum(free.sizes)
        proved_early += "target +5%" in got.detail and "target +100%" not in got.detail
        assert got.status == "optimal" and _close(got.objective, solve_brute(free.with_memory_limit(limit)).objective)
    assert ruled_out >= 10 and proved_early >= 1


@pytest.mark.parametrize("family", ["chain", "residual", "nested", "parallel"])
def test_series_parallel_reduces_to_one_node(family):
    for seed in range(30):
        problem = random_problem(seed, family)
        assert solve_reduced(problem).reduced_nodes == 1


def test_k4_leaves_a_remainder_for_the_ilp():
    problem = random_problem(3, "k4")
    got = solve_reduced(problem, enumerate_limit=0)
    assert got.reduced_nodes >= 4 and "ilp" in got.solver
    assert _close(got.objective, solve_brute(problem).objective)


@pytest.mark.parametrize("method", ["reduced", "ilp", "brute"])
@pytest.mark.parametrize("seed", range(0, 240, 17))
def test_infeasible_memory_names_the_minimum(method, seed):
    free = random_problem(seed)
    need, choice = min_memory(free)
    assert _close(need, evaluate(free, choice)[1])
    brute_memory = solve_brute(free.with_memory_limit(need * (1 + 1e-12))).memory
    assert brute_memory <= need * (1 + 1e-9)  # the minimum really is attainable
    with pytest.raises(DnnplanError) as err:
        solve(free.with_memory_limit(need * 0.99), method)
    assert f"{need:.6g}" in str(err.value) and "GiB" in str(err.value)


def test_min_memory_is_the_true_minimum():
    for seed in range(60):
        problem = random_problem(seed, max_assignments=50_000)
        _, memory = brute_tables(problem)
        assert _close(min_memory(problem)[0], float(memory.min()))


def _with_dominated(seed: int) -> Problem:
    """A random problem where every node also gets worse copies of some candidates."""
    base = random_problem(seed, max_assignments=3_000)
    rng = np.random.default_rng(seed)
    extra = [int(rng.integers(0, 3)) for _ in base.sizes]
    src = [rng.integers(0, k, size=x) for k, x in zip(base.sizes, extra)]
    bump = (lambda v, s: np.concatenate([v, v[s] + rng.random(len(s)) * rng.integers(0, 2, len(s))]))
    edges = []
    for e in base.edges:
        m = e.cost
        m = np.concatenate([m, m[src[e.src]] + rng.random((len(src[e.src]), m.shape[1]))], axis=0)
        m = np.concatenate([m, m[:, src[e.dst]] + rng.random((m.shape[0], len(src[e.dst])))], axis=1)
        edges.append(Edge(e.src, e.dst, m))
    return Problem(base.names, tuple(bump(c, s) for c, s in zip(base.node_cost, src)),
                   tuple(bump(c, s) for c, s in zip(base.node_memory, src)),
                   tuple(bump(c, s) for c, s in zip(base.node_workspace, src)),
                   tuple(edges), None)


@pytest.mark.parametrize("seed", range(80))
def test_prune_dominated_keeps_the_optimum(seed):
    problem = _with_dominated(seed)
    pruned, kept = prune_dominated(problem)
    assert sum(pruned.sizes) <= sum(problem.sizes)
    for limit in (None, _binding_limit(problem, seed)):
        full = problem.with_memory_limit(limit)
        best = solve_brute(full)
        got = solve_brute(pruned.with_memory_limit(limit))
        assert _close(got.objective, best.objective)
        choice = expand_choice(kept, got.choice)
        assert _close(evaluate(full, choice)[0], best.objective)


def test_prune_drops_exact_duplicates_keeping_the_lower_index():
    problem = Problem(("a", "b"), (np.array([1.0, 1.0, 2.0]), np.array([0.0, 0.0])),
                      (np.zeros(3), np.zeros(2)), (np.zeros(3), np.zeros(2)),
                      (Edge(0, 1, np.array([[0.0, 1.0], [0.0, 1.0], [0.0, 0.5]])),), None)
    pruned, kept = prune_dominated(problem)
    # pass 1: a1 duplicates a0 (dropped, lower index kept), b1 is worse than b0 on the edge;
    # pass 2: with only b0 left, a2 is a0 at a higher cost
    assert [list(k) for k in kept] == [[0], [0]]
    assert pruned.sizes == (1, 1)


def test_dominated_pruning_is_exercised():
    assert sum(sum(prune_dominated(_with_dominated(s))[0].sizes) < sum(_with_dominated(s).sizes)
               for s in range(80)) >= 40


def test_ilp_reports_solver_status_and_time():
    problem = random_problem(5)
    got = solve_ilp(problem, time_limit_s=30, gap=None)
    assert got.solver in ("ilp-highs", "ilp-cbc") and got.status == "optimal"
    assert got.gap is not None and got.gap <= 1e-9 and got.time_s > 0
    assert "variables" in got.detail
    cbc = solve_ilp(problem, solver="cbc")
    assert cbc.solver == "ilp-cbc" and _close(cbc.objective, got.objective)


def test_empty_candidate_list_is_a_user_error():
    with pytest.raises(DnnplanError, match="no candidate"):
        Problem(("x",), (np.zeros(0),), (np.zeros(0),), (np.zeros(0),), (), None)


def test_problem_arrays_are_read_only():
    problem = random_problem(1)
    with pytest.raises(ValueError):
        problem.node_cost[0][0] = 5.0


def test_brute_refuses_big_instances():
    with pytest.raises(ValueError):
        solve_brute(random_problem(2), limit=1)


@pytest.mark.parametrize("seed", range(12))
def test_pruned_min_plus_equals_dense(seed):
    rng = np.random.default_rng(seed)
    i, j, k = (int(x) for x in rng.integers(1, 90, 3))
    a, c, b = rng.random((i, j)), rng.random(j) * rng.choice([0.0, 1.0, 5.0]), rng.random((j, k))
    if seed % 3 == 0:  # ties everywhere
        a, b = np.round(a, 1), np.round(b, 1)
    if seed % 4 == 1:
        np.fill_diagonal(b, 0.0)
    assert np.array_equal(min_plus(a, c, b), min_plus_dense(a, c, b))
