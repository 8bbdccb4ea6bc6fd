"""Seeded random instances for the solver tests (small graphs of every shape the planner meets), and
the checks the solver tests (tests/unit/planner/solvers/test_solvers.py, test_pareto.py) hold each answer to."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.solvers import Edge, Problem, evaluate, min_memory, solve_brute

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


def binding_problem(seed: int, family: str | None = None) -> Problem | None:
    """``random_problem(seed, family)`` under a limit that binds (:func:`_binding_limit`); None where
    the unconstrained optimum already has the least memory."""
    free = random_problem(seed, family)
    limit = _binding_limit(free, seed)
    return None if limit is None else free.with_memory_limit(limit)
