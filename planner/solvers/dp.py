"""The fast exact path: graph reduction, an exact solve of what remains, then un-reduction.

What remains after :func:`reduce_graph` is solved per connected component: a lone node by argmin
(this is the dynamic programme's answer for chains and series-parallel graphs), a small component by
enumeration, anything else by the ILP on the reduced graph. The memory limit is not part of the
reduction; see :func:`solve_reduced` for how it is honoured exactly.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .brute import solve_brute
from .budget import Budget
from .problem import Assignment, Edge, Problem, check_feasible, evaluate, fits
from .prune import expand_choice, prune_dominated
from .reduce import Reduction, reduce_graph, unreduce


def _components(n: int, edges) -> list[list[int]]:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v, _ in edges:
        parent[find(u)] = find(v)
    groups: dict[int, list[int]] = {}
    for v in range(n):
        groups.setdefault(find(v), []).append(v)
    return list(groups.values())


def solve_remainder(red: Reduction, time_limit_s: float | None, gap: float | None,
                    enumerate_limit: int, budget: Budget | None = None
                    ) -> tuple[list[int], str, str, float | None, list[str], bool]:
    """Choice for the nodes left by reduction: ``(choice, solver, status, gap, notes, by_ilp)``,
    ``by_ilp`` whether an ILP solved a component."""
    choice = [0] * len(red.alive)
    solvers, status, worst_gap, notes, by_ilp = {"dp"}, "optimal", 0.0, [], False
    for comp in _components(len(red.alive), red.edges):
        if len(comp) == 1:
            choice[comp[0]] = int(np.argmin(red.node_cost[comp[0]]))
            continue
        local = {v: i for i, v in enumerate(comp)}
        sub = Problem(tuple(f"n{red.alive[v]}" for v in comp),
                      tuple(red.node_cost[v] for v in comp),
                      tuple(np.zeros_like(red.node_cost[v]) for v in comp),
                      tuple(np.zeros_like(red.node_cost[v]) for v in comp),
                      tuple(Edge(local[u], local[v], m) for u, v, m in red.edges if u in local),
                      None)
        if math.prod(sub.sizes) <= enumerate_limit:
            got = solve_brute(sub, limit=enumerate_limit)
            solvers.add("brute")
            notes.append(f"a {len(comp)}-node remainder enumerated")
        else:
            from .ilp import solve_ilp  # noqa: PLC0415 - deferred (the package's docstring)

            got = solve_ilp(sub, time_limit_s=time_limit_s, gap=gap, budget=budget)
            solvers.add(got.solver)
            by_ilp = True
            notes.append(f"a {len(comp)}-node remainder solved by ILP ({got.status}, "
                         f"gap {got.gap})")
            if got.status != "optimal":
                status = got.status
            worst_gap = None if got.gap is None or worst_gap is None else max(worst_gap, got.gap)
        for v, c in zip(comp, got.choice):
            choice[v] = c
    return choice, "+".join(sorted(solvers)), status, worst_gap, notes, by_ilp


def solve_reduced(problem: Problem, time_limit_s: float | None = None, gap: float | None = None,
                  enumerate_limit: int = 20_000, workers: int = 1, budget: Budget | None = None) -> Assignment:
    """Exact solve by graph reduction (see the module docstring of :mod:`.reduce`).

    Memory: the reduction optimises the unconstrained objective. If that optimum fits the limit it
    is optimal under the limit too (the constraint only removes assignments). If it does not, the
    constraint binds and the full problem, with dominated candidates pruned, goes to the ILP.
    ``time_limit_s`` and ``gap`` are passed to any ILP solve; ``workers`` threads run the min-plus
    kernel; remainders of at most ``enumerate_limit`` assignments are enumerated; ``budget`` bounds
    any ILP solve (:mod:`.budget`).
    """
    start = time.perf_counter()
    check_feasible(problem)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            red = reduce_graph(problem, pool, workers)
    else:
        red = reduce_graph(problem)
    reduced_at = time.perf_counter()
    alive_choice, solver, status, achieved, notes, by_ilp = solve_remainder(
        red, time_limit_s, gap, enumerate_limit, budget)
    choice = unreduce(red, alive_choice)
    objective, memory = evaluate(problem, choice)
    detail = (f"reduced {problem.num_nodes} nodes to {len(red.alive)} ({red.summary()}) in "
              f"{reduced_at - start:.3f} s" + "".join(f"; {n}" for n in notes))
    if problem.memory_limit is None:
        return Assignment(choice, objective, memory, f"reduced({solver})", status, achieved,
                          time.perf_counter() - start, len(red.alive), detail, ilp=by_ilp)
    if fits(problem, memory):
        detail += (f"; the unconstrained optimum needs {memory:.6g} bytes <= limit "
                   f"{problem.memory_limit:.6g}, so it is optimal under the limit too")
        return Assignment(choice, objective, memory, f"reduced({solver})", status, achieved,
                          time.perf_counter() - start, len(red.alive), detail, ilp=by_ilp)
    return _binding(problem, start, memory, detail, time_limit_s, gap, budget)


def _binding(problem: Problem, start: float, unconstrained_memory: float, detail: str,
             time_limit_s: float | None, gap: float | None, budget: Budget | None = None) -> Assignment:
    """The memory limit binds: prune dominated candidates, then solve the full problem by ILP."""
    pruned, kept = prune_dominated(problem)
    left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
    from .ilp import solve_ilp  # noqa: PLC0415 - deferred (the package's docstring)

    got = solve_ilp(pruned, time_limit_s=left, gap=gap, budget=budget)
    choice = expand_choice(kept, got.choice)
    objective, memory = evaluate(problem, choice)
    detail += (f"; memory limit binding: the unconstrained optimum needs "
               f"{unconstrained_memory:.6g} bytes > limit {problem.memory_limit:.6g}, so the full "
               f"problem went to the ILP after pruning dominated candidates "
               f"({sum(map(len, kept))} of {sum(problem.sizes)} kept): {got.detail}")
    return Assignment(choice, objective, memory, f"reduced+{got.solver}", got.status, got.gap,
                      time.perf_counter() - start, problem.num_nodes, detail, ilp=got.ilp)
