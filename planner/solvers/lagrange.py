"""A memory-bound problem by Lagrangian relaxation: fast, feasible, with a proven gap.

When the memory limit binds, :func:`.dp.solve_reduced` hands the whole problem to the ILP, which is
exact but slow on large stages. Memory is a sum over nodes plus the largest workspace, so pricing it
into the node costs, ``cost + lam * memory``, leaves a problem the graph reduction solves exactly
(unconstrained). A bisection on ``lam`` finds the cheapest assignment that fits, and every ``lam``
proves a lower bound on any assignment that fits::

    min over fitting x of cost(x)  >=  min_x [cost(x) + lam * sum memory(x)] - lam * (limit - W0)

with ``W0`` the largest workspace some node cannot avoid (each node's least). The best fitting
assignment the bisection found is then made cheaper by local moves (:mod:`.improve`: identical
blocks flip together at one ``lam``, where memory has room for some of them only; the minimiser
just below the multiplier, which does not fit, shows which). The answer
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
    #: the minimiser at the largest multiplier probed whose minimiser does not fit (None: none
    #: probed): where memory had room, the relaxation's other side (:func:`.improve.improve`)
    near: tuple[int, ...] | None = None

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
    minimum = min_memory(problem)
    if not fits(problem, minimum[0]):
        return None
    free = solve_reduced(problem.with_memory_limit(None))
    if fits(problem, free.memory):
        return solve_reduced(problem)
    got = relax(problem, free.objective, rounds, rtol, hint, stop, free.choice, minimum)
    if got.gap > rtol and not (stop is not None and stop()):  # cheaper by local moves (.improve)
        got = Relaxation(*improve(problem, got.choice, stop, toward=got.near), got.bound, got.lam)
    cost, memory = evaluate(problem, got.choice)
    return Assignment(got.choice, cost, memory, "lagrange(dp)", "optimal" if got.gap <= rtol else "feasible",
                      got.gap, time.perf_counter() - start, problem.num_nodes,
                      f"Lagrangian relaxation of the memory limit: gap {got.gap:.2e} to its bound", got.lam)


def slack(problem: Problem) -> float:
    """``limit - W0``: what the summed memory of a fitting assignment can reach at most."""
    return float(problem.memory_limit) - max(float(w.min()) for w in problem.node_workspace)


def relax(problem: Problem, free_objective: float, rounds: int = ROUNDS, rtol: float = 1e-3,
          hint: float | None = None, stop: Callable[[], bool] | None = None,
          free_choice: tuple[int, ...] | None = None,
          minimum: tuple[float, tuple[int, ...]] | None = None) -> Relaxation:
    """Bisection on ``lam`` for a problem whose limit binds and which some assignment fits
    (``free_objective``: the unconstrained optimum, the bound at ``lam = 0``). Without ``hint`` the
    bracket grows up from ``free / need`` by fours; with one (a multiplier a similar problem
    needed: the pipeline search's stages) it grows out from the hint by 2%, 4%, 8%, ..., so the
    bisection starts narrow. ``stop()`` True ends it before its next probe: the best fitting
    assignment so far (the least-memory one at worst) and the best bound so far are returned.
    ``free_choice``: the unconstrained optimum, the minimiser at ``lam = 0`` (:class:`_Lines`);
    ``minimum``: :func:`.problem.min_memory` of ``problem`` (the least memory and an assignment
    that needs it) where the caller has it."""
    need, least = min_memory(problem) if minimum is None else minimum
    room = slack(problem)
    best_choice, best_cost = tuple(least), evaluate(problem, least)[0]
    bound, bound_lam = free_objective, 0.0
    near, near_lam = free_choice, 0.0
    lo, hi = 0.0, max(free_objective, 1e-30) / max(need, 1.0)
    floor = sum(float(m.min()) for m in problem.node_memory)

    lines = _Lines()
    if free_choice is not None:
        lines.add(0.0, free_objective, sum(float(m[c]) for m, c in zip(problem.node_memory, free_choice)))

    def probe(lam: float) -> bool:
        nonlocal best_choice, best_cost, bound, bound_lam, near, near_lam
        if stop is not None and stop():
            raise _Stopped
        choice, relaxed = _priced(problem, lam)
        lines.add(lam, relaxed, sum(float(m[c]) for m, c in zip(problem.node_memory, choice)))
        cost, memory = evaluate(problem, choice)
        if relaxed - lam * room > bound:
            bound, bound_lam = relaxed - lam * room, lam
        if fits(problem, memory):
            if cost < best_cost:
                best_choice, best_cost = choice, cost
            return True
        if lam >= near_lam:
            near, near_lam = choice, lam
        if sum(float(m[c]) for m, c in zip(problem.node_memory, choice)) <= floor * (1 + 1e-12):
            raise _Saturated  # the least summed memory already: a larger multiplier picks the same
        return False

    try:
        _bisect(probe, lo, hi, hint, rounds, lambda: best_cost - bound <= rtol * best_cost, lines)
    except (_Stopped, _Saturated):
        pass
    return Relaxation(tuple(best_choice), best_cost, bound, bound_lam, None if near is None else tuple(near))


class _Stopped(Exception):
    """The bisection's ``stop()`` said to end it (relax)."""


class _Saturated(Exception):
    """A probe that does not fit already took the least summed memory of every node: its
    workspace is what does not fit, which no multiplier prices, so no larger one fits (relax)."""


class _Lines:
    """Each probed multiplier's minimiser as the line ``C + lam M`` of the relaxed objective (its
    cost ``C`` and summed memory ``M``): the relaxed optimum is the least of such lines, so it is
    concave and piecewise linear in ``lam``."""

    def __init__(self):
        self.at: dict[float, tuple[float, float]] = {}

    def add(self, lam: float, relaxed: float, memory: float) -> None:
        self.at[lam] = (relaxed - lam * memory, memory)

    def meet(self, lo: float, hi: float) -> float | None:
        """Where the lines of the minimisers at ``lo`` and ``hi`` cross, when strictly between them
        (the one at ``lo`` holding more memory); else None."""
        if lo not in self.at or hi not in self.at:
            return None
        (c_lo, m_lo), (c_hi, m_hi) = self.at[lo], self.at[hi]
        if m_lo <= m_hi:
            return None
        lam = (c_hi - c_lo) / (m_lo - m_hi)
        return lam if lo < lam < hi else None

    def closes(self, lo: float, lam: float) -> bool:
        """Whether the relaxed optimum at ``lam`` (probed where the lines of ``lo`` and its ``hi``
        cross) is on them: the optimum, concave under both lines and meeting them at ``lo``, ``lam``
        and ``hi``, is then those two lines on ``[lo, hi]``, so every multiplier between them has
        one of those two minimisers (or one as cheap and as large) and bisecting there finds
        nothing else."""
        c_lo, m_lo = self.at[lo]
        c, m = self.at[lam]
        on = c_lo + lam * m_lo
        return c + lam * m >= on - 1e-12 * abs(on)


def _bisect(probe, lo: float, hi: float, hint: float | None, rounds: int, close, lines: _Lines | None = None) -> None:
    """Bracket the multiplier (from ``hint``, else growing ``hi`` by fours), then bisect it until
    ``close()`` (proven close enough) or the multiplier is pinned down (what is left is the
    duality gap). With ``lines`` each step probes first where the bracket's two lines cross
    (:meth:`_Lines.meet`), and stops once that probe is on both (:meth:`_Lines.closes`): GPT-3
    175B's one stage on 1,024 A100s took 13 more probes to pin down the multiplier between the
    same two minimisers."""
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
        meet = None if lines is None else lines.meet(lo, hi)
        lam = (lo + hi) / 2 if meet is None else meet
        fits = probe(lam)
        if meet is not None and lines.closes(lo, lam):
            break
        if fits:
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
    return problem.with_costs(tuple(c + lam * m for c, m in zip(problem.node_cost, problem.node_memory)), None)


def _priced(problem: Problem, lam: float) -> tuple[tuple[int, ...], float]:
    """The unconstrained optimum of cost + lam * memory, and that objective."""
    got = solve_reduced(_priced_problem(problem, lam))
    return tuple(got.choice), float(got.objective)
