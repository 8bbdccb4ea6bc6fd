"""A binding memory limit solved exactly by graph reduction over Pareto fronts (pure).

The memory limit couples every node (``sum memory + max workspace <= limit``), so the min-plus
reduction (:mod:`.reduce`), which keeps one best cost per choice of the nodes left, loses the
optimum. The same eliminations stay exact when each entry keeps, instead of one cost, the *Pareto
front* of (cost, memory, workspace) over the removed nodes' choices: every label no other label
matches or beats in all three. Addition joins two fronts (costs and memories add, workspaces take
the larger); a fold or series elimination takes the union over the removed node's candidates.
What reaches the last node holds, among its labels, the cheapest assignment that fits.

Labels are dropped early when they provably cannot beat ``upper`` (a fitting assignment's cost, from
:func:`.lagrange.relax`) or cannot fit: a front's labels cover the nodes merged into it (its *bag*),
every node outside adds at least its least cost and memory, and the final workspace is at least the
largest least workspace of any node (``W0``). Sharper, at each elimination's output: the priced
problem's (``cost + lam * memory``) min-marginals give the least priced objective of everything
outside (:func:`.marginals.marginals_and_rests`), and Lagrangian duality turns it into a bound on
the cost of any fitting completion of a label. Stages of identical transformer blocks have few
distinct memories (sums repeat), so the fronts stay small; a front of more than ``max_labels``
labels gives up (None), and the caller falls back to the ILP. Each label carries a trace (which
candidate of which node, or the two labels it joins), read back into the assignment at the end.
"""

from __future__ import annotations

import time

import numpy as np

from .lagrange import _priced_problem
from .marginals import marginals_and_rests
from .problem import Assignment, Problem, evaluate, fits
from .reduce import Algebra, reduce_graph

#: a front this large means the memories do not repeat: the ILP is the better tool
MAX_LABELS = 50_000
#: the most label pairs one join may form (its temporaries: 8 bytes each, several arrays)
PAIRS = 4_000_000
#: the most labels traced, and the most joins made, in one solve: about 2 s and 0.4 s of work on the
#: development VM (many candidates a node make many small joins, each a few numpy calls)
MAX_TRACED = 600_000
MAX_JOINS = 20_000
#: relative slack on the pruning tests, far above rounding and far below any gap that matters
SLACK = 1e-9


class TooManyLabels(Exception):
    """A front outgrew ``max_labels``, a join ``PAIRS``, or the solve ``MAX_TRACED`` or ``MAX_JOINS``."""


class Front:
    """Labels (cost, memory, workspace, trace) of one entry, and the least cost and memory of its bag."""

    __slots__ = ("ctx", "cost", "mem", "ws", "trace", "in_cost", "in_mem")

    def __init__(self, ctx: "_Context", cost, mem, ws, trace, in_cost: float, in_mem: float):
        self.ctx, self.cost, self.mem, self.ws, self.trace = ctx, cost, mem, ws, trace
        self.in_cost, self.in_mem = in_cost, in_mem

    def __len__(self) -> int:
        return len(self.cost)

    def __add__(self, other: "Front") -> "Front":
        return self.ctx.join(self, other)


