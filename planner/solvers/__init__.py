"""The pure solver core: pick one candidate per node of an abstract :class:`Problem`.

``solve(problem, method)`` dispatches to graph reduction (``"auto"``, the default, which meets a
binding memory limit with a Lagrangian bound, candidate fixing and an ILP on what is left:
:mod:`.fixing`; ``"reduced"``, which hands a binding problem whole to the ILP), the ILP
(``"ilp"``) or exhaustive search (``"brute"``, tests only). All return an :class:`Assignment` that
says which solver ran, its status, gap and time. Nothing here prints, opens files or keeps state;
the one exception is that the ILP solve points fd 1 at fd 2 while native solver code runs, so what
that code prints cannot corrupt stdout (:func:`.ilp.native_stdout_to_stderr`).

The ILP (:mod:`.ilp`: PuLP and HiGHS) is imported where a solve first needs it: most problems are
solved whole by graph reduction, and a command that plans counts its imports against its time
limit.
"""

from __future__ import annotations

from .brute import solve_brute
from .budget import Budget, Ceiling, Stopped, partial
from .dp import solve_reduced
from .fixing import Better, solve_fixed
from .problem import Assignment, Edge, Problem, evaluate, min_memory
from .prune import expand_choice, prune_dominated

__all__ = ["Assignment", "Budget", "Ceiling", "Edge", "Problem", "Stopped", "evaluate", "expand_choice", "min_memory",
           "partial", "prune_dominated", "solve", "solve_brute", "solve_fixed", "solve_reduced"]


def solve(problem: Problem, method: str = "auto", time_limit_s: float | None = None,
          gap: float | None = None, budget: Budget | None = None, better: Better | None = None) -> Assignment:
    """Solve ``problem`` with ``method``: ``"auto"``, ``"reduced"``, ``"ilp"`` or ``"brute"``.
    ``time_limit_s`` and ``gap`` bound any ILP solve (``None``: none, exact); ``budget`` ends the
    search with the best assignment in hand (:mod:`.budget`); ``better`` is told each better fitting
    assignment the auto method finds (:func:`.fixing.solve_fixed`)."""
    if method == "auto":
        return solve_fixed(problem, time_limit_s=time_limit_s, gap=gap, budget=budget, better=better)
    if method == "reduced":
        return solve_reduced(problem, time_limit_s=time_limit_s, gap=gap, budget=budget)
    if method == "ilp":
        from .ilp import solve_ilp  # noqa: PLC0415 - deferred (module docstring)

        return solve_ilp(problem, time_limit_s=time_limit_s, gap=gap, budget=budget)
    if method == "brute":
        return solve_brute(problem)
    raise ValueError(f"unknown solver method '{method}' (auto, reduced, ilp or brute)")
