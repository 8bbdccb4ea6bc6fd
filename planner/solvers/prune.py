"""Exact pruning of dominated candidates.

Candidate ``b`` of a node is dominated by candidate ``a`` of the same node when ``a`` is no worse in
node cost, memory, workspace and every entry of every incident edge (its row for out-edges, its
column for in-edges), and either better somewhere or equal everywhere with a lower index. Swapping
``b`` for ``a`` in any assignment then changes neither feasibility nor objective for the worse, so
dropping every dominated candidate keeps an optimum (the relation is a strict partial order, so a
minimal dominator always survives). Pruning repeats until nothing changes, since dropping a
neighbour's candidates removes edge columns and may expose more dominance.
"""

from __future__ import annotations

import numpy as np

from .problem import Problem


def _features(problem: Problem, node: int, keep: list[np.ndarray]) -> np.ndarray:
    """One row per candidate: cost, memory, workspace, then every incident edge row/column."""
    parts = [problem.node_cost[node][:, None], problem.node_memory[node][:, None],
             problem.node_workspace[node][:, None]]
    for e in problem.edges:
        if e.src == node:
            parts.append(e.cost[:, keep[e.dst]])
        if e.dst == node:
            parts.append(e.cost[keep[e.src], :].T)
    return np.concatenate(parts, axis=1)


def _dominated(feat: np.ndarray) -> np.ndarray:
    """Mask of rows dominated by another row (ties: the lower index dominates)."""
    k = feat.shape[0]
    # cheap filter on cost, memory and workspace first, then the edge columns block by block
    a_idx, b_idx = np.nonzero(np.all(feat[:, None, :3] <= feat[None, :, :3], axis=2))
    pairs = a_idx != b_idx
    a_idx, b_idx = a_idx[pairs], b_idx[pairs]
    for start in range(3, feat.shape[1], 64):
        if a_idx.size == 0:
            break
        block = feat[:, start:start + 64]
        ok = np.all(block[a_idx] <= block[b_idx], axis=1)
        a_idx, b_idx = a_idx[ok], b_idx[ok]
    strict = np.any(feat[a_idx] < feat[b_idx], axis=1) | (a_idx < b_idx)
    mask = np.zeros(k, dtype=bool)
    mask[b_idx[strict]] = True
    return mask


def prune_dominated(problem: Problem, max_passes: int = 10) -> tuple[Problem, tuple[np.ndarray, ...]]:
    """The problem without dominated candidates, and for each node the original indices kept."""
    keep = [np.arange(k) for k in problem.sizes]
    for _ in range(max_passes):
        changed = False
        for node in range(problem.num_nodes):
            if keep[node].size < 2:
                continue
            feat = _features(problem, node, keep)[keep[node]]
            drop = _dominated(feat)
            if drop.any():
                keep[node] = keep[node][~drop]
                changed = True
        if not changed:
            break
    return problem.restricted(keep), tuple(keep)


def expand_choice(kept: tuple[np.ndarray, ...], choice) -> tuple[int, ...]:
    """Map a choice on the pruned problem back to the original candidate indices."""
    return tuple(int(k[c]) for k, c in zip(kept, choice))
