"""Local moves on a fitting assignment (planner.solvers.improve), after the Lagrangian relaxation of
the memory limit: identical blocks flip together at one multiplier, a block's layers change layout
together, and the transient the largest workspace holds is priced by none; the moves keep the assignment fitting and only lower its cost."""

from __future__ import annotations

import numpy as np
import pytest

from planner.solvers import Edge, Problem, evaluate, min_memory, solve_brute
from planner.solvers.problem import fits
from planner.solvers.improve import _Moves, improve
from planner.solvers.lagrange import relax, solve_lagrange

from tests.support.random_problems import SEEDS, _close, binding_problem

#: four identical blocks, each recomputing (cost 2, memory 1) or keeping its activations (cost 1,
#: memory 3), and a head whose fast kernel needs 4 of workspace (cost 1) or none (cost 1.5)
BLOCKS = 4
LIMIT = 10.0


def _stack() -> Problem:
    names = tuple(f"block{i}" for i in range(BLOCKS)) + ("head",)
    cost = (np.array([2.0, 1.0]),) * BLOCKS + (np.array([1.0, 1.5]),)
    memory = (np.array([1.0, 3.0]),) * BLOCKS + (np.array([0.0, 0.0]),)
    workspace = (np.array([0.0, 0.0]),) * BLOCKS + (np.array([4.0, 0.0]),)
    edges = tuple(Edge(i, i + 1, np.zeros((2, 2))) for i in range(BLOCKS))
    return Problem(names, cost, memory, workspace, edges, LIMIT)


def test_the_blocks_flip_apart_and_the_head_gives_its_workspace_up():
    problem = _stack()
    free = solve_brute(problem.with_memory_limit(None))
    lagrangian = relax(problem, free.objective)
    # every block recomputes at once (keeping one more costs 2 more memory at every multiplier
    # that fits), and the head keeps its workspace, which no multiplier prices
    assert lagrangian.choice == (0,) * BLOCKS + (0,) and _close(lagrangian.cost, 9.0)
    choice, cost = improve(problem, lagrangian.choice)
    # the head without workspace leaves room for three blocks to keep theirs: 4 + 3 * 2 = 10
    assert sorted(choice[:BLOCKS]) == [0, 1, 1, 1] and choice[BLOCKS] == 1
    assert _close(cost, 6.5) and _close(cost, solve_brute(problem).objective)
    got = solve_lagrange(problem)
    assert _close(got.objective, 6.5) and fits(problem, got.memory)
    assert got.gap == pytest.approx((6.5 - lagrangian.bound) / 6.5)  # the bound is the relaxation's


def test_fill_alone_keeps_what_the_room_allows():
    """With the head's workspace held (it is the cheaper kernel and the only move that frees memory
    costs more than the blocks it would let keep theirs save), fill keeps one block."""
    problem = _stack()
    wide = Problem(problem.names, problem.node_cost[:BLOCKS] + (np.array([1.0, 9.0]),), problem.node_memory,
                   problem.node_workspace, problem.edges, LIMIT)
    choice, cost = improve(wide, (0,) * (BLOCKS + 1))
    assert sorted(choice[:BLOCKS]) == [0, 0, 0, 1] and choice[BLOCKS] == 0 and _close(cost, 8.0)
    assert _close(cost, solve_brute(wide).objective)


def _coupled() -> Problem:
    """Four blocks of two layers, each fast and large (cost 1, memory 3) or slow and small (cost 2,
    memory 1), a reshard of 5 between a block's two layers when they differ, and a one-candidate
    layer between blocks (a residual stream): room for two blocks to be fast."""
    names, cost, memory, workspace, edges = [], [], [], [], []
    for i in range(BLOCKS):
        names += [f"a{i}", f"b{i}", f"join{i}"]
        cost += [np.array([2.0, 1.0]), np.array([2.0, 1.0]), np.array([0.0])]
        memory += [np.array([1.0, 3.0]), np.array([1.0, 3.0]), np.array([0.0])]
        workspace += [np.zeros(2), np.zeros(2), np.zeros(1)]
        a = 3 * i
        edges += [Edge(a, a + 1, np.array([[0.0, 5.0], [5.0, 0.0]])), Edge(a + 1, a + 2, np.zeros((2, 1)))]
        if i + 1 < BLOCKS:
            edges.append(Edge(a + 2, a + 3, np.zeros((1, 2))))
    return Problem(tuple(names), tuple(cost), tuple(memory), tuple(workspace), tuple(edges), 2.0 * BLOCKS + 8.0)


def test_a_blocks_layers_switch_together_toward_the_other_side_of_the_multiplier():
    """Every block is fast below the multiplier and slow above it: the relaxation's fitting
    assignment has every block slow, with room left for two. No move of one layer or one edge's
    two ends gets there (a lone layer pays the reshard); moving a block's two layers at once to the
    minimiser that does not fit does, to the optimum."""
    problem = _coupled()
    free = solve_brute(problem.with_memory_limit(None))
    got = relax(problem, free.objective, free_choice=free.choice)
    slow, fast = (0, 0, 0) * BLOCKS, (1, 1, 0) * BLOCKS
    assert got.choice == slow and got.near == fast and _close(got.cost, 16.0)
    assert _close(improve(problem, got.choice)[1], 16.0)
    choice, cost = improve(problem, got.choice, toward=got.near)
    assert _close(cost, 12.0) and _close(cost, solve_brute(problem).objective)
    assert fits(problem, evaluate(problem, choice)[1]) and sum(choice) == 4
    assert _close(solve_lagrange(problem).objective, 12.0)