class _Context:
    """The bounds every front is pruned by, and the traces of the labels made so far."""

    def __init__(self, problem: Problem, upper: float, max_labels: int, lam: float,
                 rests: list[np.ndarray] | None):
        self.limit = float(problem.memory_limit)
        self.upper = upper * (1 + SLACK) + SLACK
        self.max_labels = max_labels
        self.w0 = max(float(w.min()) for w in problem.node_workspace)
        self.total_cost = float(sum(c.min() for c in problem.node_cost))
        # the outside bounds are differences of sums of the priced objective: their rounding scales with it
        self.lam, self.rests, self.step, self.joins = lam, rests, 0, 0
        self.priced_slack = SLACK * (abs(upper) + lam * self.limit) + SLACK
        self.total_mem = float(sum(m.min() for m in problem.node_memory))
        # costs outside a bag are bounded below by its nodes' least costs only if no edge is negative
        self.prune_cost = all(float(e.cost.min()) >= 0 for e in problem.edges)
        self.offsets = np.concatenate([[0], np.cumsum(problem.sizes)])
        self.left: list[int] = []  # join traces, numbered from offsets[-1] on
        self.right: list[int] = []

    def leaf(self, node: int, cost: np.ndarray, mem: np.ndarray, ws: np.ndarray) -> np.ndarray:
        """Node ``node``'s value: one single-label front per candidate."""
        base = int(self.offsets[node])
        in_cost, in_mem = float(cost.min()), float(mem.min())
        out = np.empty(len(cost), dtype=object)
        for j in range(len(cost)):
            out[j] = Front(self, cost[j:j + 1], mem[j:j + 1], ws[j:j + 1], np.array([base + j]), in_cost, in_mem)
        return out

    def edge(self, cost: np.ndarray) -> np.ndarray:
        """An edge's value: a traceless single-label front per pair of candidates."""
        out = np.empty(cost.shape, dtype=object)
        zero = np.zeros(1)
        for idx, c in np.ndenumerate(cost):
            out[idx] = Front(self, np.array([c]), zero, zero, np.array([-1]), 0.0, 0.0)
        return out

    def join(self, f: Front, g: Front) -> Front:
        """Every label of ``f`` with every label of ``g``, pruned and filtered."""
        self.joins += 1
        if self.joins > MAX_JOINS:
            raise TooManyLabels
        if len(f) == 1 and len(g) > 1:
            f, g = g, f
        if len(g) == 1 and g.trace[0] < 0 and g.ws[0] <= f.ws.min(initial=np.inf):
            return self._shift(f, g)
        if len(f) * len(g) > PAIRS:
            raise TooManyLabels
        cost = (f.cost[:, None] + g.cost[None, :]).ravel()
        mem = (f.mem[:, None] + g.mem[None, :]).ravel()
        ws = np.maximum(f.ws[:, None], g.ws[None, :]).ravel()
        in_cost, in_mem = f.in_cost + g.in_cost, f.in_mem + g.in_mem
        keep = self._filter(cost, mem, ws, in_cost, in_mem)
        a, b = np.divmod(keep, len(g))
        ta, tb = f.trace[a], g.trace[b]
        trace = np.where(ta < 0, tb, np.where(tb < 0, ta, -2))
        both = np.flatnonzero(trace == -2)
        if both.size:
            start = int(self.offsets[-1]) + len(self.left)
            trace[both] = np.arange(start, start + both.size)
            self.left.extend(ta[both].tolist())
            self.right.extend(tb[both].tolist())
            if len(self.left) > MAX_TRACED:
                raise TooManyLabels
        return Front(self, cost[keep], mem[keep], ws[keep], trace, in_cost, in_mem)

    def _shift(self, f: Front, g: Front) -> Front:
        """``f`` joined with a traceless single label no larger in workspace than any of ``f``'s:
        every label moves by the same cost and memory, so none comes to dominate another."""
        cost, mem = f.cost + g.cost[0], f.mem + g.mem[0]
        in_cost, in_mem = f.in_cost + g.in_cost, f.in_mem + g.in_mem
        ok = self._fits(cost, mem, f.ws, in_cost, in_mem)
        if ok.all():
            return Front(self, cost, mem, f.ws, f.trace, in_cost, in_mem)
        return Front(self, cost[ok], mem[ok], f.ws[ok], f.trace[ok], in_cost, in_mem)

    def _fits(self, cost, mem, ws, in_cost: float, in_mem: float, outside: float | None = None) -> np.ndarray:
        """Mask of the labels that may still lead to a fitting assignment cheaper than ``upper``.
        The nodes outside the bag add at least their least memory and, with nonnegative edges, their
        least cost. ``outside``, where known (a reduction step's output, :func:`.marginals.
        marginals_and_rests` of the problem priced at ``lam``), is the least priced objective of
        everything else, so by Lagrangian duality any completion costs at least ``cost + lam *
        memory + outside - lam * (limit - workspace)``."""
        top = np.maximum(ws, self.w0)
        ok = mem + top <= self.limit * (1 + SLACK) - (self.total_mem - in_mem)
        if self.prune_cost:
            ok &= cost + (self.total_cost - in_cost) <= self.upper
        if outside is not None:
            ok &= cost + self.lam * mem + outside - self.lam * (self.limit - top) <= self.upper + self.priced_slack
        return ok

    def union(self, fronts, outside: float | None = None) -> Front:
        """The labels of every front (all of one bag), filtered (``outside``: as :meth:`_fits`)."""
        fronts = [f for f in fronts if len(f)]
        first = fronts[0] if fronts else None
        if first is None:
            return Front(self, np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, dtype=int), 0.0, 0.0)
        cost, mem, ws, trace = (np.concatenate([getattr(f, k) for f in fronts]) for k in ("cost", "mem", "ws", "trace"))
        keep = self._filter(cost, mem, ws, first.in_cost, first.in_mem, outside)
        return Front(self, cost[keep], mem[keep], ws[keep], trace[keep], first.in_cost, first.in_mem)

    def _filter(self, cost, mem, ws, in_cost: float, in_mem: float, outside: float | None = None) -> np.ndarray:
        """Indices of the labels that may still lead to a fitting assignment cheaper than ``upper``
        and that no other label matches or beats in cost, memory and workspace, cheapest first."""
        idx = np.flatnonzero(self._fits(cost, mem, ws, in_cost, in_mem, outside))
        if idx.size > self.max_labels:
            raise TooManyLabels
        if idx.size <= 1:
            return idx
        order = idx[np.lexsort((ws[idx], mem[idx], cost[idx]))]
        m, w = mem[order], ws[order]
        dominated = np.zeros(order.size, dtype=bool)
        for level in np.unique(w):
            below = np.where(w <= level, m, np.inf)
            earlier = np.concatenate([[np.inf], np.minimum.accumulate(below)[:-1]])
            dominated |= (w == level) & (earlier <= m)
        return order[~dominated]

    def _rest(self, shape: tuple[int, ...]) -> np.ndarray | None:
        """The next reduction step's outside bounds (the steps come in the order the priced
        reduction took: the same problem's sizes give the same order)."""
        if self.rests is None:
            return None
        rest = self.rests[self.step]
        self.step += 1
        assert rest.shape == shape, (rest.shape, shape)
        return rest

    def fold(self, m: np.ndarray, c: np.ndarray) -> np.ndarray:
        rest = self._rest((m.shape[0],))
        out = np.empty(m.shape[0], dtype=object)
        for i in range(m.shape[0]):
            out[i] = self.union([m[i, j] + c[j] for j in range(m.shape[1])], None if rest is None else rest[i])
        return out

    def series(self, a: np.ndarray, c: np.ndarray, b: np.ndarray) -> np.ndarray:
        rest = self._rest((a.shape[0], b.shape[1]))
        out = np.empty((a.shape[0], b.shape[1]), dtype=object)
        for i in range(a.shape[0]):
            left = [a[i, j] + c[j] for j in range(a.shape[1])]
            for k in range(b.shape[1]):
                out[i, k] = self.union([left[j] + b[j, k] for j in range(a.shape[1])],
                                       None if rest is None else rest[i, k])
        return out

    def choice(self, trace: int, sizes) -> tuple[int, ...]:
        """The assignment a final label's trace records."""
        base = int(self.offsets[-1])
        picks: dict[int, int] = {}
        stack = [trace]
        while stack:
            t = stack.pop()
            if t >= base:
                stack += (self.left[t - base], self.right[t - base])
            elif t >= 0:
                node = int(np.searchsorted(self.offsets, t, side="right")) - 1
                picks[node] = t - int(self.offsets[node])
        return tuple(picks[i] for i in range(len(sizes)))


