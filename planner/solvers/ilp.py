"""The integer linear program, built with PuLP apart from solving it (as Alpa's auto_sharding does).

Formulation (the sections below carry the same labels):

1. variables: ``x[i][c]`` binary, node ``i`` takes candidate ``c``; ``e[k][a][b]`` continuous in
   [0, 1], edge ``k`` joins candidate ``a`` of its source with candidate ``b`` of its destination;
   ``w`` continuous, the largest chosen workspace (only under a memory limit).
2. objective: ``sum cost[i][c] x[i][c] + sum cost_k[a][b] e[k][a][b]``, divided by its largest
   coefficient (seconds a layer sit below HiGHS's tolerances);
3. constraints:
   (a) one candidate per node: ``sum_c x[i][c] = 1``;
   (b) edge linearisation, the tight form: ``sum_b e[k][a][b] = x[src][a]`` and
       ``sum_a e[k][a][b] = x[dst][b]`` (with integral ``x`` this forces ``e = x_src * x_dst``, and
       its LP relaxation is at least as tight as ``e >= x_src + x_dst - 1``);
   (c) memory: ``w >= sum_c workspace[i][c] x[i][c]`` for every node and
       ``sum memory[i][c] x[i][c] + w <= memory_limit``.

Parallel edges are merged (their matrices added) and all-zero edges dropped before building; both
are exact.

Output: the solvers are asked for silence (``msg=False``; for HiGHS also ``output_flag`` and
``log_to_console`` off), but highspy prints its banner from C++ straight to file descriptor 1 when
the first ``Highs`` object of a process is made, before any option can be set. So the first one is
made with fds 1 and 2 pointed at the null device (:func:`quiet_banner`), and every solve runs with
fd 1 pointed at fd 2 (:func:`native_stdout_to_stderr`), so nothing native can corrupt
``dnnplan ... --json`` on stdout: the one piece of I/O in this package, and it writes nothing.

Time and interruption (:mod:`.budget`): HiGHS runs in this process (highspy) with the time left
to the budget's deadline as its ``time_limit``, and an interrupt callback (MIP, simplex and
interior point) that stops it once the budget expires or a stop is requested. A solve stopped
that way returns the best assignment it holds (status ``feasible``, its gap) or raises
:class:`Stopped` when it holds none. HiGHS runs in a thread of its own while the calling thread
waits in Python (:class:`_ThreadedHiGHS`, as highspy's own ``startSolve``): Ctrl-C reaches the
caller at once as ``KeyboardInterrupt`` (HiGHS may go seconds between two callbacks on a loaded
machine: its presolve, its heuristics), the stop is requested, and the caller goes on with the best
plan it holds while HiGHS winds down.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import highspy
import numpy as np
import pulp

from networks.errors import DnnplanError

from .budget import Budget, Stopped
from .problem import Assignment, Problem, check_feasible, evaluate, fits


@dataclass(frozen=True, eq=False)
class IlpModel:
    """A built PuLP model and the node variables to read the choice back from."""

    lp: pulp.LpProblem
    x: tuple[tuple[pulp.LpVariable, ...], ...]
    num_edge_vars: int


def merged_edges(problem: Problem) -> dict[tuple[int, int], np.ndarray]:
    """Edges keyed by ``(low, high)`` node index, parallel ones added, all-zero ones dropped."""
    merged: dict[tuple[int, int], np.ndarray] = {}
    for e in problem.edges:
        key, cost = ((e.src, e.dst), e.cost) if e.src < e.dst else ((e.dst, e.src), e.cost.T)
        merged[key] = merged[key] + cost if key in merged else cost
    return {key: cost for key, cost in merged.items() if np.any(cost != 0)}


def build_ilp(problem: Problem, budget: Budget | None = None) -> IlpModel:
    """The PuLP model of ``problem`` (not solved); raises :class:`Stopped` once ``budget`` expires
    (building a large model takes seconds)."""
    lp = pulp.LpProblem("dnnplan", pulp.LpMinimize)

    # 1. variables
    x = tuple(tuple(lp.add_variable(f"x_{i}_{c}", cat=pulp.LpBinary) for c in range(k))
              for i, k in enumerate(problem.sizes))
    edges = merged_edges(problem)
    e_vars = {}
    for n, (u, v) in enumerate(edges):
        if budget is not None and budget.expired():
            raise Stopped("the budget ran out while the ILP was built")
        ku, kv = problem.sizes[u], problem.sizes[v]
        e_vars[(u, v)] = [[lp.add_variable(f"e_{n}_{a}_{b}", lowBound=0) for b in range(kv)]
                          for a in range(ku)]

    # 2. objective, in units of its largest coefficient: seconds are ~1e-6 to 1e-3 a layer, and
    #    below HiGHS's dual feasibility tolerance (1e-7) it called a plan 0.03% dearer than the
    #    optimum "optimal" (a stage of a 4-block GPT at 8 micro-batches, tests/unit/planner/solvers)
    terms = [(x[i][c], float(cost[c])) for i, cost in enumerate(problem.node_cost)
             for c in range(cost.shape[0]) if cost[c] != 0]
    for key, cost in edges.items():
        rows = e_vars[key]
        terms += [(rows[a][b], float(cost[a, b])) for a, b in zip(*np.nonzero(cost))]
    scale = max((abs(c) for _, c in terms), default=0.0) or 1.0
    lp += pulp.LpAffineExpression([(var, c / scale) for var, c in terms])

    # 3. constraints
    # (a) one candidate per node
    for i, xi in enumerate(x):
        lp += pulp.LpAffineExpression([(v, 1.0) for v in xi]) == 1, f"one_{i}"
    # (b) edge linearisation (tight form): row sums follow the source, column sums the destination
    for n, ((u, v), rows) in enumerate(e_vars.items()):
        for a, row in enumerate(rows):
            lp += (pulp.LpAffineExpression([(var, 1.0) for var in row] + [(x[u][a], -1.0)]) == 0,
                   f"edge_{n}_src_{a}")
        for b in range(len(rows[0])):
            lp += (pulp.LpAffineExpression([(row[b], 1.0) for row in rows] + [(x[v][b], -1.0)])
                   == 0, f"edge_{n}_dst_{b}")
    # (c) memory: summed memory plus the largest workspace (auxiliary w), in units of the limit
    #     (bytes are ~1e9; HiGHS returned wrong "optimal" answers with such coefficients)
    if problem.memory_limit is not None:
        unit = max(abs(float(problem.memory_limit)), 1.0)
        w = lp.add_variable("workspace_max", lowBound=0)
        for i, ws in enumerate(problem.node_workspace):
            lp += (pulp.LpAffineExpression([(w, 1.0)] + [(x[i][c], -float(ws[c]) / unit)
                                                         for c in range(ws.shape[0])]) >= 0,
                   f"workspace_{i}")
        mem_terms = [(x[i][c], float(m[c]) / unit) for i, m in enumerate(problem.node_memory)
                     for c in range(m.shape[0]) if m[c] != 0]
        lp += (pulp.LpAffineExpression(mem_terms + [(w, 1.0)])
               <= float(problem.memory_limit) / unit, "memory")
    return IlpModel(lp, x, sum(c.size for c in edges.values()))


def _interrupts(budget: Budget | None) -> dict:
    """PuLP's HiGHS arguments for an interrupt callback that stops the solve once ``budget`` expires."""
    if budget is None:
        return {}
    kinds = highspy.cb.HighsCallbackType

    def callback(kind, message, data_out, data_in, user_data) -> None:
        if data_in is not None and budget.expired():
            data_in.user_interrupt = True

    return {"callbackTuple": (callback, None),
            "callbacksToActivate": [kinds.kCallbackMipInterrupt, kinds.kCallbackSimplexInterrupt,
                                    kinds.kCallbackIpmInterrupt]}


