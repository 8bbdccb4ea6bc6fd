"""A stand-in for executor.runtime.run.run_plan that times no real kernels (launcher tests only).

Each layer's phases sleep a fixed time so the timers, the gather, the JSON and the trace are
exercised without depending on the runtime's speed. Faults for the launcher's tests, from the
environment: ``DNNPLAN_TEST_FAULT_RANK=R`` makes rank R raise before running
(``DNNPLAN_TEST_FAULT_KIND=user`` raises a DnnplanError, anything else a RuntimeError);
``DNNPLAN_TEST_HANG_S=S`` makes every rank sleep S seconds first; ``DNNPLAN_TEST_NAN_FROM_STEP=K``
makes the loss NaN from step K on.
"""

from __future__ import annotations

import os
import time

from executor.backend.host import HOST
from executor.check.gradients import CheckResult  # the runtime's own result types
from executor.runtime.graphs import step_mode
from executor.runtime.run import RunResult
from networks.errors import DnnplanError


def _faults(rank: int) -> None:
    hang = os.environ.get("DNNPLAN_TEST_HANG_S")
    if hang:
        time.sleep(float(hang))
    fault = os.environ.get("DNNPLAN_TEST_FAULT_RANK")
    if fault is not None and fault != "" and int(fault) == rank:
        if os.environ.get("DNNPLAN_TEST_FAULT_KIND") == "user":
            raise DnnplanError(f"injected fault on rank {rank} (DNNPLAN_TEST_FAULT_RANK)")
        raise RuntimeError(f"injected fault on rank {rank} (DNNPLAN_TEST_FAULT_RANK)")


def run_plan(plan, net, comm, *, steps=5, warmup=2, check=False, seed=0, timers=None, lr=0.01, momentum=0.9,
             after_step=None, backend=None, graphs=None):
    _faults(comm.Get_rank())
    step_s = []
    for step in range(warmup + steps):
        timers.begin_step(step)
        t = time.perf_counter()
        for layer in net.layers:
            with timers.span(layer.name, "fwd_compute"):
                time.sleep(0.001)
        if comm.Get_size() > 1:
            with timers.span(net.layers[-1].name, "grad_sync"):
                comm.Barrier()
        for layer in reversed(net.layers):
            with timers.span(layer.name, "bwd_compute"):
                time.sleep(0.002)
        timers.end_step()
        step_s.append(time.perf_counter() - t)
        if after_step is not None:  # the in-run timing, as executor.runtime.run.run_plan runs it
            after_step(step - warmup)
    chk = CheckResult(True, 1e-7, f"{net.layers[0].name}.weight", 1e-8, 1e-4) if check else None
    losses = [1.0] * (warmup + steps)
    diverge = os.environ.get("DNNPLAN_TEST_NAN_FROM_STEP")  # the loss turns NaN from this step on
    if diverge:
        losses[int(diverge):] = [float("nan")] * (len(losses) - int(diverge))
    mode = step_mode(plan, net, backend if backend is not None else HOST, steps, warmup, graphs)  # as run_plan says it
    return RunResult(1.0, losses, step_s[warmup:], chk, mode=mode)
