"""Exact graph reduction of the unconstrained objective (series-parallel elimination).

The node and edge eliminations are those of Jia et al., *Exploring Hidden Dimensions in
Parallelizing Convolutional Neural Networks* (OptCNN), ICML 2018, applied until nothing changes:

1. **parallel edges** between the same two nodes merge into one (their cost matrices add);
2. **series node**: a node ``v`` with exactly two neighbours ``u`` and ``w`` is removed and the
   edge ``u-w`` gets ``cost[i, k] = min_j (c_uv[i, j] + cost_v[j] + c_vw[j, k])`` (OptCNN's node
   elimination; here also when both edges point into or out of ``v``, which is just as exact);
3. **leaf**: a node ``v`` with one neighbour ``u`` is folded into it:
   ``cost_u[i] += min_j (c_uv[i, j] + cost_v[j])`` (OptCNN's edge elimination).

Each step keeps, for every choice of the remaining nodes, the best objective over the removed ones,
so the optimum of the reduced graph is the optimum of the original. Chains, trees and
series-parallel graphs (VGG, ResNet, Inception) reduce to one node per connected component; what
remains otherwise has a K4 minor. Every step is recorded with its operands, so :func:`unreduce`
recovers the removed nodes' choices (an argmin over one row) in reverse order.

The same eliminations run over any values with an addition (parallel edges, a leaf's fold into its
neighbour) and the two reductions an :class:`Algebra` names: min-plus over costs here, and over
Pareto fronts of (cost, memory, workspace) in :mod:`.pareto`, which keeps a binding memory limit
exact.
"""

from __future__ import annotations

import heapq
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .minplus import fold, min_plus
from .problem import Problem


@dataclass(frozen=True, eq=False)
class Leaf:
    """``node`` folded into ``into``; ``cost[i, j]``: edge into-node, ``node_cost``: its cost."""

    node: int
    into: int
    cost: np.ndarray
    node_cost: np.ndarray


@dataclass(frozen=True, eq=False)
class Series:
    """``node`` removed between ``left`` and ``right`` (edges ``a``: left-node, ``b``: node-right)."""

    node: int
    left: int
    right: int
    a: np.ndarray
    node_cost: np.ndarray
    b: np.ndarray


@dataclass(frozen=True, eq=False)
class Reduction:
    """What is left after reduction, and how to undo it.

    ``alive``: original indices of the remaining nodes (ascending); ``node_cost[i]`` is the cost of
    ``alive[i]``; ``edges`` are ``(u, v, cost)`` between positions in ``alive`` with ``u < v``.
    """

    alive: tuple[int, ...]
    node_cost: tuple[np.ndarray, ...]
    edges: tuple[tuple[int, int, np.ndarray], ...]
    steps: tuple[Leaf | Series, ...]
    merges: int

    def summary(self) -> str:
        leaves = sum(isinstance(s, Leaf) for s in self.steps)
        return (f"{leaves} leaf folds, {len(self.steps) - leaves} series eliminations, "
                f"{self.merges} parallel-edge merges")


@dataclass(frozen=True)
class Algebra:
    """What the eliminations compute with: each node's value per candidate and each edge's per pair
    of candidates (``values``: from the problem), a leaf's fold (``fold(m, c)[i]``, the best over
    ``j`` of ``m[i, j] + c[j]``) and a series node's (``series(a, c, b)[i, k]``, the best over ``j``
    of ``a[i, j] + c[j] + b[j, k]``)."""

    values: Callable[[Problem], tuple[tuple, tuple]]
    fold: Callable
    series: Callable


def _costs(problem: Problem) -> tuple[tuple, tuple]:
    return problem.node_cost, tuple((e.src, e.dst, e.cost) for e in problem.edges)


MIN_PLUS = Algebra(_costs, fold, min_plus)


class _Graph:
    """Mutable working copy: node values, and one edge per node pair keyed ``(low, high)``."""

    def __init__(self, problem: Problem, algebra: Algebra):
        nodes, edges = algebra.values(problem)
        self.cost = dict(enumerate(nodes))
        self.adj: dict[int, set[int]] = {i: set() for i in range(problem.num_nodes)}
        self.edges: dict[tuple[int, int], np.ndarray] = {}
        self.merges = 0
        for src, dst, cost in edges:
            self.add(src, dst, cost)

    def add(self, u: int, v: int, cost: np.ndarray) -> None:
        key, cost = ((u, v), cost) if u < v else ((v, u), cost.T)
        if key in self.edges:
            self.edges[key] = self.edges[key] + cost
            self.merges += 1
        else:
            self.edges[key] = cost
            self.adj[u].add(v)
            self.adj[v].add(u)

    def oriented(self, u: int, v: int) -> np.ndarray:
        """The edge cost as a ``(k_u, k_v)`` matrix."""
        return self.edges[(u, v)] if u < v else self.edges[(v, u)].T

    def remove(self, v: int) -> None:
        for u in self.adj.pop(v):
            self.adj[u].discard(v)
            self.edges.pop((min(u, v), max(u, v)))
        del self.cost[v]


