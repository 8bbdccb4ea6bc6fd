"""A memory-bound problem by Lagrangian relaxation: fast, feasible, with a proven gap.

When the memory limit binds, :func:`.dp.solve_reduced` hands the whole problem to the ILP, which is
exact but slow on large stages. Memory is a sum over nodes plus the largest workspace, so pricing it
into the node costs, ``cost + lam * memory``, leaves a problem the graph reduction solves exactly
(unconstrained). A bisection on ``lam`` finds the cheapest assignment that fits, and every ``lam``
proves a lower bound on any assignment that fits::

    min over fitting x of cost(x)  >=  min_x [cost(x) + lam * sum memory(x)] - lam * (limit - W0)

with ``W0`` the largest workspace some node cannot avoid (each node's least). The answer carries
the gap between the best assignment found and the best bound (0: proved optimal).
"""

from __future__ import annotations

import time

import numpy as np

from .dp import solve_reduced
from .problem import Assignment, Problem, evaluate, fits, min_memory

ROUNDS = 40


def solve_lagrange(problem: Problem, rounds: int = ROUNDS, rtol: float = 1e-3) -> Assignment | None:
    """The best fitting assignment the bisection finds, with its proven relative gap; None when no
    assignment fits the limit."""
    start = time.perf_counter()
    limit = problem.memory_limit
    if limit is None:
        return solve_reduced(problem)
    need, least = min_memory(problem)
    if not fits(problem, need):
        return None
    free = solve_reduced(problem.with_memory_limit(None))
    if fits(problem, free.memory):
        return solve_reduced(problem)
    w0 = max(float(w.min()) for w in problem.node_workspace)
    best_choice, best_cost = tuple(least), evaluate(problem, least)[0]
    bound = free.objective  # lam = 0
    lo, hi = 0.0, max(free.objective, 1e-30) / max(need, 1.0)
    for _ in range(rounds):
        choice, relaxed = _priced(problem, hi)
        cost, memory = evaluate(problem, choice)
        bound = max(bound, relaxed - hi * (limit - w0))
        if fits(problem, memory):
            if cost < best_cost:
                best_choice, best_cost = choice, cost
            break
        lo, hi = hi, hi * 4
    for _ in range(rounds):
        if best_cost - bound <= rtol * best_cost:
            break
        lam = (lo + hi) / 2
        choice, relaxed = _priced(problem, lam)
        cost, memory = evaluate(problem, choice)
        bound = max(bound, relaxed - lam * (limit - w0))
        if fits(problem, memory):
            hi = lam
            if cost < best_cost:
                best_choice, best_cost = choice, cost
        else:
            lo = lam
    cost, memory = evaluate(problem, best_choice)
    gap = max(0.0, (cost - bound) / cost) if cost > 0 else 0.0
    return Assignment(tuple(best_choice), cost, memory, "lagrange(dp)", "optimal" if gap <= rtol else "feasible",
                      gap, time.perf_counter() - start, problem.num_nodes,
                      f"Lagrangian relaxation of the memory limit: gap {gap:.2e} to its bound")


def _priced(problem: Problem, lam: float) -> tuple[tuple[int, ...], float]:
    """The unconstrained optimum of cost + lam * memory, and that objective."""
    priced = Problem(problem.names, tuple(c + lam * m for c, m in zip(problem.node_cost, problem.node_memory)),
                     problem.node_memory, problem.node_workspace, problem.edges, None)
    got = solve_reduced(priced)
    return tuple(got.choice), float(got.objective)