#: how often the thread waiting for HiGHS wakes (a Ctrl-C is taken at once anyway), and how long it
#: then gives HiGHS to stop before it goes on without it
POLL_S, GRACE_S = 0.05, 0.2
#: seconds past twice its time limit after which a HiGHS solve is left to itself (callSolver)
OVERRUN_S = 5.0


class _ThreadedHiGHS(pulp.HiGHS):
    """PuLP's HiGHS with the solve in a thread of its own (module docstring)."""

    def __init__(self, budget: Budget | None, **kwargs):
        super().__init__(**kwargs)
        self.budget = budget

    def callSolver(self, lp):
        model, finished = lp.solverModel, threading.Event()
        limit = self.timeLimit
        if self.budget is not None and self.budget.left() is not None:  # PuLP built the model meanwhile
            if self.budget.expired():
                raise Stopped("the budget ran out while the ILP was built")
            limit = self.budget.left() if self.timeLimit is None else min(self.timeLimit, self.budget.left())
            model.setOptionValue("time_limit", float(limit))
        # HiGHS can run on past its time_limit in a phase that neither checks it nor calls back (seen
        # for minutes on a memory-tight stage): past twice the limit and OVERRUN_S more the thread is
        # left to finish alone and the solve counts as stopped
        hard = None if limit is None else time.perf_counter() + 2 * float(limit) + OVERRUN_S

        def run() -> None:
            try:
                model.run()
            finally:
                finished.set()

        threading.Thread(target=run, name="highs", daemon=True).start()
        try:
            while not finished.wait(POLL_S):
                if hard is not None and time.perf_counter() > hard:
                    raise Stopped(f"HiGHS ran on past its {float(limit):.3g} s time limit")
        except KeyboardInterrupt:
            if self.budget is not None:
                self.budget.request_stop()  # HiGHS's interrupt callback ends its solve
            finished.wait(GRACE_S)
            raise