def _repeated(series):
    """``series`` answered once per distinct ``(a, c, b)``: a network's repeated blocks (a
    transformer's layers, each with the same candidates, costs and edges) eliminate the same
    matrices once per block, about three calls in four on GPT-3's stage solves. The key is the
    arrays' shapes, types and bytes, so a repeat is the same product to the last bit, and the array it
    returns is shared (the reduction never writes into an edge; ``_Graph.add`` sums into a new one)."""
    done: dict[tuple, np.ndarray] = {}

    def once(a: np.ndarray, c: np.ndarray, b: np.ndarray) -> np.ndarray:
        key = (a.shape, b.shape, a.dtype, c.dtype, b.dtype, a.tobytes(), c.tobytes(), b.tobytes())
        got = done.get(key)
        if got is None:
            got = done[key] = series(a, c, b)
        return got

    return once


def reduce_graph(problem: Problem, executor: Executor | None = None,
                 workers: int = 1, algebra: Algebra = MIN_PLUS) -> Reduction:
    """Apply the three eliminations to a fixpoint (leaves first: they cost ``k^2``, not ``k^3``).

    Series eliminations go cheapest first (``k_u * k_v * k_w``). ``executor``/``workers`` let the
    min-plus kernel use threads.
    """
    g = _Graph(problem, algebra)
    series_of = algebra.series if algebra is not MIN_PLUS else _repeated(
        lambda a, c, b: min_plus(a, c, b, executor, workers))
    steps: list[Leaf | Series] = []
    leaves = deque(v for v in g.adj if len(g.adj[v]) == 1)
    series: list[tuple[int, int]] = []

    def work(v: int) -> int:
        u, w = g.adj[v]
        return len(g.cost[u]) * len(g.cost[v]) * len(g.cost[w])

    def push(v: int) -> None:
        if len(g.adj[v]) == 1:
            leaves.append(v)
        elif len(g.adj[v]) == 2:
            heapq.heappush(series, (work(v), v))

    for v in g.adj:
        if len(g.adj[v]) == 2:
            heapq.heappush(series, (work(v), v))
    while True:
        if leaves:
            v = leaves.popleft()
            if v not in g.adj or len(g.adj[v]) != 1:
                continue
            (u,) = g.adj[v]
            m = g.oriented(u, v)
            steps.append(Leaf(v, u, m, g.cost[v]))
            g.cost[u] = g.cost[u] + algebra.fold(m, g.cost[v])
            g.remove(v)
            push(u)
        elif series:
            cost, v = heapq.heappop(series)
            if v not in g.adj or len(g.adj[v]) != 2:
                continue
            if work(v) != cost:
                heapq.heappush(series, (work(v), v))
                continue
            u, w = sorted(g.adj[v])
            a, cv, b = g.oriented(u, v), g.cost[v], g.oriented(v, w)
            steps.append(Series(v, u, w, a, cv, b))
            g.remove(v)
            g.add(u, w, series_of(a, cv, b))
            push(u)
            push(w)
        else:
            break
    alive = tuple(sorted(g.adj))
    pos = {v: i for i, v in enumerate(alive)}
    edges = tuple((pos[u], pos[v], m) for (u, v), m in sorted(g.edges.items()))
    return Reduction(alive, tuple(g.cost[v] for v in alive), edges, tuple(steps), g.merges)


def unreduce(reduction: Reduction, alive_choice) -> tuple[int, ...]:
    """Every original node's choice, from the choice of the nodes that were left."""
    choice = dict(zip(reduction.alive, (int(c) for c in alive_choice)))
    for step in reversed(reduction.steps):
        if isinstance(step, Leaf):
            row = step.cost[choice[step.into]] + step.node_cost
        else:
            row = step.a[choice[step.left]] + step.node_cost + step.b[:, choice[step.right]]
        choice[step.node] = int(np.argmin(row))
    return tuple(choice[i] for i in range(len(choice)))