def solve_pareto(problem: Problem, upper: float, max_labels: int = MAX_LABELS,
                 lam: float = 0.0) -> Assignment | None:
    """The cheapest assignment of ``problem`` within its memory limit, exactly, given ``upper``, the
    cost of some assignment that fits, and ``lam``, a Lagrange multiplier of its memory (any
    non-negative one is valid; a good one prunes more); None when the graph does not reduce to
    single nodes or a front outgrows ``max_labels`` (module docstring)."""
    start = time.perf_counter()
    got = marginals_and_rests(_priced_problem(problem, lam))
    if got is None:
        return None  # a remainder with a K4 minor: not for this solver
    ctx = _Context(problem, upper, max_labels, lam, got[1])

    def values(p: Problem):
        nodes = tuple(ctx.leaf(i, *arrays) for i, arrays in
                      enumerate(zip(p.node_cost, p.node_memory, p.node_workspace)))
        return nodes, tuple((e.src, e.dst, ctx.edge(e.cost)) for e in p.edges)

    try:
        red = reduce_graph(problem, algebra=Algebra(values, ctx.fold, ctx.series))
        parts = [ctx.union(list(node)) for node in red.node_cost]  # one node a connected component
        whole = parts[0]
        for part in parts[1:]:
            whole = whole + part
    except TooManyLabels:
        return None
    final = whole.mem + whole.ws
    fitting = np.flatnonzero(final <= problem.memory_limit + 1e-9 * max(abs(problem.memory_limit), 1.0))
    if fitting.size == 0:
        return None
    best = fitting[np.argmin(whole.cost[fitting])]
    choice = ctx.choice(int(whole.trace[best]), problem.sizes)
    cost, memory = evaluate(problem, choice)
    if not fits(problem, memory):
        return None
    labels = len(ctx.left) + int(ctx.offsets[-1])
    return Assignment(choice, cost, memory, "pareto", "optimal", 0.0, time.perf_counter() - start,
                      problem.num_nodes, f"graph reduction over Pareto fronts of (cost, memory, workspace): "
                      f"{labels} labels traced, {ctx.joins} joins")
