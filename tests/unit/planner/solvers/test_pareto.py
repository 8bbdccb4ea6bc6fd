"""Graph reduction over Pareto fronts (planner.solvers.pareto) held to brute force under binding limits."""

from __future__ import annotations

import numpy as np
import pytest

from planner.solvers import Edge, Problem, evaluate, min_memory, solve_brute, solve_fixed
from planner.solvers.pareto import solve_pareto
from planner.solvers.reduce import reduce_graph

from tests.support.random_problems import SEEDS, _check, _close, binding_problem


@pytest.mark.parametrize("seed", SEEDS)
def test_pareto_finds_the_brute_force_optimum(seed):
    problem = binding_problem(seed)
    if problem is None:
        pytest.skip("the unconstrained optimum already has the least memory")
    need, least = min_memory(problem)
    upper = evaluate(problem, least)[0]  # a fitting assignment's cost: the solver's only hint
    got = solve_pareto(problem, upper)
    if reduce_graph(problem).edges:
        assert got is None  # a K4 remainder: left to the ILP
        return
    assert got is not None and got.status == "optimal"
    _check(problem, got)
    assert _close(got.objective, solve_brute(problem).objective), got.detail


def test_pareto_is_exercised_on_most_binding_instances():
    solved = sum(solve_pareto(p, evaluate(p, min_memory(p)[1])[0]) is not None
                 for p in (binding_problem(s) for s in SEEDS) if p is not None)
    assert solved >= 100


@pytest.mark.parametrize("seed", range(0, 240, 5))
def test_negative_edge_costs_turn_cost_pruning_off_and_stay_exact(seed):
    problem = binding_problem(seed, "chain")
    if problem is None:
        pytest.skip("not binding")
    shifted = Problem(problem.names, problem.node_cost, problem.node_memory, problem.node_workspace,
                      tuple(Edge(e.src, e.dst, e.cost - 0.3) for e in problem.edges), problem.memory_limit)
    got = solve_pareto(shifted, evaluate(shifted, min_memory(shifted)[1])[0])
    assert got is not None and _close(got.objective, solve_brute(shifted).objective)


def test_too_many_labels_gives_up():
    for seed in SEEDS:
        problem = binding_problem(seed, "chain")
        if problem is not None and problem.num_nodes >= 4:
            upper = evaluate(problem, min_memory(problem)[1])[0] * 10
            assert solve_pareto(problem, upper) is not None
            assert solve_pareto(problem, upper, max_labels=1) is None
            return
    pytest.fail("no binding chain")


def test_solve_fixed_takes_the_fronts_and_falls_back_to_the_ilp_rounds():
    fronts = rounds = 0
    for seed in SEEDS:
        problem = binding_problem(seed, "residual")
        if problem is None:
            continue
        best = solve_brute(problem).objective
        for max_labels in (None, 0):
            got = solve_fixed(problem) if max_labels is None else solve_fixed(problem, max_labels=max_labels)
            assert got.status == "optimal" and _close(got.objective, best)
            fronts += "Pareto fronts" in got.detail
            rounds += "target +" in got.detail
    assert fronts >= 10 and rounds >= 10


def test_identical_blocks_keep_fronts_small():
    """A chain of 40 identical 3-candidate nodes: memories repeat, so the fronts stay near the
    number of distinct sums, not 3^40 assignments."""
    k, n = 3, 40
    cost, mem, ws = np.array([1.0, 2.0, 4.0]), np.array([4.0, 2.0, 1.0]) * 1e9, np.zeros(3)
    edge = np.where(np.eye(k) > 0, 0.0, 0.1)
    problem = Problem(tuple(f"n{i}" for i in range(n)), (cost,) * n, (mem,) * n, (ws,) * n,
                      tuple(Edge(i, i + 1, edge) for i in range(n - 1)), 100e9)
    got = solve_pareto(problem, evaluate(problem, (2,) * n)[0])
    assert got is not None and got.status == "optimal"
    assert evaluate(problem, got.choice)[1] <= 100e9
    # the exact optimum by a dynamic programme over (layout, gigabytes used): memories are whole GB
    units = (mem / 1e9).astype(int)
    best = {(j, int(units[j])): float(cost[j]) for j in range(k)}
    for _ in range(n - 1):
        nxt: dict[tuple[int, int], float] = {}
        for (i, used), c in best.items():
            for j in range(k):
                key = (j, used + int(units[j]))
                if key[1] <= 100:
                    nxt[key] = min(nxt.get(key, np.inf), c + edge[i, j] + cost[j])
        best = nxt
    assert _close(got.objective, min(best.values()))
