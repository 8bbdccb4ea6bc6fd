"""A fitting assignment made cheaper by local moves: what the Lagrangian relaxation leaves on the table.

The bisection of :mod:`.lagrange` prices memory into every node alike, so identical blocks flip
together: its fitting assignment recomputes every block's attention where memory had room for a
few not to, and it never trades a little time on one layer for the memory another needs (the LM
head's logits, the largest transient, against attention kept without recomputation). Two kinds of
moves, each checked exactly against the limit (summed memory plus the largest workspace), after
a first one that takes whole runs of nodes from the relaxation's other side:

- **switch**: given an assignment that does not fit (the minimiser at the largest multiplier that
  does not), each connected run of nodes where it differs moves to it whole, most seconds saved
  per byte added first, while the limit holds. A block's layers change strategy together (a
  tensor-parallel block's every layer to data-parallel, say), which no move of one node or one
  edge can reach when the reshards between them cost more than either saves alone: GPT-3 175B's
  interleaved stage on 512 H100s (6 blocks, ZeRO-1, bf16) had its Lagrangian assignment, after
  fill and exchange, at 69.9 GiB of an 80 GiB limit and 3.6% above the bound; switched first, at
  80.0 GiB and 0.27% above it (the ILP's best after 120 s: 0.23%);
- **fill**: one node at a time, the candidate that lowers the cost most and still fits (its edges
  to its neighbours as they are), sweeping the nodes in order until no move is left;
- **exchange**: a move that frees memory (one node, or the two ends of an edge together), cheapest
  in seconds per byte freed first, then fill again; kept when the two together lower the cost.

Every move keeps the assignment fitting and lowers its cost, so the answer is never worse than the
one given; what the Lagrangian bound proves is unchanged, only the gap to it narrows (llama3-70b's
ZeRO-3 plan on 512 H100s without a pipeline: 2.7% to 0.4%, the optimum; the two stages of its
2-stage pipeline: 6.7% to 0.7% and 45% to 2.4%; docs/solvers.md). A heuristic: the exact
closing of the gap stays with :mod:`.fixing`.
"""

from __future__ import annotations

import numpy as np

from .problem import Problem, evaluate, fits

#: freeing moves tried per exchange round, cheapest per byte first
TRIES = 8
#: exchange rounds at most (each keeps the best of its tries)
ROUNDS = 8


def improve(problem: Problem, choice, stop=None, toward=None) -> tuple[tuple[int, ...], float]:
    """``choice`` (which fits ``problem``'s limit) made cheaper by switch, fill and exchange moves
    (module docstring): the assignment and its cost. ``toward``: an assignment to switch runs of
    nodes to (None: no switch moves). ``stop()``: True ends it with what it holds."""
    if problem.memory_limit is None or problem.num_nodes == 0:
        return tuple(int(c) for c in choice), evaluate(problem, choice)[0]
    state = _Moves(problem, choice)
    if toward is not None:
        state.switch(toward)
    state.fill()
    for _ in range(ROUNDS):
        if stop is not None and stop():
            break
        best = None
        for move in state.freeing()[:TRIES]:
            held = state.held()
            state.apply(move)
            state.fill()
            if state.cost < held[-1] and (best is None or state.cost < best[-1]) and state.fits():
                best = state.held()
            state.restore(held)
        if best is None:
            break
        state.restore(best)
    return tuple(state.c), evaluate(problem, state.c)[0]


