"""The abstract planning problem the solvers share, and the answer they give.

A :class:`Problem` knows nothing about networks: node ``i`` has ``k_i`` candidates (a strategy and
kernel algorithm for one layer), each with a cost, a memory footprint and a transient kernel
workspace; an :class:`Edge` charges a cost for each pair of candidates of its two endpoints (the
reshard between the producer's output layout and the consumer's input layout).

Objective:  ``sum_i node_cost[i][c_i] + sum_e edge.cost[c_src, c_dst]``.
Constraint: ``sum_i node_memory[i][c_i] + max_i node_workspace[i][c_i] <= memory_limit``
(workspace is transient, so only the largest one is live at a time, as in mu-cuDNN).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from networks.errors import DnnplanError


def _frozen(values, dtype=np.float64) -> np.ndarray:
    """A read-only view of ``values`` as a float array (no copy when already float64)."""
    view = np.asarray(values, dtype=dtype).view()
    view.flags.writeable = False
    return view


@dataclass(frozen=True, eq=False)
class Edge:
    """A cost between the candidates of ``src`` and ``dst``: ``cost[c_src, c_dst]``."""

    src: int
    dst: int
    cost: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(self, "cost", _frozen(self.cost))
        if self.cost.ndim != 2:
            raise ValueError(f"edge {self.src}->{self.dst}: cost must be a matrix, "
                             f"got shape {self.cost.shape}")


@dataclass(frozen=True, eq=False)
class Problem:
    """One candidate per node, minimising cost under a per-device memory limit.

    Nodes are in topological order; edges may repeat (parallel edges add up) and the graph may be
    disconnected. ``memory_limit`` of ``None`` means unconstrained.
    """

    names: tuple[str, ...]
    node_cost: tuple[np.ndarray, ...]
    node_memory: tuple[np.ndarray, ...]
    node_workspace: tuple[np.ndarray, ...]
    edges: tuple[Edge, ...]
    memory_limit: float | None = None

    def __post_init__(self) -> None:
        n = len(self.names)
        for field in ("node_cost", "node_memory", "node_workspace"):
            arrays = tuple(_frozen(a) for a in getattr(self, field))
            if len(arrays) != n:
                raise ValueError(f"{field} has {len(arrays)} entries for {n} nodes")
            object.__setattr__(self, field, arrays)
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "edges", tuple(self.edges))
        for i, name in enumerate(self.names):
            k = self.node_cost[i].shape
            if len(k) != 1:
                raise ValueError(f"node '{name}': cost must be a vector, got shape {k}")
            if k[0] == 0:
                raise DnnplanError("no candidate strategy is left for this layer", layer=name,
                                   hint="allow more strategies or devices for it")
            if self.node_memory[i].shape != k or self.node_workspace[i].shape != k:
                raise ValueError(f"node '{name}': cost, memory and workspace differ in length")
        sizes = self.sizes
        for e in self.edges:
            if not (0 <= e.src < n and 0 <= e.dst < n) or e.src == e.dst:
                raise ValueError(f"edge {e.src}->{e.dst} does not join two distinct nodes")
            if e.cost.shape != (sizes[e.src], sizes[e.dst]):
                raise ValueError(f"edge {e.src}->{e.dst}: cost shape {e.cost.shape}, expected "
                                 f"{(sizes[e.src], sizes[e.dst])}")

    @property
    def sizes(self) -> tuple[int, ...]:
        """Candidates per node."""
        return tuple(int(c.shape[0]) for c in self.node_cost)

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    def restricted(self, keep) -> "Problem":
        """The same problem with only candidates ``keep[i]`` (index arrays) of each node."""
        return Problem(self.names, tuple(c[k] for c, k in zip(self.node_cost, keep)),
                       tuple(m[k] for m, k in zip(self.node_memory, keep)),
                       tuple(w[k] for w, k in zip(self.node_workspace, keep)),
                       tuple(Edge(e.src, e.dst, e.cost[np.ix_(keep[e.src], keep[e.dst])]) for e in self.edges),
                       self.memory_limit)

    def with_memory_limit(self, memory_limit: float | None) -> "Problem":
        """The same problem under another memory limit."""
        return self._derived(self.node_cost, memory_limit)

    def with_costs(self, node_cost: tuple[np.ndarray, ...], memory_limit: float | None) -> "Problem":
        """The same nodes and edges with other costs (each node's float64 vector of the same
        length, as ``cost + lam * memory`` of this one's) under ``memory_limit``."""
        for c, old in zip(node_cost, self.node_cost):
            if c.dtype != np.float64 or c.shape != old.shape:
                raise ValueError(f"node costs of shape {c.shape} ({c.dtype}) for {old.shape} candidates")
            c.flags.writeable = False
        return self._derived(tuple(node_cost), memory_limit)

    def _derived(self, node_cost: tuple[np.ndarray, ...], memory_limit: float | None) -> "Problem":
        """This problem with ``node_cost`` (read-only float64 vectors of its shapes) and
        ``memory_limit``, without its checks again: the solvers derive one a probe, thousands a
        search, from a problem already checked."""
        new = object.__new__(Problem)
        for name, value in (("names", self.names), ("node_cost", node_cost), ("node_memory", self.node_memory),
                            ("node_workspace", self.node_workspace), ("edges", self.edges),
                            ("memory_limit", memory_limit)):
            object.__setattr__(new, name, value)
        return new


@dataclass(frozen=True)
class Assignment:
    """A solver's answer: one candidate per node and how it was found.

    ``status`` is ``"optimal"`` (proven), ``"feasible"`` (a solution, optimality not proven, e.g. a
    time limit or a gap was hit; ``gap`` says how far it may be), or the solver's own word.
    ``reduced_nodes`` is the number of nodes left after graph reduction (all of them for the ILP).
    """

    choice: tuple[int, ...]
    objective: float
    memory: float
    solver: str
    status: str
    gap: float | None
    time_s: float
    reduced_nodes: int
    detail: str
    lam: float | None = None  # Lagrangian relaxation: the multiplier of its best bound (a hint for a similar problem)
    #: an ILP solved some of it (HiGHS: which of equal optima it answers depends on its gap and time limit)
    ilp: bool = False


def evaluate(problem: Problem, choice) -> tuple[float, float]:
    """Objective and per-device memory (sum of memory plus the largest workspace) of ``choice``."""
    if len(choice) != problem.num_nodes:
        raise ValueError(f"choice has {len(choice)} entries for {problem.num_nodes} nodes")
    c = [int(x) for x in choice]
    objective = sum(float(problem.node_cost[i][c[i]]) for i in range(len(c)))
    objective += sum(float(e.cost[c[e.src], c[e.dst]]) for e in problem.edges)
    return objective, memory_of(problem, c)


def memory_of(problem: Problem, choice) -> float:
    """Per-device memory of ``choice``: summed memory plus the largest chosen workspace."""
    if problem.num_nodes == 0:
        return 0.0
    mem = sum(float(problem.node_memory[i][c]) for i, c in enumerate(choice))
    return mem + max(float(problem.node_workspace[i][c]) for i, c in enumerate(choice))


def fits(problem: Problem, memory: float) -> bool:
    """Whether ``memory`` is within the limit (a relative slack of 1e-9 absorbs rounding)."""
    limit = problem.memory_limit
    return limit is None or memory <= limit + 1e-9 * max(abs(limit), 1.0)


def min_memory(problem: Problem) -> tuple[float, tuple[int, ...]]:
    """The least per-device memory any assignment needs, and one assignment that needs it.

    Exact: memory is separable apart from the workspace maximum, so for every threshold ``W``
    among the workspace values, each node takes its smallest-memory candidate with workspace at
    most ``W``; the answer is the best threshold (``sum of minima + W``).
    """
    if problem.num_nodes == 0:
        return 0.0, ()
    thresholds = np.unique(np.concatenate(problem.node_workspace))
    thresholds = thresholds[thresholds >= max(float(w.min()) for w in problem.node_workspace)]
    total = thresholds.copy()
    for mem, ws in zip(problem.node_memory, problem.node_workspace):
        order = np.argsort(ws, kind="stable")
        prefix_min = np.minimum.accumulate(mem[order])
        total += prefix_min[np.searchsorted(ws[order], thresholds, side="right") - 1]
    w = thresholds[int(np.argmin(total))]
    choice = tuple(int(np.argmin(np.where(ws <= w, mem, np.inf)))
                   for mem, ws in zip(problem.node_memory, problem.node_workspace))
    return memory_of(problem, choice), choice

def infeasible_error(problem: Problem) -> DnnplanError:
    """The error for a memory limit no assignment meets, naming the minimum needed."""
    need, _ = min_memory(problem)
    gib = 2.0 ** 30
    return DnnplanError(
        f"no plan fits the memory limit of {problem.memory_limit:.6g} bytes "
        f"({problem.memory_limit / gib:.3f} GiB) per device; the least any plan needs is "
        f"{need:.6g} bytes ({need / gib:.3f} GiB) per device",
        hint=f"needs at least {need / gib:.3f} GiB per device: use devices with more memory, "
             f"more devices, or a smaller batch")


def check_feasible(problem: Problem) -> None:
    """Raise the infeasible-memory error when even the least-memory assignment does not fit."""
    if problem.memory_limit is not None:
        need, _ = min_memory(problem)
        if not fits(problem, need):
            raise infeasible_error(problem)
