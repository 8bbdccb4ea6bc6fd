"""Timing one kernel call on a GPU: CUDA events around single calls, operands rotated so no repeat
finds its inputs in the L2 cache, and what the call chose (a convolution's cuDNN engine).

A training step runs each kernel once between other layers' work, on activations no earlier
kernel left in the L2 cache (50 MB on an H100) unless they were just written. A loop over one set
of operands would time a small layer from L2 and price it below the step; so each call is built
:func:`rotation` times, on fresh operands (together at least twice the L2 cache), and sample ``i``
runs set ``i mod R``. Each sample is one call between two events on the current stream, queued
behind a short busy-wait kernel (:data:`SPIN_S`) so the device is still busy while the host
enqueues the call: the events time the device's work, as in a step where the host queues kernels
ahead of the device (the executor's spans are events too, executor.runtime.timers). The first runs of each set are warm-up: they build cuDNN graphs, choose engines
(kernels.cuda.conv) and compile the fused passes.
"""

from __future__ import annotations

import math
import time
from types import ModuleType

from costmodel.calls.kernel_call import KernelCall
from costmodel.compute.profile_table import Entry
from kernels.cuda.conv import last_choice
from kernels.cuda.launch import spin
from profiler.timing.harness import TimingPolicy, build, enough, summarize

#: How a GPU call is timed: GPU times are steady, so few samples settle the median
GPU_POLICY = TimingPolicy(cold=False, warmup=2, min_reps=5, max_reps=30, rel_ci=0.02, time_cap_s=0.5)
GPU_QUICK = TimingPolicy(cold=False, warmup=1, min_reps=3, max_reps=7, rel_ci=0.05, time_cap_s=0.2)
DEFAULT_L2_BYTES = 50 * 2**20
#: The device kept busy before each timed call while the host enqueues it (kernels.cuda spin): a
#: step's kernels run back to back from the host's queue, so their time is the device's alone
SPIN_S = 2e-4
MAX_SETS = 8


def rotation(call_bytes: int, l2_bytes: int = DEFAULT_L2_BYTES, most: int = MAX_SETS) -> int:
    """Operand sets whose bytes together are at least twice the L2 cache (1 for a call that
    alone is larger)."""
    if call_bytes <= 0:
        return most
    return int(max(1, min(most, math.ceil(2 * l2_bytes / call_bytes))))


def l2_bytes(xp: ModuleType) -> int:
    """The current device's L2 cache (the runtime's ``l2CacheSize``), or 50 MB."""
    try:
        props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
        return int(props.get("l2CacheSize") or DEFAULT_L2_BYTES)
    except Exception:  # noqa: BLE001 - a property this cupy does not report
        return DEFAULT_L2_BYTES


def conv_record(call: KernelCall) -> dict | None:
    """The engine a convolution call ran (kernels.cuda.conv.Choice) as a table record."""
    choice = last_choice()
    if not call.kernel.startswith("conv2d.") or choice is None:
        return None
    return {"engine": str(choice.engine), "workspace_bytes": int(choice.workspace_bytes), "ran": str(choice.ran)}


def time_call_gpu(call: KernelCall, xp: ModuleType, policy: TimingPolicy = GPU_POLICY,
                  l2: int | None = None) -> tuple[Entry, dict | None]:
    """(timing, record) of one call (module docstring)."""
    sets = [build(call, xp) for _ in range(rotation(call.bytes, l2 or l2_bytes(xp)))]
    for run in sets:
        for _ in range(max(1, policy.warmup)):
            run()
    xp.cuda.get_current_stream().synchronize()
    t_start = time.perf_counter()
    samples: list[float] = []
    start, end = xp.cuda.Event(), xp.cuda.Event()
    while True:
        run = sets[len(samples) % len(sets)]
        spin(SPIN_S)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(xp.cuda.get_elapsed_time(start, end) / 1e3)
        if enough(samples, call, policy, t_start):
            break
    return summarize(samples, call.flops, call.bytes), conv_record(call)
