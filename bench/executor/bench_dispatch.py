"""The executor's own time between kernels (dispatch): predicted from the probe against measured.

    PYTHONPATH=. python bench/executor/bench_dispatch.py [--json]

Runs the dispatch probe as the profiler does (profiler.probes.dispatch: ``python -m executor.probes.dispatch`` in
a child process, its passes binned by bytes), then runs one-rank, data-parallel plans of lenet5,
alexnet and ResNet-18 at 64x64 (bench/assets/resnet18-64.yaml) at a few batches, as `dnnplan
execute` runs them (each span's start recorded in a progress file), and compares the cost
model's dispatch term (``StepPrediction.dispatch_s``) with the step's time outside every span,
the median over 7 timed steps after 2 warm-up. The probe is not one of these networks. A
timing: run it on a quiet machine, and read the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from mpi4py import MPI

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.compute.profile_table import ProfileTable
from costmodel.compute.profiled import ProfiledCompute
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from executor.probes.dispatch import run_recorded
from executor.launch.worker import set_threads
from kernels.allocator import keep_freed_memory
from networks.loader import load_network
from planner.plan.plan import LayerPlan, Plan
from profiler.probes.dispatch import time_dispatch

RESNET = str(Path(__file__).resolve().parents[1] / "assets" / "resnet18-64.yaml")
#: (network, batch) on one rank
CASES = (("lenet5", 8), ("lenet5", 32), ("lenet5", 128), ("alexnet", 2), (RESNET, 2), (RESNET, 8))


def measured_outside(net, batch: int, steps: int = 7, warmup: int = 2) -> float:
    """Median over timed steps of the step's time outside every span, data parallel on one rank."""
    strategies, _ = uniform_strategies(net, 1, batch, "data")
    algorithms = default_algorithms(net)
    layers = tuple(LayerPlan(l.name, strategies[l.name], algorithms.get(l.name, "")) for l in net.layers)
    plan = Plan(net.name, net.name, net.content_hash(), batch, 1, "local", layers)
    timers = run_recorded(plan, net, MPI.COMM_SELF, steps, warmup)
    outside = []
    for step in range(steps):
        inside = sum(s.end_s - s.start_s for s in timers.spans if s.step == step)
        outside.append(timers.step_wall[step] - inside)
    return statistics.median(outside)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = ap.parse_args(argv)
    set_threads(1)
    keep_freed_memory()
    entries, why = time_dispatch()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 1
    machine = load_machine("local")
    compute = ProfiledCompute(ProfileTable({}, {}, {}, "<probe>", entries), Roofline(machine))
    rows = []
    for name, batch in CASES:
        net = load_network(name)
        strategies, _ = uniform_strategies(net, 1, batch, "data")
        predicted = predict_step(net, batch, strategies, default_algorithms(net), machine, compute).dispatch_s
        measured = measured_outside(net, batch)
        rows.append({"network": net.name, "batch": batch, "predicted_s": predicted, "measured_s": measured,
                     "error": measured / predicted - 1 if predicted > 0 else None})
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
        return 0
    print("| network, batch | predicted | measured | error |\n|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['network']}, {r['batch']} | {r['predicted_s'] * 1e3:.2f} ms | {r['measured_s'] * 1e3:.2f} ms "
              f"| {r['error']:+.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
