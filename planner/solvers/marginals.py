"""Min-marginals of the unconstrained objective: for every node and candidate, the best objective
of any assignment that gives the node that candidate.

The graph reduction (:mod:`.reduce`) is variable elimination: each step removes a node ``v``
whose neighbours at that moment (one for a leaf, two for a series node) form its *separator*, and
every later graph keeps, for each choice of its nodes, the best objective over the removed ones.
So a later graph's min-marginals are the original problem's. Walking the steps backwards (the
second pass of the junction-tree algorithm), the marginal of a step's separator, read off the
step that removes the first of its nodes later (or off the node that is left at the end), gives
the marginal of the whole step's nodes:

- leaf ``v`` folded into ``u`` (edge ``m``, ``F[i] = min_j m[i, j] + c_v[j]`` added to ``u``)::

      M_vu[j, i] = M_u[i] - F[i] + m[i, j] + c_v[j]

- series ``v`` between ``u`` and ``w`` (``E = min_plus(a, c_v, b)`` added to edge ``u-w``)::

      M_vuw[j, i, k] = M_uw[i, k] - E[i, k] + a[i, j] + c_v[j] + b[j, k]

A node's marginal is its step's tensor minimised over the other axes; nodes of other connected
components add their own optimum. Exact up to floating-point rounding (the subtractions), which is
why :mod:`.fixing` compares with a relative slack. Cost: one ``k^3`` tensor per series step.
"""

from __future__ import annotations

import numpy as np

from .minplus import fold, min_plus_dense
from .problem import Problem
from .reduce import Leaf, Reduction, reduce_graph


def min_marginals(problem: Problem) -> tuple[np.ndarray, ...] | None:
    """``out[v][j]``: the least objective of an assignment with node ``v`` at candidate ``j``;
    None when the reduction leaves more than one node in some component (no elimination order
    was found; the caller solves without marginals)."""
    got = marginals_and_rests(problem)
    return None if got is None else got[0]


def marginals_and_rests(problem: Problem) -> tuple[tuple[np.ndarray, ...], list[np.ndarray]] | None:
    """The min-marginals, and per reduction step (in :func:`.reduce.reduce_graph`'s order) its
    ``rest``: for each candidate of the step's separator (``u`` of a leaf, ``(u, w)`` of a series
    node), the least objective of everything its elimination did not fold in, the other
    components' optimum left out (the *outside* of what the step made); None as above."""
    red = reduce_graph(problem)
    if red.edges:
        return None
    removed_at = {step.node: t for t, step in enumerate(red.steps)}
    optimum = sum(float(c.min()) for c in red.node_cost)
    marg: dict[int, np.ndarray] = {}
    offset: dict[int, float] = {}  # per node: the other components' optimum
    for cost, node in zip(red.node_cost, red.alive):
        marg[node], offset[node] = cost, optimum - float(cost.min())
    cliques: dict[int, tuple[tuple[int, ...], np.ndarray]] = {}
    rests: list[np.ndarray] = [np.zeros(0)] * len(red.steps)
    for t in reversed(range(len(red.steps))):
        step = red.steps[t]
        if isinstance(step, Leaf):
            m_u = _separator(red, removed_at, cliques, marg, (step.into,))
            rest = m_u - fold(step.cost, step.node_cost)
            tensor = step.node_cost[:, None] + step.cost.T + rest[None, :]
            axes, near = (step.node, step.into), step.into
        else:
            m_uw = _separator(red, removed_at, cliques, marg, (step.left, step.right))
            with np.errstate(invalid="ignore"):
                rest = m_uw - min_plus_dense(step.a, step.node_cost, step.b)
            rest[np.isnan(rest)] = np.inf  # inf - inf: a pair no assignment takes
            tensor = (step.node_cost[:, None, None] + step.a.T[:, :, None] + step.b[:, None, :]
                      + rest[None, :, :])
            axes, near = (step.node, step.left, step.right), step.left
        cliques[t], rests[t] = (axes, tensor), rest
        marg[step.node] = tensor.reshape(tensor.shape[0], -1).min(axis=1)
        offset[step.node] = offset[near]
    return tuple(marg[v] + offset[v] for v in range(problem.num_nodes)), rests


def _separator(red: Reduction, removed_at: dict[int, int], cliques: dict, marg: dict,
               nodes: tuple[int, ...]) -> np.ndarray:
    """The min-marginal over ``nodes`` (one node, or the two of an edge), from the later step
    that removes the first of them, or the node's own marginal when it is left at the end."""
    later = [removed_at[n] for n in nodes if n in removed_at]
    if not later:
        (node,) = nodes  # two nodes left at the end would share an edge: excluded by the caller
        return marg[node]
    axes, tensor = cliques[min(later)]
    keep = [axes.index(n) for n in nodes]
    drop = tuple(i for i in range(len(axes)) if i not in keep)
    out = tensor.min(axis=drop) if drop else tensor
    kept_order = sorted(keep)
    return out if [kept_order.index(k) for k in keep] == list(range(len(keep))) else out.T