class _Moves:
    """An assignment, its memory per node and workspace per node, and each node's cost change per
    candidate with its neighbours as they are (kept until it or a neighbour moves)."""

    def __init__(self, problem: Problem, choice):
        self.p = problem
        self.c = [int(x) for x in choice]
        n = problem.num_nodes
        self.incident: list[list] = [[] for _ in range(n)]
        for e in problem.edges:
            self.incident[e.src].append((e, 0))
            self.incident[e.dst].append((e, 1))
        self.between: dict[tuple[int, int], list[np.ndarray]] = {}
        for e in problem.edges:
            self.between.setdefault((e.src, e.dst), []).append(e.cost)
        self.neighbours = [sorted({e.dst if side == 0 else e.src for e, side in inc}) for inc in self.incident]
        self.mem = np.array([problem.node_memory[v][c] for v, c in enumerate(self.c)])
        self.ws = np.array([problem.node_workspace[v][c] for v, c in enumerate(self.c)])
        self.cost = evaluate(problem, self.c)[0]
        limit = float(problem.memory_limit)
        self.limit = limit + 1e-9 * max(abs(limit), 1.0)  # problem.fits' slack
        self.summed = float(self.mem.sum())
        #: per node, its cost changes, their least, and the least memory of a candidate that lowers
        #: the cost (inf: none; None: to be priced again)
        self._delta: list[tuple[np.ndarray, float, float] | None] = [None] * n
        #: the nodes in decreasing order of workspace (None: a node moved since it was sorted)
        self._ws_order: list[int] | None = None
        self._groups: _Groups | None = None  # made at the first exchange round

    def delta(self, v: int) -> np.ndarray:
        """The cost change of each candidate of ``v``."""
        return self._priced(v)[0]

    def _priced(self, v: int) -> tuple[np.ndarray, float, float]:
        got = self._delta[v]
        if got is None:
            p, c = self.p, self.c
            d = p.node_cost[v] - p.node_cost[v][c[v]]
            for e, side in self.incident[v]:
                line = e.cost[:, c[e.dst]] if side == 0 else e.cost[c[e.src], :]
                d = d + (line - line[c[v]])
            lower = d < 0
            got = self._delta[v] = (d, float(d.min()),
                                    float(p.node_memory[v][lower].min()) if lower.any() else np.inf)
        return got

    def ws_order(self) -> list[int]:
        """The nodes in decreasing order of their chosen workspace (ties in node order), kept until
        a node moves."""
        if self._ws_order is None:
            self._ws_order = np.argsort(-self.ws, kind="stable").tolist()
        return self._ws_order

    def _other_ws(self, nodes) -> float:
        """The largest workspace chosen outside ``nodes`` (0 when none is left): the first node in
        :meth:`ws_order` not in ``nodes``."""
        if len(nodes) >= len(self.ws):
            return 0.0
        out = nodes if len(nodes) <= 4 else set(nodes)
        return float(self.ws[next(v for v in self.ws_order() if v not in out)])

    def needs(self, v: int, other: float | None = None) -> np.ndarray:
        """The memory of the whole assignment with each candidate of ``v`` (``other``: the
        largest workspace outside ``v``, where the caller holds it)."""
        p = self.p
        other = self._other_ws([v]) if other is None else other
        return self.summed - self.mem[v] + p.node_memory[v] + np.maximum(other, p.node_workspace[v])

    def set(self, v: int, j: int) -> None:
        self.c[v] = int(j)
        self.summed += float(self.p.node_memory[v][j] - self.mem[v])
        self.mem[v] = self.p.node_memory[v][j]
        self.ws[v] = self.p.node_workspace[v][j]
        self._ws_order = None
        self._delta[v] = None
        for u in self.neighbours[v]:
            self._delta[u] = None

    def apply(self, move) -> None:
        for v, j in move:
            self.set(v, j)
        self.cost = evaluate(self.p, self.c)[0]

    def fits(self) -> bool:
        return fits(self.p, evaluate(self.p, self.c)[1])

    def held(self) -> tuple:
        return list(self.c), self.mem.copy(), self.ws.copy(), list(self._delta), self.summed, self.cost

    def restore(self, held: tuple) -> None:
        c, mem, ws, delta, summed, cost = held
        self.c, self.mem, self.ws, self._delta = list(c), mem.copy(), ws.copy(), list(delta)
        self._ws_order = None
        self.summed, self.cost = summed, cost

    def runs(self, toward) -> list[list[int]]:
        """The connected runs of nodes where ``toward`` differs from the assignment (components of
        the graph on those nodes)."""
        differ = {v for v in range(self.p.num_nodes) if int(toward[v]) != self.c[v]}
        runs, seen = [], set()
        for v in sorted(differ):
            if v in seen:
                continue
            run, stack = [], [v]
            seen.add(v)
            while stack:
                u = stack.pop()
                run.append(u)
                for w in self.neighbours[u]:
                    if w in differ and w not in seen:
                        seen.add(w)
                        stack.append(w)
            runs.append(sorted(run))
        return runs

    def switch(self, toward) -> None:
        """Switch moves (module docstring). Runs are not adjacent, so each one's cost change and
        summed memory change hold whichever others have moved; the workspace is checked exactly."""
        p, c = self.p, self.c
        priced = []
        for run in self.runs(toward):
            inside = set(run)
            saved = 0.0
            for v in run:
                saved += float(p.node_cost[v][c[v]] - p.node_cost[v][int(toward[v])])
                for e, side in self.incident[v]:
                    u = e.dst if side == 0 else e.src
                    if u in inside and side == 1:
                        continue  # an edge inside the run: counted once, from its source
                    new_u = int(toward[u]) if u in inside else c[u]
                    old, new = (e.cost[c[v], c[u]], e.cost[int(toward[v]), new_u]) if side == 0 else \
                        (e.cost[c[u], c[v]], e.cost[new_u, int(toward[v])])
                    saved += float(old - new)
            added = float(sum(p.node_memory[v][int(toward[v])] - p.node_memory[v][c[v]] for v in run))
            if saved > 1e-12 * max(abs(self.cost), 1e-30):
                priced.append((-saved / added if added > 0 else -np.inf, run, saved, added))
        priced.sort(key=lambda t: t[0])
        for _, run, saved, added in priced:
            if self.summed + added + max(self._other_ws(run),
                                         max(float(p.node_workspace[v][int(toward[v])]) for v in run)) > self.limit:
                continue
            for v in run:
                self.set(v, int(toward[v]))
            self.cost -= saved
        self.cost = evaluate(p, self.c)[0]

    def fill(self) -> None:
        """Fill moves (module docstring) until none is left."""
        moved = True
        while moved:
            moved = False
            tol = 1e-12 * max(abs(self.cost), 1e-30)
            for v in range(self.p.num_nodes):
                d, least, least_memory = self._priced(v)
                if least >= -tol:
                    continue
                # no candidate that lowers the cost fits: the least of them in memory, beside the
                # largest workspace of the others, is over the limit (float sums are monotone, so
                # this never exceeds the needs it bounds)
                other = self._other_ws([v])
                if float(self.summed - self.mem[v]) + least_memory + other > self.limit:
                    continue
                ok = (d < -tol) & (self.needs(v, other) <= self.limit)
                if ok.any():
                    j = int(np.flatnonzero(ok)[np.argmin(d[ok])])
                    self.cost += float(d[j])
                    self.set(v, j)
                    moved = True

    def freeing(self) -> list[tuple[tuple[int, int], ...]]:
        """Moves that free memory, of one node or of an edge's two ends, each node's or edge's
        cheapest per byte freed, in that order (module docstring). The nodes of one candidate count,
        and the edges of one shape, are priced together (:class:`_Groups`), with the same float
        operations one at a time would take, in the order one at a time would rank them."""
        if self._groups is None:
            self._groups = _Groups(self.p, self.between)
        total = self.summed + float(self.ws.max())
        top = [(v, float(self.ws[v])) for v in self.ws_order()[:3]]
        nodes: list[tuple[int, float, int]] = []
        for idx, memory, workspace in self._groups.nodes:
            # the largest workspace of the others: the first in decreasing order that is not the node
            other = np.where(idx == top[0][0], top[1][1] if len(top) > 1 else 0.0, top[0][1])
            needs = (self.summed - self.mem[idx])[:, None] + memory + np.maximum(other[:, None], workspace)
            freed = total - needs
            frees = freed > 0
            rows = np.flatnonzero(frees.any(axis=1))
            if not rows.size:
                continue
            delta = np.stack([self.delta(int(v)) for v in idx[rows]])
            per_byte = np.where(frees[rows], delta / np.where(frees[rows], freed[rows], 1.0), np.inf)
            best = np.argmin(per_byte, axis=1)
            prices = per_byte[np.arange(len(rows)), best]
            nodes += zip(idx[rows].tolist(), prices.tolist(), best.tolist())
        ranked = [(price, ((v, j),)) for v, price, j in sorted(nodes)]
        edges: list[tuple[int, float, tuple]] = []
        c = np.array(self.c)
        for at, us, vs, costs, memory_u, memory_v, workspace_u, workspace_v in self._groups.edges:
            joint = (np.stack([self.delta(int(u)) for u in us])[:, :, None]
                     + np.stack([self.delta(int(v)) for v in vs])[:, None, :])
            cu, cv, lines = c[us], c[vs], np.arange(len(us))
            for m in costs:  # an edge between the two, in both deltas with the other end as it is
                joint = joint + (m - m[lines, :, cv][:, :, None] - m[lines, cu, :][:, None, :]
                                 + m[lines, cu, cv][:, None, None])
            other = _other_of_two(top, us, vs, len(self.ws))
            needs = ((self.summed - self.mem[us] - self.mem[vs])[:, None, None] + memory_u[:, :, None]
                     + memory_v[:, None, :] + np.maximum(np.maximum(other[:, None, None], workspace_u[:, :, None]),
                                                         workspace_v[:, None, :]))
            freed = total - needs
            frees = freed > 0
            rows = np.flatnonzero(frees.reshape(len(us), -1).any(axis=1))
            if not rows.size:
                continue
            per_byte = np.where(frees[rows], joint[rows] / np.where(frees[rows], freed[rows], 1.0), np.inf)
            flat = per_byte.reshape(len(rows), -1)
            best = np.argmin(flat, axis=1)
            prices = flat[np.arange(len(rows)), best]
            i, j = np.divmod(best, per_byte.shape[2])
            edges += zip(at[rows].tolist(), prices.tolist(),
                         zip(us[rows].tolist(), i.tolist(), vs[rows].tolist(), j.tolist()))
        ranked += [(price, ((u, i), (v, j))) for _, price, (u, i, v, j) in sorted(edges)]
        ranked.sort(key=lambda t: t[0])
        # identical blocks offer the same move at the same price: one of them is tried
        first: dict[float, tuple] = {}
        for price, move in ranked:
            first.setdefault(price, move)
        return list(first.values())


