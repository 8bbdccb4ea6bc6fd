"""The plan solvers (planner.solvers: the ILP, the series-parallel reduction, brute force, min-marginals,
dominated-candidate pruning, min-plus products) against each other and brute force on seeded random
instances of every graph shape the planner meets (tests/support/random_problems.py); the Lagrangian
relaxation of the memory limit (planner.solvers.lagrange, the pipeline's stage solve) is feasible and
within its gap."""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest

from networks.errors import DnnplanError
from planner.solvers import (Edge, Problem, evaluate, expand_choice, min_memory, prune_dominated, solve,
                             solve_brute, solve_fixed, solve_reduced)
from planner.solvers.brute import brute_tables
from planner.solvers import lagrange
from planner.solvers.ilp import solve_ilp
from planner.solvers.lagrange import solve_lagrange
from planner.solvers.marginals import min_marginals
from planner.solvers import reduce as reduce_module
from planner.solvers.reduce import Series, reduce_graph
from planner.solvers.minplus import min_plus, min_plus_dense

from tests.support.random_problems import SEEDS, _binding_limit, _check, _close, binding_problem, random_problem


# ---------------------------------------------------------------------------------------------
# tests


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
    problem = binding_problem(seed)
    if problem is None:
        pytest.skip("the unconstrained optimum already has the least memory")
    best = solve_brute(problem)
    assert best.objective > solve_brute(problem.with_memory_limit(None)).objective - 1e-12
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
    assert got.reduced_nodes >= 4 and "ilp" in got.solver and got.ilp
    assert _close(got.objective, solve_brute(problem).objective)


def test_an_assignment_says_whether_an_ilp_solved_any_of_it():
    """``Assignment.ilp``: set by the ILP and by every solver that hands it a part (a reduction's
    remainder, a binding limit), never by the reduction's dynamic programme or enumeration alone;
    ``make_plan`` reuses an unconstrained solve only without it (planner.problem.solve._reusable:
    which of equal optima HiGHS answers depends on its gap and time limit)."""
    from dataclasses import replace

    from planner.problem.solve import _reusable

    k4 = random_problem(3, "k4")
    assert solve_ilp(k4).ilp and solve_reduced(k4, enumerate_limit=0).ilp
    enumerated = solve_reduced(k4)  # its remainder enumerated
    assert not enumerated.ilp and "brute" in enumerated.solver
    chain = random_problem(0, "chain")
    assert not solve_reduced(chain).ilp and not solve_brute(chain).ilp
    binding = next(p for p in map(binding_problem, SEEDS) if p is not None)
    assert solve_reduced(binding).ilp  # the limit binds: the pruned problem goes to the ILP
    free = solve_reduced(chain)
    assert _reusable(free, "auto") and _reusable(free, "reduced") and not _reusable(free, "ilp")
    assert not _reusable(replace(free, ilp=True), "auto") and not _reusable(replace(free, status="feasible"), "auto")


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


def _random_problem(rng, n=6, k=4):
    cost = tuple(rng.uniform(1, 10, k) for _ in range(n))
    memory = tuple(rng.uniform(1, 10, k) for _ in range(n))
    workspace = tuple(rng.uniform(0, 2, k) for _ in range(n))
    edges = tuple(Edge(i, i + 1, rng.uniform(0, 3, (k, k))) for i in range(n - 1))
    return Problem(tuple(f"n{i}" for i in range(n)), cost, memory, workspace, edges, None)


@pytest.mark.parametrize("seed", range(15))
@pytest.mark.parametrize("hint", [None, 1e-3, 0.5, 1.0, 2.0, 1e3])
def test_the_lagrangian_solve_fits_and_is_within_its_proven_gap_of_the_optimum(seed, hint):
    """With or without a multiplier to start from (``hint``: times the one found without), near or
    far from the one the problem needs."""
    rng = np.random.default_rng(seed)
    free = _random_problem(rng)
    lo = min(evaluate(free, c)[1] for c in itertools.product(range(4), repeat=6))
    hi = evaluate(free, solve(free).choice)[1]
    problem = free.with_memory_limit(lo + (hi - lo) * rng.uniform(0.1, 0.9))
    got = solve_lagrange(problem)
    if hint is not None and got.lam:
        got = solve_lagrange(problem, hint=hint * got.lam)
    exact = solve(problem, "brute")
    cost, memory = evaluate(problem, got.choice)
    assert memory <= problem.memory_limit * (1 + 1e-9)
    assert cost >= exact.objective * (1 - 1e-9)
    assert cost - exact.objective <= got.gap * cost + 1e-9


