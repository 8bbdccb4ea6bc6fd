"""Solver speed on synthetic instances shaped like the real ones (prints a table).

    python bench/planner/bench_solvers.py            # everything (a few minutes)
    python bench/planner/bench_solvers.py --quick    # skip ResNet-152-like

ResNet-like graphs: a stem chain (conv, bn, relu, pool), bottleneck blocks of eight nodes on the
main branch (conv, bn, relu, conv, bn, relu, conv, bn) joined to the skip by an add and a relu
(the first block of each stage also has a conv+bn on the skip), then pool, fc and loss. Every node
has ``k`` candidates; every edge a dense random matrix, zero on the diagonal ("same layout").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from planner.solvers import Edge, Problem, solve_reduced  # noqa: E402
from planner.solvers.ilp import solve_ilp  # noqa: E402

RESNET50 = (3, 4, 6, 3)
RESNET152 = (3, 8, 36, 3)


def resnet_like(stages: tuple[int, ...], k: int, seed: int = 0,
                memory_limit: float | None = None) -> Problem:
    """A ResNet-shaped problem with ``k`` candidates per node (see the module docstring)."""
    rng = np.random.default_rng(seed)
    names: list[str] = []
    edges: list[tuple[int, int]] = []

    def node(name: str, after: list[int]) -> int:
        names.append(name)
        edges.extend((p, len(names) - 1) for p in after)
        return len(names) - 1

    tail = -1
    for name in ("conv1", "bn1", "relu1", "pool1"):
        tail = node(name, [tail] if tail >= 0 else [])
    for s, blocks in enumerate(stages):
        for b in range(blocks):
            start, x = tail, tail
            for layer in ("conv_a", "bn_a", "relu_a", "conv_b", "bn_b", "relu_b", "conv_c", "bn_c"):
                x = node(f"s{s}b{b}.{layer}", [x])
            skip = start
            if b == 0:
                skip = node(f"s{s}b{b}.bn_ds", [node(f"s{s}b{b}.conv_ds", [start])])
            tail = node(f"s{s}b{b}.relu", [node(f"s{s}b{b}.add", [x, skip])])
    for name in ("avgpool", "fc", "loss"):
        tail = node(name, [tail])
    n = len(names)
    scale = 1e-3  # seconds

    def matrix() -> np.ndarray:
        m = rng.random((k, k)) * scale
        np.fill_diagonal(m, 0.0)
        return m

    return Problem(tuple(names), tuple(rng.uniform(0.5, 1.5, k) * scale for _ in range(n)),
                   tuple(rng.uniform(1e6, 1e8, k) for _ in range(n)),
                   tuple(rng.uniform(0, 1e9, k) for _ in range(n)),
                   tuple(Edge(u, v, matrix()) for u, v in edges), memory_limit)


def _time(fn, repeat: int = 1):
    best, result = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the ResNet-152-like instance")
    parser.add_argument("--ilp-time-limit-s", type=float, default=600.0)
    args = parser.parse_args()
    rows = []
    cases = [("ResNet-50-like", RESNET50, 200)]
    if not args.quick:
        cases.append(("ResNet-152-like", RESNET152, 300))
    for label, stages, k in cases:
        problem = resnet_like(stages, k)
        t, got = _time(lambda: solve_reduced(problem), repeat=2)
        rows.append((label, problem.num_nodes, k, "reduced", t, got.objective, got.status,
                     got.reduced_nodes))
    # the plain ILP cannot even be built at k = 200 (7 million edge variables): compare on
    # smaller k, same graph
    for k in (4, 8, 16):
        problem = resnet_like(RESNET50, k, seed=1)
        t_red, red = _time(lambda: solve_reduced(problem), repeat=3)
        t_ilp, ilp = _time(lambda: solve_ilp(problem, time_limit_s=args.ilp_time_limit_s))
        same = abs(red.objective - ilp.objective) <= 1e-9 * abs(ilp.objective)
        rows.append(("ResNet-50-like", problem.num_nodes, k, "reduced", t_red, red.objective,
                     red.status, red.reduced_nodes))
        rows.append(("ResNet-50-like", problem.num_nodes, k,
                     f"plain ILP ({ilp.solver}) = {t_ilp / t_red:.0f}x reduced, "
                     f"{'same' if same else 'DIFFERENT'} objective", t_ilp, ilp.objective,
                     ilp.status, ilp.reduced_nodes))
    # a binding memory limit: the reduced solver falls back to the ILP on the full (pruned) problem
    free = resnet_like(RESNET50, 8, seed=1)
    t_free, got = _time(lambda: solve_reduced(free))
    limit = got.memory * 0.97
    problem = free.with_memory_limit(limit)
    t, got = _time(lambda: solve_reduced(problem, time_limit_s=args.ilp_time_limit_s))
    rows.append(("ResNet-50-like", problem.num_nodes, 8, "memory limit 0.97x unconstrained: "
                 + got.solver, t, got.objective, got.status, got.reduced_nodes))
    print(f"{'instance':16} {'nodes':>5} {'k':>4} {'time_s':>9} {'objective':>12} "
          f"{'status':>8} {'left':>4}  solver")
    for label, n, k, how, t, obj, status, left in rows:
        print(f"{label:16} {n:5d} {k:4d} {t:9.3f} {obj:12.6f} {status:>8} {left:4d}  {how}")


if __name__ == "__main__":
    main()
