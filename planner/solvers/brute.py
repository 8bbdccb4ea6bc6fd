"""Exhaustive search: the reference the other solvers are checked against (tests only)."""

from __future__ import annotations

import math
import time

import numpy as np

from .problem import Assignment, Problem, evaluate, infeasible_error


def _axis(values: np.ndarray, node: int, ndim: int) -> np.ndarray:
    shape = [1] * ndim
    shape[node] = values.shape[0]
    return values.reshape(shape)


def brute_tables(problem: Problem) -> tuple[np.ndarray, np.ndarray]:
    """Objective and memory of every assignment, as arrays with one axis per node."""
    n = problem.num_nodes
    objective = np.zeros(problem.sizes)
    node_memory = np.zeros(problem.sizes)
    workspace = np.full(problem.sizes, -np.inf)
    for i in range(n):
        objective = objective + _axis(problem.node_cost[i], i, n)
        node_memory = node_memory + _axis(problem.node_memory[i], i, n)
        workspace = np.maximum(workspace, _axis(problem.node_workspace[i], i, n))
    for e in problem.edges:
        shape = [1] * n
        shape[e.src], shape[e.dst] = e.cost.shape
        cost = e.cost if e.src < e.dst else e.cost.T
        objective = objective + cost.reshape(shape)
    return objective, node_memory + workspace


def solve_brute(problem: Problem, limit: int = 10**6) -> Assignment:
    """Try every assignment; ties go to the lexicographically smallest choice.

    Refuses (``ValueError``) instances with more than ``limit`` assignments.
    """
    start = time.perf_counter()
    count = math.prod(problem.sizes)
    if count > limit:
        raise ValueError(f"brute force over {count} assignments exceeds the limit of {limit}")
    if problem.num_nodes == 0:
        return Assignment((), 0.0, 0.0, "brute", "optimal", 0.0, 0.0, 0, "empty problem")
    objective, memory = brute_tables(problem)
    if problem.memory_limit is not None:
        limit = problem.memory_limit
        ok = memory <= limit + 1e-9 * max(abs(limit), 1.0)  # the same slack as fits()
        if not ok.any():
            raise infeasible_error(problem)
        objective = np.where(ok, objective, np.inf)
    flat = int(np.argmin(objective))
    choice = tuple(int(c) for c in np.unravel_index(flat, problem.sizes))
    value, mem = evaluate(problem, choice)
    return Assignment(choice, value, mem, "brute", "optimal", 0.0, time.perf_counter() - start,
                      problem.num_nodes, f"enumerated {count} assignments")
