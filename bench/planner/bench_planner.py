"""Planner speed: `make_plan` end to end, and the reduced solver against the plain ILP.

    PYTHONPATH=. python bench/planner/bench_planner.py [--quick] [--ilp-limit S]

Figures go to docs/planner.md with the machine they were taken on (printed first).
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import DEFAULT_MACHINE, load_machine
from networks.loader import load_network
from planner.problem.build import build_problem
from planner.problem.solve import make_plan
from planner.solvers import prune_dominated, solve


def host() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(l.split(":", 1)[1].strip() for l in fh if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{cpu}, {os.cpu_count()} CPUs, load {load:.1f}, Python {platform.python_version()}"


def timed(fn, repeat=3):
    """(first run, best of ``repeat``, result): the first run is cold (costmodel memo caches empty)."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return times[0], min(times), out


def bench_make_plan(name: str, p: int, machine, compute, repeat: int) -> None:
    net = load_network(name)
    cold, secs, plan = timed(lambda: make_plan(net, name, 32 * p, p, machine, compute), repeat)
    s = plan.solver
    print(f"make_plan {name:9s} p={p:5d}: cold {cold:6.2f} s, warm {secs:6.2f} s  (build {s['build_s']:.2f} s, solve {s['solve_s']:.3f} s, "
          f"{s['layers']} layers, {s['candidates']} candidates, {s['reshard_pairs']} reshard pairs; "
          f"step {plan.step_s * 1e3:.3f} ms, data parallel {plan.baselines[0].step_s * 1e3:.3f} ms)")
    _, secs_nb, _ = timed(lambda: make_plan(net, name, 32 * p, p, machine, compute, with_baselines=False), repeat)
    print(f"   without baselines: {secs_nb:6.2f} s")


def bench_reduced_vs_ilp(name: str, p: int, machine, compute, ilp_limit: float) -> None:
    """The same pruned instance (fastest algorithm per strategy) through both solvers."""
    net = load_network(name)
    built = build_problem(net, 32 * p, p, machine, compute, None)
    prob, _ = prune_dominated(built.restrict(built.fastest))
    _, red_s, red = timed(lambda: solve(prob, "reduced"))
    t = time.perf_counter()
    ilp = solve(prob, "ilp", time_limit_s=ilp_limit)
    ilp_s = time.perf_counter() - t
    same = abs(ilp.objective - red.objective) <= 1e-9 * red.objective
    print(f"{name:9s} p={p:5d}: {prob.num_nodes} nodes, {sum(prob.sizes)} candidates after pruning; "
          f"reduced {red_s:.4f} s, plain ILP {ilp_s:.2f} s ({ilp.status}, limit {ilp_limit:g} s) -> "
          f"{ilp_s / red_s:.0f}x; same objective: {same} ({red.objective:.9g} vs {ilp.objective:.9g})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="one repetition, small ILP comparisons only")
    ap.add_argument("--ilp-limit", type=float, default=120.0)
    args = ap.parse_args()
    machine = load_machine(DEFAULT_MACHINE)
    compute = Roofline(machine)
    rep = 1 if args.quick else 3
    print(f"host: {host()}; machine model {machine.name}")
    bench_make_plan("resnet50", 1024, machine, compute, rep)  # first in the process: its first run is cold
    bench_make_plan("resnet152", 4096, machine, compute, rep)  # other p: other strategies, nearly cold
    for name, p in (("resnet18", 8), ("resnet50", 16), ("resnet50", 64)):
        bench_reduced_vs_ilp(name, p, machine, compute, args.ilp_limit)
    if not args.quick:
        bench_reduced_vs_ilp("resnet50", 1024, machine, compute, args.ilp_limit)


if __name__ == "__main__":
    main()