@pytest.mark.parametrize("seed", SEEDS[::4])
def test_moves_keep_the_assignment_fitting_and_never_dearer(seed):
    problem = binding_problem(seed)
    if problem is None:
        pytest.skip("the unconstrained optimum already has the least memory")
    best = solve_brute(problem).objective
    got = relax(problem, solve_brute(problem.with_memory_limit(None)).objective)
    starts = [(min_memory(problem)[1], None), (got.choice, None), (got.choice, got.near)]
    for start, toward in starts:
        choice, cost = improve(problem, start, toward=toward)
        objective, memory = evaluate(problem, choice)
        assert fits(problem, memory) and _close(cost, objective)
        assert objective <= evaluate(problem, start)[0] * (1 + 1e-12) and objective >= best - 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_the_largest_workspace_outside_a_move_is_the_max_over_the_other_nodes(seed):
    """_Moves._other_ws keeps the workspaces' order until a node moves: after any moves it answers
    the max over the nodes outside the move, as a max over them computes it."""
    rng = np.random.default_rng(seed)
    n, k = 9, 3
    ws = tuple(rng.integers(0, 4, k).astype(float) for _ in range(n))  # ties on purpose
    zeros = tuple(np.zeros(k) for _ in range(n))
    problem = Problem(tuple(map(str, range(n))), zeros, zeros, ws, (), 1.0)
    moves = _Moves(problem, [0] * n)
    for _ in range(30):
        nodes = [int(v) for v in rng.choice(n, size=int(rng.integers(1, 7)), replace=False)]
        rest = [moves.ws[v] for v in range(n) if v not in nodes]
        assert moves._other_ws(nodes) == (max(rest) if rest else 0.0)
        moves.set(int(rng.integers(n)), int(rng.integers(k)))


def _freeing_one_at_a_time(moves: _Moves) -> list:
    """The freeing moves priced node by node and edge by edge (the reference the grouped pricing
    of _Moves.freeing must equal, float for float and in the same order)."""
    p, c = moves.p, moves.c
    total = moves.summed + float(moves.ws.max())
    ranked = []
    for v in range(p.num_nodes):
        freed = total - moves.needs(v)
        frees = freed > 0
        if frees.any():
            per_byte = np.where(frees, moves.delta(v) / np.where(frees, freed, 1.0), np.inf)
            j = int(np.argmin(per_byte))
            ranked.append((float(per_byte[j]), ((v, j),)))
    for (u, v), costs in moves.between.items():
        joint = moves.delta(u)[:, None] + moves.delta(v)[None, :]
        for m in costs:
            joint = joint + (m - m[:, [c[v]]] - m[[c[u]], :] + m[c[u], c[v]])
        needs = (moves.summed - moves.mem[u] - moves.mem[v] + p.node_memory[u][:, None] + p.node_memory[v][None, :]
                 + np.maximum(np.maximum(moves._other_ws([u, v]), p.node_workspace[u][:, None]),
                              p.node_workspace[v][None, :]))
        freed = total - needs
        frees = freed > 0
        if frees.any():
            per_byte = np.where(frees, joint / np.where(frees, freed, 1.0), np.inf)
            i, j = np.unravel_index(int(np.argmin(per_byte)), per_byte.shape)
            ranked.append((float(per_byte[i, j]), ((u, int(i)), (v, int(j)))))
    ranked.sort(key=lambda t: t[0])
    first: dict[float, tuple] = {}
    for price, move in ranked:
        first.setdefault(price, move)
    return list(first.values())


@pytest.mark.parametrize("seed", range(40))
def test_freeing_moves_priced_in_groups_equal_one_at_a_time(seed):
    """_Moves.freeing prices the nodes of a candidate count and the edges of a shape together: the
    same moves at the same prices in the same order as one at a time, on problems with
    workspaces (ties among them, or none) and parallel edges, over a few moves."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    sizes = rng.integers(1, 4, n)
    cost = tuple(rng.random(k) for k in sizes)
    memory = tuple(rng.integers(1, 5, k).astype(float) for k in sizes)
    workspace = tuple(rng.integers(0, 3, k).astype(float) if seed % 2 else rng.random(k) * 3 for k in sizes)
    edges = tuple(Edge(u, v, rng.random((sizes[u], sizes[v]))) for u in range(n) for v in range(u + 1, n)
                  if rng.random() < 0.5)
    edges += edges[:2]  # parallel edges
    problem = Problem(tuple(map(str, range(n))), cost, memory, workspace, edges, float(sum(m.max() for m in memory)))
    moves = _Moves(problem, [int(rng.integers(k)) for k in sizes])
    for _ in range(4):
        got = moves.freeing()
        assert got == _freeing_one_at_a_time(moves)
        if not got:
            break
        moves.apply(got[int(rng.integers(len(got)))])