def _pick_solver(solver: str, time_limit_s: float | None, gap: float | None, budget: Budget | None = None):
    available = pulp.listSolvers(onlyAvailable=True)
    name = solver.lower()
    if name == "auto":
        name = "highs" if "HiGHS" in available else "cbc"
    rel_gap = 0.0 if gap is None else float(gap)
    if name == "highs":
        if "HiGHS" not in available:
            raise DnnplanError("the HiGHS solver is not available", hint="pip install highspy")
        return "HiGHS", _ThreadedHiGHS(budget, msg=False, timeLimit=time_limit_s, gapRel=rel_gap, **_interrupts(budget),
                                   gapAbs=0.0 if gap is None else None,
                                   output_flag=False, log_to_console=False,
                                   mip_feasibility_tolerance=1e-9,
                                   primal_feasibility_tolerance=1e-9)
    if name == "cbc":
        if "PULP_CBC_CMD" not in available:
            raise DnnplanError("the CBC solver is not available", hint="reinstall pulp")
        return "CBC", pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, gapRel=rel_gap)
    raise ValueError(f"unknown ILP solver '{solver}' (auto, highs or cbc)")


_FD_LOCK = threading.Lock()  # fd 1 is process-wide: two redirects must not interleave
_BANNER = []  # one entry once the first Highs object of this process is made (quiet_banner)


def quiet_banner() -> None:
    """Make this process's first ``highspy.Highs`` object with fds 1 and 2 on the null device:
    HiGHS prints its banner (name, version, copyright) once a process, from its constructor."""
    with _FD_LOCK:
        if _BANNER:
            return
        _BANNER.append(True)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):
            pass
        saved = []
        try:
            null = os.open(os.devnull, os.O_WRONLY)
        except OSError:
            null = None
        for fd in (1, 2):
            try:
                saved.append((fd, os.dup(fd)))
                if null is not None:
                    os.dup2(null, fd)
            except OSError:
                pass
        try:
            highspy.Highs()
        finally:
            for fd, copy in saved:
                os.dup2(copy, fd)
                os.close(copy)
            if null is not None:
                os.close(null)


