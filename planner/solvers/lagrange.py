"""A memory-bound problem by Lagrangian relaxation: fast, feasible, with a proven gap.

When the memory limit binds, :func:`.dp.solve_reduced` hands the whole problem to the ILP, which is
exact but slow on large stages. Memory is a sum over nodes plus the largest workspace, so pricing it
into the node costs, ``cost + lam * memory``, leaves a problem the graph reduction solves exactly
(unconstrained). A bisection on ``lam`` finds the cheapest assignment that fits, and every ``lam``
proves a lower bound on any assignment that fits::

    min over fitting x of cost(x)  >=  min_x [cost(x) + lam * sum memory(x)] - lam * (limit - W0)

with ``W0`` the largest workspace some node cannot avoid (each node's least). The best fitting
assignment the bisection found is then made cheaper by local moves (:mod:`.improve`: identical
blocks flip together at one ``lam``, where memory has room for some of them only). The answer
carries the gap between that assignment and the best bound (0: proved optimal).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from .dp import solve_reduced
from .improve import improve
from .problem import Assignment, Problem, evaluate, fits, min_memory

ROUNDS = 40
#: the bisection stops once the multiplier is known to this relative width
LAM_RTOL = 1e-4


@dataclass(frozen=True)
class Relaxation:
    """What the bisection found: the best fitting assignment, its cost, the best proven lower
    bound on any fitting assignment, and the multiplier that proved it."""

    choice: tuple[int, ...]
    cost: float
    bound: float
    lam: float

    @property
    def gap(self) -> float:
        return max(0.0, (self.cost - self.bound) / self.cost) if self.cost > 0 else 0.0


def solve_lagrange(problem: Problem, rounds: int = ROUNDS, rtol: float = 1e-3,
                   hint: float | None = None, stop: Callable[[], bool] | None = None) -> Assignment | None:
    """The best fitting assignment the bisection finds, with its proven relative gap; None when no
    assignment fits the limit. ``hint``: a multiplier a similar problem needed, to bracket from;
    ``stop()``: True when the bisection is to end now with what it holds (a search's deadline)."""
    start = time.perf_counter()
    if problem.memory_limit is None:
        return solve_reduced(problem)
    need, _ = min_memory(problem)
    if not fits(problem, need):
        return None
    free = solve_reduced(problem.with_memory_limit(None))
    if fits(problem, free.memory):
        return solve_reduced(problem)
    got = relax(problem, free.objective, rounds, rtol, hint, stop)
    if got.gap > rtol and not (stop is not None and stop()):  # cheaper by local moves (.improve)
        got = Relaxation(*improve(problem, got.choice, stop), got.bound, got.lam)
    cost, memory = evaluate(problem, got.choice)
    return Assignment(got.choice, cost, memory, "lagrange(dp)", "optimal" if got.gap <= rtol else "feasible",
                      got.gap, time.perf_counter() - start, problem.num_nodes,
                      f"Lagrangian relaxation of the memory limit: gap {got.gap:.2e} to its bound", got.lam)


def slack(problem: Problem) -> float:
    """``limit - W0``: what the summed memory of a fitting assignment can reach at most."""
    return float(problem.memory_limit) - max(float(w.min()) for w in problem.node_workspace)


def relax(problem: Problem, free_objective: float, rounds: int = ROUNDS, rtol: float = 1e-3,
          hint: float | None = None, stop: Callable[[], bool] | None = None) -> Relaxation:
    """Bisection on ``lam`` for a problem whose limit binds and which some assignment fits
    (``free_objective``: the unconstrained optimum, the bound at ``lam = 0``). Without ``hint`` the
    bracket grows up from ``free / need`` by fours; with one (a multiplier a similar problem
    needed: the pipeline search's stages) it grows out from the hint by 2%, 4%, 8%, ..., so the
    bisection starts narrow. ``stop()`` True ends it before its next probe: the best fitting
    assignment so far (the least-memory one at worst) and the best bound so far are returned."""
    need, least = min_memory(problem)
    room = slack(problem)
    best_choice, best_cost = tuple(least), evaluate(problem, least)[0]
    bound, bound_lam = free_objective, 0.0
    lo, hi = 0.0, max(free_objective, 1e-30) / max(need, 1.0)
    floor = sum(float(m.min()) for m in problem.node_memory)

    def probe(lam: float) -> bool:
        nonlocal best_choice, best_cost, bound, bound_lam
        if stop is not None and stop():
            raise _Stopped
        choice, relaxed = _priced(problem, lam)
        cost, memory = evaluate(problem, choice)
        if relaxed - lam * room > bound:
            bound, bound_lam = relaxed - lam * room, lam
        if fits(problem, memory):
            if cost < best_cost:
                best_choice, best_cost = choice, cost
            return True
        if sum(float(m[c]) for m, c in zip(problem.node_memory, choice)) <= floor * (1 + 1e-12):
            raise _Saturated  # the least summed memory already: a larger multiplier picks the same
        return False

    try:
        _bisect(probe, lo, hi, hint, rounds, lambda: best_cost - bound <= rtol * best_cost)
    except (_Stopped, _Saturated):
        pass
    return Relaxation(tuple(best_choice), best_cost, bound, bound_lam)


class _Stopped(Exception):
    """The bisection's ``stop()`` said to end it (relax)."""


class _Saturated(Exception):
    """A probe that does not fit already took the least summed memory of every node: its
    workspace is what does not fit, which no multiplier prices, so no larger one fits (relax)."""


def _bisect(probe, lo: float, hi: float, hint: float | None, rounds: int, close) -> None:
    """Bracket the multiplier (from ``hint``, else growing ``hi`` by fours), then bisect it until
    ``close()`` (proven close enough) or the multiplier is pinned down (what is left is the
    duality gap)."""
    if hint:
        bracket = _bracket(probe, hint, rounds)
        if bracket is None:
            return
        lo, hi = bracket
    else:
        for _ in range(rounds):
            if probe(hi):
                break
            lo, hi = hi, hi * 4
        else:
            return  # no multiplier tried fits: nothing to bisect
    for _ in range(rounds):
        if close() or hi - lo <= LAM_RTOL * hi:
            break
        lam = (lo + hi) / 2
        if probe(lam):
            hi = lam
        else:
            lo = lam


def _bracket(probe, hint: float, rounds: int) -> tuple[float, float] | None:
    """(lo, hi) with ``probe(hi)`` fitting and ``probe(lo)`` not (or ``lo`` 0), grown out from
    ``hint``; None when no multiplier tried fits (the growth ends before it overflows)."""
    factor = 1.02
    if probe(hint):
        hi, lo = hint, hint / factor
        for _ in range(rounds):
            if not probe(lo):
                return lo, hi
            hi, factor = lo, factor * factor
            lo = hi / factor
        return 0.0, hi
    lo, hi = hint, hint * factor
    for _ in range(rounds):
        if probe(hi):
            return lo, hi
        lo, factor = hi, factor * factor
        hi = lo * factor
        if not math.isfinite(hi):
            break
    return None


def _priced_problem(problem: Problem, lam: float) -> Problem:
    """The unconstrained problem of cost + lam * memory."""
    return Problem(problem.names, tuple(c + lam * m for c, m in zip(problem.node_cost, problem.node_memory)),
                   problem.node_memory, problem.node_workspace, problem.edges, None)


def _priced(problem: Problem, lam: float) -> tuple[tuple[int, ...], float]:
    """The unconstrained optimum of cost + lam * memory, and that objective."""
    got = solve_reduced(_priced_problem(problem, lam))
    return tuple(got.choice), float(got.objective)