@pytest.mark.parametrize("hint", [None, 1.0])
def test_the_lagrangian_solve_stops_when_only_the_workspace_keeps_it_from_fitting(hint):
    """The least-memory candidates need a workspace over the limit and no multiplier prices
    workspace: the bisection stops at once (before its multiplier overflows) with the only
    assignment that fits, found by the least-memory search."""
    problem = Problem(("a", "b"), (np.array([1.0, 5.0]),) * 2, (np.array([1.0, 3.0]),) * 2,
                      (np.array([10.0, 0.0]),) * 2, (), 6.5)
    calls = []
    original = lagrange._priced
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            lagrange._priced = lambda prob, lam: calls.append(lam) or original(prob, lam)
            got = solve_lagrange(problem, hint=hint)
        finally:
            lagrange._priced = original
    assert got.choice == (1, 1) and got.objective == 10.0
    assert len(calls) == 1 and all(np.isfinite(calls))


def test_the_lagrangian_solve_says_when_nothing_fits():
    problem = _random_problem(np.random.default_rng(0)).with_memory_limit(1.0)
    assert solve_lagrange(problem) is None


class _NoLines(lagrange._Lines):
    """Plain bisection: no crossing point is ever probed."""

    def meet(self, lo, hi):
        return None


@pytest.mark.parametrize("family", ["chain", "residual", "nested", "k4", "dense"])
def test_probing_where_the_lines_cross_finds_what_bisection_finds_in_fewer_probes(family, monkeypatch):
    """The relaxed optimum is the least of its minimisers' lines in the multiplier: probing where
    the bracket's two lines cross, and stopping once that probe is on both, finds the best fitting
    assignment bisecting to the end finds, a bound still below the optimum (it may differ from
    bisection's either way where a workspace, which no multiplier prices, decides what fits: the
    probes take other paths), in a fraction of the probes."""
    probes = {True: 0, False: 0}
    original = lagrange._priced
    seen = 0
    for seed in range(60):
        problem = binding_problem(seed, family)
        if problem is None:
            continue
        free = solve(problem.with_memory_limit(None))
        exact = solve(problem, "brute")
        got = {}
        for crossing in (True, False):
            if not crossing:
                monkeypatch.setattr(lagrange, "_Lines", _NoLines)

            def counted(prob, lam, crossing=crossing):
                probes[crossing] += 1
                return original(prob, lam)

            monkeypatch.setattr(lagrange, "_priced", counted)
            got[crossing] = lagrange.relax(problem, free.objective, rtol=0.0, free_choice=free.choice)
            monkeypatch.undo()
        assert got[True].cost == pytest.approx(got[False].cost, rel=1e-12), seed
        assert got[True].bound <= exact.objective * (1 + 1e-9) and got[True].cost >= exact.objective * (1 - 1e-9)
        seen += 1
    assert seen >= 20 and probes[True] * 2 < probes[False]


@pytest.mark.parametrize("seed", range(6))
def test_repeated_blocks_reduce_to_the_brute_force_optimum(seed, monkeypatch):
    """A chain of identical blocks (two branches between a block's input and output, as attention
    and its residual) eliminates the same matrices once per block: each repeat is taken from the
    first, computed once, and the reduced optimum is still brute force's."""
    computed = []
    monkeypatch.setattr(reduce_module, "min_plus", lambda a, c, b, *rest: computed.append(1) or min_plus(a, c, b))
    rng = np.random.default_rng(seed)
    ends, branch, blocks = 2, 4, 2  # the branches' eliminations cost least: taken first
    inner = [rng.random(ends), rng.random(branch), rng.random(branch), rng.random(ends)]
    into, out_of = rng.random((ends, branch)), rng.random((branch, ends))
    names, cost, edges = ["embed"], [rng.random(ends)], []
    for b in range(blocks):
        base = 4 * b + 1
        names += [f"in{b}", f"attention{b}", f"residual{b}", f"out{b}"]
        cost += inner
        edges += [Edge(base - 1, base, rng.random((ends, ends)) if b == 0 else np.eye(ends)),
                  Edge(base, base + 1, into), Edge(base, base + 2, into),
                  Edge(base + 1, base + 3, out_of), Edge(base + 2, base + 3, out_of)]
    names.append("head")
    cost.append(rng.random(ends))
    edges.append(Edge(len(names) - 2, len(names) - 1, rng.random((ends, ends))))
    zeros = tuple(np.zeros(len(c)) for c in cost)
    problem = Problem(tuple(names), tuple(cost), zeros, zeros, tuple(edges))
    series = [s for s in reduce_graph(problem).steps if isinstance(s, Series)]
    distinct = {(s.a.tobytes(), s.node_cost.tobytes(), s.b.tobytes()) for s in series}
    assert len(series) >= 2 * blocks and len(computed) == len(distinct) < len(series)
    assert _close(solve_reduced(problem).objective, solve_brute(problem).objective)
