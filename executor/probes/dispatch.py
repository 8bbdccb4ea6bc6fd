"""The executor's own time per layer pass (``dispatch``), measured on a probe network.

Between two kernels the runtime runs Python: the layer's op wrapper around its kernel, the step
loop, the activation and gradient bookkeeping (executor.runtime.stage). No kernel timing contains that
time, and after a kernel that moved megabytes the Python's code and objects come from memory, so
the time after a pass grows with the bytes its kernels moved. It is a few percent of a small
network's step; docs/executor.md gives the figures measured.

:func:`measure` runs the probe (``executor/probes/dispatch.yaml``, a small residual CNN with the
kinds of layer the cnn zoo networks have, not one of the networks the accuracy bench predicts)
in this process alone, data parallel on one rank with im2col convolutions, each span's start
recorded in a progress file as `dnnplan execute`'s ranks record it, and returns, per layer
pass (as the cost model counts them, :func:`costmodel.compute.dispatch.pass_bytes`), the bytes its
kernels move and, per timed step, the time from the end of its spans to the start of the next
span (:func:`after_passes`). The profiler runs it at three batches (``python -m executor.probes.dispatch``
in a child process, with the profile's threads and allocator; profiler.probes.dispatch), pools the passes
of all three by their bytes into half-decade bins and stores each bin as a ``dispatch/h<bin>``
entry of the table's executor mapping; the cost model prices a pass by its bytes, linear in log
bytes between the bins (``ProfiledCompute.pass_dispatch_s``, ``LayerEstimate.dispatch_s``).

Priced instead by the probe's mean time per pass at each batch, placed at its passes' typical
bytes, lenet5's (batch 32, one rank) 31 passes came to 1.36 ms a step against 0.47 ms measured
outside its spans: the time after a pass follows that pass's bytes, not the average's
(2026-11-26, the 2-core development VM).

    python -m executor.probes.dispatch [--batches 1,8,64] [--steps 11] [--warmup 2] [--threads 1]   # one JSON line
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from costmodel.calls.algorithms import default_algorithms
from costmodel.compute.dispatch import pass_bytes
from costmodel.parallel.shard import local_layer
from costmodel.frameworks.uniform import uniform_strategies
from executor.runtime.run import run_plan
from executor.runtime.timers import ProgressFile, Timers
from executor.launch.worker import set_threads
from kernels.allocator import keep_freed_memory
from networks.analysis import consumers
from networks.ir import Network
from networks.loader import load_network
from planner.plan.plan import LayerPlan, Plan
from lifecycle.jobs import watch_launcher
from lifecycle.scratch import scratch_folder

PROBE = Path(__file__).resolve().parent / "dispatch.yaml"
#: The probe's batches: its passes moving from nothing to tens of megabytes.
PROBE_BATCHES = (1, 8, 64)


def probe_plan(net: Network, batch: int, ranks: int = 1) -> Plan:
    """The probe data parallel over ``ranks`` at ``batch`` samples, with im2col convolutions."""
    strategies, _ = uniform_strategies(net, ranks, batch, "data")
    algorithms = default_algorithms(net)
    layers = tuple(LayerPlan(layer.name, strategies[layer.name], algorithms.get(layer.name, ""))
                   for layer in net.layers)
    return Plan(str(PROBE), net.name, net.content_hash(), batch, ranks, "local", layers)


def probe_passes(net, batch: int) -> list[tuple[str, str, int]]:
    """(layer, span phase, bytes) of each layer pass of one step of ``net``, in the order of
    :func:`costmodel.compute.dispatch.pass_bytes`, data parallel on one rank with im2col convolutions:
    forward (``fwd_compute``), backward and each gradient sum (``bwd_compute``: the runtime
    sums a producer's gradients in its backward span), the update (``update``)."""
    plan = probe_plan(net, batch)
    strategies, algorithms = plan.strategies(), plan.algorithms()
    readers = consumers(net)
    out = []
    for layer in net.layers:
        got = pass_bytes(local_layer(layer, strategies[layer.name], batch), algorithms.get(layer.name, ""),
                         readers[layer.name])
        phases = ["fwd_compute", "bwd_compute"] + (["update"] if layer.weights else [])
        phases += ["bwd_compute"] * (len(got) - len(phases))
        out += [(layer.name, phase, b) for phase, b in zip(phases, got)]
    return out


def after_passes(timers, steps, passes: list[tuple[str, str, int]]) -> list[dict]:
    """Per pass, ``{"bytes", "samples_s"}`` with one sample per step: the time from the end of
    each of its spans to the start of the step's next span, plus an equal share of the step's
    time outside every span and gap (before its first span, after its last). A pass that shares
    its spans' (layer, phase) with an earlier one (a gradient sum in its producer's backward
    span) gets none of the gaps: they are the first one's."""
    keys = [(layer, phase) for layer, phase, _ in passes]
    first = {k: i for i, k in reversed(list(enumerate(keys)))}
    samples: list[list[float]] = [[] for _ in passes]
    for step in steps:
        spans = sorted((s for s in timers.spans if s.step == step), key=lambda s: s.start_s)
        gaps = [0.0] * len(passes)
        for a, b in zip(spans, spans[1:]):
            i = first.get((a.layer, a.phase))
            if i is not None:
                gaps[i] += max(b.start_s - a.end_s, 0.0)
        inside = sum(s.end_s - s.start_s for s in spans)
        rest = max(timers.step_wall[step] - inside - sum(gaps), 0.0) / max(len(passes), 1)
        for i, g in enumerate(gaps):
            samples[i].append(g + rest)
    return [{"bytes": b, "samples_s": s} for (_, _, b), s in zip(passes, samples)]


def measure(batch: int, steps: int = 11, warmup: int = 2, comm=None) -> list[dict]:
    """Per layer pass of the probe at ``batch``, its bytes and the time after it in each timed
    step (:func:`after_passes`)."""
    if comm is None:
        from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
        comm = MPI.COMM_SELF
    net = load_network(str(PROBE))
    timers = run_recorded(probe_plan(net, batch), net, comm, steps, warmup)
    return after_passes(timers, range(steps), probe_passes(net, batch))


def run_recorded(plan: Plan, net: Network, comm, steps: int, warmup: int) -> Timers:
    """The plan's spans over ``steps`` timed steps after ``warmup``, each span's start recorded in
    a progress file, as `dnnplan execute`'s ranks record it (executor.launch.worker)."""
    with scratch_folder("dispatch") as folder:
        progress = ProgressFile(folder, comm.Get_rank())
        try:
            timers = Timers(keep_spans=True, progress=progress)
            run_plan(plan, net, comm, steps=steps, warmup=warmup, timers=timers)
        finally:
            progress.close()
    return timers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m executor.probes.dispatch", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=11)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default=",".join(map(str, PROBE_BATCHES)))
    args = ap.parse_args(argv)
    watch_launcher()  # ends itself should dnnplan die without a word
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
        out.append({"batch": batch, "passes": measure(batch, args.steps, args.warmup)})
    print(json.dumps({"probes": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
