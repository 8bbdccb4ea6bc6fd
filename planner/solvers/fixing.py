"""A binding memory limit solved exactly and fast: Lagrangian bound, reduced-cost fixing, then Pareto
fronts or the ILP on what is left.

1. **Relax** (:func:`.lagrange.relax`): the bisection on ``lam`` gives a fitting assignment of cost
   ``UB`` and a multiplier ``lam`` with a proven bound. If the bound meets ``UB`` it is optimal.
2. **Fix.** For any fitting assignment ``x``, summed memory is at most ``limit - W0``
   (:func:`.lagrange.slack`), so ``cost(x) >= cost(x) + lam * (memory(x) - (limit - W0))``. The
   least right-hand side over every ``x`` that gives node ``v`` candidate ``j`` is the min-marginal
   of the priced problem (:func:`.marginals.min_marginals`) minus ``lam * (limit - W0)``: a lower
   bound on any fitting assignment using ``(v, j)``. Candidates whose bound exceeds a *target*
   cannot be in a fitting assignment that costs at most the target.
3. **Pareto fronts** (:mod:`.pareto`) on the candidates of any fitting assignment no dearer than
   the one in hand: the graph reduction with (cost, memory, workspace) fronts in place of costs,
   exact, fast where memories repeat (stages of identical blocks). When the fronts grow too large
   (or no elimination order exists) the rounds below take over.
4. **ILP** on the kept candidates, dominated ones pruned too (:mod:`.prune`), under the limit. If
   its optimum costs at most the target, it is the optimum of the whole problem (every assignment
   that cheap was in the ILP). Else it is a fitting assignment, maybe better than the one in hand,
   and the next round aims higher: ``TARGETS`` go 5%, 30%, then all the way from the bound to
   the best assignment in hand, and that last round always proves (the best in hand is kept).

Exact as the plain ILP is (``tests/unit/planner/solvers/test_solvers.py`` holds it to brute force); the ILPs see the
candidates the bound could not rule out. Without an elimination order (a K4 remainder) the bound
is skipped and one ILP gets every candidate. Measured on llama2-7b, 64 A100, fp16, Adam
(docs/planner.md): the whole `dnnplan plan` took 9.9 s at batch 64 and 53 s at 256 with one ILP
on every candidate, 2.1 s and 34 s with these rounds (the fronts give up there: thousands of
candidates); a GPT-3 pipeline stage's ILP rounds 1.5-4 s, its fronts 0.1-0.3 s.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .budget import Budget, Stopped
from .dp import solve_reduced
from .lagrange import Relaxation, _priced_problem, relax, slack
from .marginals import min_marginals
from .pareto import MAX_LABELS, solve_pareto
from networks.errors import DnnplanError

from .problem import Assignment, Problem, check_feasible, evaluate, fits
from .prune import expand_choice, prune_dominated

#: told each better fitting assignment: (choice, its cost, the lower bound proven on the optimum)
Better = Callable[[tuple[int, ...], float, float], None]

#: relative slack of the fixing test, far above the marginals' rounding and far below any gap
SLACK = 1e-9


#: where the rounds aim, as fractions of the way from the bound to the assignment in hand
TARGETS = (0.05, 0.3, 1.0)


def solve_fixed(problem: Problem, time_limit_s: float | None = None, gap: float | None = None,
                max_labels: int = MAX_LABELS, budget: Budget | None = None,
                better: Better | None = None) -> Assignment:
    """The optimum of ``problem`` under its memory limit (see the module docstring); ``max_labels``:
    the largest Pareto front before the ILP rounds take over (0: straight to them); ``budget``:
    when to stop (:mod:`.budget`; the best assignment in hand is returned, ``feasible`` with its
    proven gap); ``better(choice, cost, bound)`` is told each better fitting assignment found and
    the lower bound proven with it."""
    start = time.perf_counter()
    if problem.memory_limit is None:  # the unconstrained optimum, reduced once
        return solve_reduced(problem, time_limit_s, gap, budget=budget)
    check_feasible(problem)
    free = solve_reduced(problem.with_memory_limit(None))
    if fits(problem, free.memory):
        return solve_reduced(problem, time_limit_s, gap, budget=budget)
    return solve_relaxed(problem, relax(problem, free.objective, free_choice=free.choice), time_limit_s, gap,
                         max_labels, start, budget, better)


def solve_relaxed(problem: Problem, got: Relaxation, time_limit_s: float | None = None, gap: float | None = None,
                  max_labels: int = MAX_LABELS, start: float | None = None, budget: Budget | None = None,
                  better: Better | None = None) -> Assignment:
    """Steps 2 to 4 of the module docstring, from the relaxation ``got`` of a problem whose limit
    binds (:func:`.lagrange.relax`, or any feasible assignment with a valid bound and multiplier);
    ``budget`` and ``better`` as :func:`solve_fixed` takes them."""
    start = time.perf_counter() if start is None else start
    if better is not None:
        better(got.choice, got.cost, got.bound)
    if got.cost - got.bound <= SLACK * abs(got.cost):
        cost, memory = evaluate(problem, got.choice)
        return Assignment(got.choice, cost, memory, "lagrange(dp)", "optimal", 0.0, time.perf_counter() - start,
                          problem.num_nodes, "memory limit binding: the Lagrangian bound meets the assignment found")
    marg = _bounds(problem, got)
    if marg is not None and max_labels > 0:
        exact = _fronts(problem, got, marg, max_labels, start)
        if exact is not None:
            return exact
    best, ilp, proved, notes = got.choice, None, False, []
    for share in TARGETS if marg is not None else (1.0,):
        if budget is not None and budget.expired():
            budget.check()  # a stop request: KeyboardInterrupt (the caller holds the best plan so far)
            notes.append(f"stopped before target +{share:.0%}: the time limit was reached")
            break
        upper = evaluate(problem, best)[0]
        target = min(upper, got.bound + share * (got.cost - got.bound))
        keep = fixed_candidates(problem, got, marg, target, best)
        left = None if time_limit_s is None else max(0.0, time_limit_s - (time.perf_counter() - start))
        try:
            pruned, undominated = prune_dominated(problem.restricted(keep))
            from .ilp import solve_ilp  # noqa: PLC0415 - deferred (the package's docstring)

            ilp = solve_ilp(pruned, time_limit_s=left, gap=gap, budget=budget)
        except Stopped:
            notes.append(f"target +{share:.0%}: the time limit was reached before the ILP found a plan")
            break
        except DnnplanError:  # nothing fits on the candidates kept: the optimum costs more than the target
            notes.append(f"target +{share:.0%}: {sum(map(len, keep))} candidates, none fits")
            continue
        choice = expand_choice(keep, expand_choice(undominated, ilp.choice))
        cost = evaluate(problem, choice)[0]
        notes.append(f"target +{share:.0%}: {sum(map(len, keep))} candidates kept of {sum(problem.sizes)}, "
                     f"{sum(map(len, undominated))} after dominance, {ilp.detail}")
        if cost < upper:
            best = choice
            if better is not None:
                better(best, cost, got.bound)
        if cost <= target + SLACK * abs(target) and ilp.status == "optimal":
            proved = True
            break
    cost, memory = evaluate(problem, best)
    status = "optimal" if proved else "feasible"
    detail = (f"memory limit binding: Lagrangian bound {got.gap:.2e} below the first fitting assignment, then "
              f"candidates ruled out by it and the ILP on the rest, aiming between the two; " + "; ".join(notes))
    proven = max(0.0, (cost - got.bound) / cost) if cost > 0 else 0.0
    return Assignment(best, cost, memory, f"lagrange+{ilp.solver if ilp else 'dp'}", status,
                      0.0 if status == "optimal" else proven, time.perf_counter() - start, problem.num_nodes, detail,
                      ilp=ilp is not None)


def _fronts(problem: Problem, got: Relaxation, marg: tuple[np.ndarray, ...], max_labels: int,
            start: float) -> Assignment | None:
    """Step 3: the optimum by graph reduction over Pareto fronts (:mod:`.pareto`) on the candidates
    of any fitting assignment no dearer than the one in hand (``marg``: the bounds of
    :func:`_bounds`); None when the fronts outgrow ``max_labels``."""
    keep = fixed_candidates(problem, got, marg, got.cost, got.choice)
    pruned, undominated = prune_dominated(problem.restricted(keep))
    exact = solve_pareto(pruned, got.cost, max_labels, got.lam or 0.0)
    if exact is None:
        return None
    choice = expand_choice(keep, expand_choice(undominated, exact.choice))
    cost, memory = evaluate(problem, choice)
    return Assignment(choice, cost, memory, "lagrange+pareto", "optimal", 0.0, time.perf_counter() - start,
                      problem.num_nodes,
                      f"memory limit binding: Lagrangian bound {got.gap:.2e} below the first fitting assignment, "
                      f"then candidates ruled out by it ({sum(map(len, keep))} of {sum(problem.sizes)} kept, "
                      f"{sum(pruned.sizes)} after dominance) and {exact.detail}")


def fixed_candidates(problem: Problem, got: Relaxation, marg: tuple[np.ndarray, ...] | None, target: float,
                     choice: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Per node, the candidates of any fitting assignment that costs at most ``target``, by the
    bound at ``got.lam`` (all of them without ``marg``), with ``choice``'s own added."""
    if marg is None:
        return tuple(np.arange(k) for k in problem.sizes)
    cut = target + SLACK * abs(target)
    return tuple(np.union1d(np.flatnonzero(m <= cut), [c]) for m, c in zip(marg, choice))


def _bounds(problem: Problem, got: Relaxation) -> tuple[np.ndarray, ...] | None:
    """Per node and candidate, a lower bound on the cost of any fitting assignment that takes it:
    the priced min-marginal at ``got.lam`` less ``lam * (limit - W0)``; None without an
    elimination order. (Combining the bounds of the next-best multipliers the bisection probed
    ruled out no more candidates on llama2-7b.)"""
    marg = min_marginals(_priced_problem(problem, got.lam))
    if marg is None:
        return None
    shift = got.lam * slack(problem)
    return tuple(m - shift for m in marg)
