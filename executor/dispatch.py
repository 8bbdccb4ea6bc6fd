"""The executor's own time per layer pass (``dispatch``), measured on a probe network.

Between two kernels the runtime runs Python: the layer's op wrapper around its kernel, the step
loop, the activation and gradient bookkeeping (executor.runtime). No kernel timing contains that
time, and after a kernel that moved megabytes the Python's code and objects come from memory, so
the time grows with the bytes the kernels before it moved. It is a few percent of a small
network's step; docs/executor.md gives the figures measured.

:func:`measure` runs the probe (``executor/probes/dispatch.yaml``, a small residual CNN with the
kinds of layer the cnn zoo networks have, not one of the networks the accuracy bench predicts)
in this process alone, data parallel on one rank with im2col convolutions, and returns per timed
step (step wall time - time inside the step's spans) / layer passes, passes as the cost model
counts them (:func:`costmodel.layer_cost.pass_bytes`), with the probe's typical bytes per pass.
The profiler runs it at two batches (``python -m executor.dispatch`` in a child process, with the
profile's threads and allocator; profiler.dispatch) and stores each as a ``dispatch/b<batch>``
entry of the table's executor mapping; the cost model prices a pass between the two by its bytes
(``ProfiledCompute.pass_dispatch_s``, ``LayerEstimate.dispatch_s``).

    python -m executor.dispatch [--batches 8,64] [--steps 11] [--warmup 2] [--threads 1]   # one JSON line
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from costmodel.compute import default_algorithms
from costmodel.layer_cost import pass_bytes
from costmodel.layer_layouts import local_layer
from costmodel.uniform import uniform_strategies
from executor.run import run_plan
from executor.timers import Timers
from executor.worker import set_threads
from kernels.allocator import keep_freed_memory
from networks.analysis import consumers
from networks.ir import Network
from networks.loader import load_network
from planner.plan import LayerPlan, Plan

PROBE = Path(__file__).resolve().parent / "probes" / "dispatch.yaml"
#: The probe's batches: its kernels moving about a megabyte per pass, and about ten.
PROBE_BATCHES = (8, 64)


def probe_plan(net: Network, batch: int, ranks: int = 1) -> Plan:
    """The probe data parallel over ``ranks`` at ``batch`` samples, with im2col convolutions."""
    strategies, _ = uniform_strategies(net, ranks, batch, "data")
    algorithms = default_algorithms(net)
    layers = tuple(LayerPlan(layer.name, strategies[layer.name], algorithms.get(layer.name, ""))
                   for layer in net.layers)
    return Plan(str(PROBE), net.name, net.content_hash(), batch, ranks, "local", layers)


def probe_passes(net, batch: int) -> list[int]:
    """The bytes each layer pass of one step of ``net`` moves in its kernels, as the cost model
    counts passes (:func:`costmodel.layer_cost.pass_bytes`), data parallel on one rank with im2col
    convolutions."""
    plan = probe_plan(net, batch)
    strategies, algorithms = plan.strategies(), plan.algorithms()
    readers = consumers(net)
    return [b for layer in net.layers
            for b in pass_bytes(local_layer(layer, strategies[layer.name], batch),
                                algorithms.get(layer.name, ""), readers[layer.name])]


def typical_bytes(per_pass: list[int]) -> int:
    """The geometric mean of the bytes per pass (the passes span four orders of magnitude)."""
    return int(round(math.exp(statistics.fmean(math.log(max(b, 1)) for b in per_pass))))


def outside_per_pass(timers, steps, passes: int) -> list[float]:
    """Per step, (wall time - time inside its spans) / ``passes``."""
    inside: dict[int, float] = {}
    for span in timers.spans:
        inside[span.step] = inside.get(span.step, 0.0) + (span.end_s - span.start_s)
    return [max(timers.step_wall[s] - inside.get(s, 0.0), 0.0) / passes for s in steps]


def measure(batch: int, steps: int = 11, warmup: int = 2, comm=None) -> tuple[list[float], int]:
    """(seconds outside the spans per layer pass, one per timed step; the probe's typical bytes
    per pass) for the probe at ``batch``."""
    if comm is None:
        from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
        comm = MPI.COMM_SELF
    net = load_network(str(PROBE))
    plan = probe_plan(net, batch)
    timers = Timers(keep_spans=True)
    run_plan(plan, net, comm, steps=steps, warmup=warmup, timers=timers)
    per_pass = probe_passes(net, batch)
    return outside_per_pass(timers, range(steps), len(per_pass)), typical_bytes(per_pass)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executor.dispatch", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default=",".join(map(str, PROBE_BATCHES)))
    args = ap.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",")]
    except ValueError:
        ap.error(f"--batches takes comma-separated integers, got '{args.batches}'")
    if args.steps < 1 or args.warmup < 0 or args.threads < 1 or min(batches) < 1:
        ap.error("--steps, --threads and --batches must be positive, --warmup not negative")
    set_threads(args.threads)
    keep_freed_memory()
    out = []
    for batch in batches:
        samples, nbytes = measure(batch, args.steps, args.warmup)
        out.append({"batch": batch, "bytes_per_pass": nbytes, "samples_s": samples})
    print(json.dumps({"probes": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