class _Groups:
    """The nodes of each candidate count, and the edges (node pairs) of each shape, with their
    memory and workspace stacked, for :meth:`_Moves.freeing`: ``nodes``, ``(indices, memory,
    workspace)``; ``edges``, ``(their places in between's order, us, vs, the stacked costs of
    each parallel edge, memory and workspace of u, of v)``."""

    def __init__(self, problem: Problem, between: dict[tuple[int, int], list[np.ndarray]]):
        by_count: dict[int, list[int]] = {}
        for v in range(problem.num_nodes):
            by_count.setdefault(len(problem.node_cost[v]), []).append(v)
        self.nodes = [(np.array(vs), np.stack([problem.node_memory[v] for v in vs]),
                       np.stack([problem.node_workspace[v] for v in vs])) for vs in by_count.values()]
        by_shape: dict[tuple, list[tuple[int, int, int]]] = {}
        for at, ((u, v), costs) in enumerate(between.items()):
            by_shape.setdefault((costs[0].shape, len(costs)), []).append((at, u, v))
        self.edges = []
        for (_, parallel), members in by_shape.items():
            at, us, vs = (np.array(x) for x in zip(*members))
            pairs = list(zip(us.tolist(), vs.tolist()))
            costs = [np.stack([between[pair][t] for pair in pairs]) for t in range(parallel)]
            self.edges.append((at, us, vs, costs,
                               np.stack([problem.node_memory[u] for u in us]),
                               np.stack([problem.node_memory[v] for v in vs]),
                               np.stack([problem.node_workspace[u] for u in us]),
                               np.stack([problem.node_workspace[v] for v in vs])))


def _other_of_two(top: list[tuple[int, float]], us: np.ndarray, vs: np.ndarray, n: int) -> np.ndarray:
    """The largest workspace outside each edge's two ends: the first of ``top`` (the three largest,
    in decreasing order, as ``(node, workspace)``) that is neither (0 when no other node is left)."""
    if n <= 2:
        return np.zeros(len(us))
    out = np.full(len(us), top[-1][1])
    for node, ws in reversed(top[:-1]):
        out = np.where((us != node) & (vs != node), ws, out)
    return out