@contextlib.contextmanager
def native_stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at fd 2 for the duration, then restore it (in a ``finally``).

    Why: native solver code (highspy's banner, "Running HiGHS ...") writes to fd 1 directly, below
    ``sys.stdout``, where no Python redirect or solver option reaches it; stdout must carry only
    what dnnplan prints (``--json``: one object). Python's own buffered stdout is flushed first so
    nothing already printed moves to stderr. Without a usable fd 1 or fd 2 it does nothing.
    """
    with _FD_LOCK:
        try:
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError):  # replaced, closed or detached stdout
            pass
        try:
            saved = os.dup(1)
        except OSError:  # fd 1 closed: nothing to protect
            saved = None
        if saved is not None:
            try:
                os.dup2(2, 1)
            except OSError:  # fd 2 closed: leave fd 1 alone
                os.close(saved)
                saved = None
        try:
            yield
        finally:
            if saved is not None:
                os.dup2(saved, 1)
                os.close(saved)


def solve_ilp(problem: Problem, time_limit_s: float | None = None, gap: float | None = None,
              solver: str = "auto", budget: Budget | None = None) -> Assignment:
    """Solve ``problem`` as an ILP with HiGHS (through PuLP) or CBC.

    ``gap`` is the relative MIP gap at which to stop (``None``: prove optimality); ``time_limit_s``
    bounds the solver (``None``: no bound), and so does ``budget`` (module docstring: a solve it
    stops returns its best assignment, or raises :class:`Stopped` without one). Infeasible memory
    raises :class:`DnnplanError` naming the least memory any assignment needs.
    """
    start = time.perf_counter()
    check_feasible(problem)
    if problem.num_nodes == 0:
        return Assignment((), 0.0, 0.0, "ilp", "optimal", 0.0, 0.0, 0, "empty problem", ilp=True)
    model = build_ilp(problem, budget)
    built = time.perf_counter()
    if budget is not None and budget.left() is not None:
        time_limit_s = budget.left() if time_limit_s is None else min(time_limit_s, budget.left())
    if budget is not None and budget.expired():
        raise Stopped("the budget ran out before the ILP started")
    label, backend = _pick_solver(solver, time_limit_s, gap, budget)
    quiet_banner()
    with native_stdout_to_stderr():
        model.lp.solve(backend)
    solved = time.perf_counter()
    found = model.lp.sol_status
    if label == "HiGHS" and found == pulp.LpSolutionIntegerFeasible and not _has_solution(model.lp):
        raise Stopped("the ILP was stopped before it found an assignment")
    if found not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        if budget is not None and budget.expired():
            raise Stopped("the budget ran out before the ILP found an assignment")
        reason = pulp.LpStatus.get(model.lp.status, str(model.lp.status))
        raise DnnplanError(f"the ILP solver ({label}) found no plan: {reason}",
                           hint="raise the solver time limit")
    choice = tuple(int(np.argmax([v.varValue or 0.0 for v in xi])) for xi in model.x)
    objective, memory = evaluate(problem, choice)
    if not fits(problem, memory):
        raise DnnplanError(f"the ILP solver ({label}) returned a plan over the memory limit",
                           hint="report this as a bug")
    status, achieved = _status_and_gap(model.lp, label, found, gap)
    detail = (f"{label} ILP: {model.lp.numVariables()} variables "
              f"({sum(len(xi) for xi in model.x)} node, {model.num_edge_vars} edge), "
              f"{model.lp.numConstraints()} constraints; built in {built - start:.3f} s, "
              f"solved in {solved - built:.3f} s")
    return Assignment(choice, objective, memory, f"ilp-{label.lower()}", status, achieved,
                      time.perf_counter() - start, problem.num_nodes, detail, ilp=True)


def _has_solution(lp: pulp.LpProblem) -> bool:
    """HiGHS holds a feasible assignment (PuLP calls an interrupted solve feasible even without one)."""
    try:
        return int(lp.solverModel.getInfo().primal_solution_status) == 2
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return True


def _status_and_gap(lp: pulp.LpProblem, label: str, found: int,
                    gap: float | None) -> tuple[str, float | None]:
    """``"optimal"`` when proven (gap zero), else ``"feasible"`` with the gap the solver reached."""
    achieved = None
    if label == "HiGHS" and getattr(lp, "solverModel", None) is not None:
        try:
            achieved = float(lp.solverModel.getInfo().mip_gap)
        except (AttributeError, RuntimeError):
            achieved = None
    if found == pulp.LpSolutionOptimal:
        if achieved is None or not np.isfinite(achieved):
            achieved = 0.0 if gap is None else float(gap)
        achieved = max(achieved, 0.0)
        proven = gap is None or achieved <= 1e-9
        return ("optimal" if proven else "feasible"), achieved
    return "feasible", achieved
