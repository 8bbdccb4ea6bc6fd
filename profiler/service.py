"""What the profile commands do, as library calls (the CLI in dnnplan/commands/profile.py stays thin)."""

from __future__ import annotations

import datetime
import os
import platform
from dataclasses import dataclass

from costmodel.calls.algorithms import CONV_ALGORITHMS
from costmodel.machine.loading import load_machine
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from costmodel.calls.kernel_call import KernelCall, split_key
from costmodel.choices.precision import DATASHEET_ONLY, PRECISIONS, get_precision, with_precision
from costmodel.compute.profile_table import ProfileTable
from costmodel.frameworks.host_fragment import host_fragment
from kernels.cuda import libs
from kernels.cuda.precision import set_precision
from kernels.xp import array_module
from networks.errors import DnnplanError, short
from networks.loader import load_network
from profiler.collect import conv_grid, gemm_grid, network_calls
from profiler.context import default_batch
from profiler.tables.fingerprint import fingerprint
from profiler.timing.gpu import GPU_POLICY, GPU_QUICK
from profiler.timing.harness import QUICK, TimingPolicy
from profiler.timing.host_dispatch import HostDispatch, measure_host
from profiler.run import ProfileRun, profile_calls
from profiler.tables.store import cache_path, open_for_device

GRID_MODES = ("gemm", "conv")


def parse_ints(text: str, what: str, most: int) -> list[int]:
    """``--what``'s comma-separated integers, each from 1 to ``most``; at most 64 of them."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 1 and not all(parts):
        raise DnnplanError(f"--{what} {short(text)} has an empty item", hint=f"write --{what} "
                           f"{','.join(p for p in parts if p) or 'N,M'}")
    parts = [part for part in parts if part]
    if len(parts) > 64:
        raise DnnplanError(f"--{what} lists {len(parts)} values; at most 64 are taken")
    try:
        out = [int(part) for part in parts]
    except ValueError:
        raise DnnplanError(f"--{what} must be comma-separated integers, got {short(text)}") from None
    if not out or any(not 1 <= v <= most for v in out):
        raise DnnplanError(f"--{what} must list whole numbers from 1 to {most:,}, got {short(text)}")
    return out


def device_peak_flops(fp: dict, threads: int) -> float | None:
    """The datasheet peak of the profiled device in the table's precision: the local machine's
    core peak times threads on a CPU, a shipped machine's GPU when the name matches, else None."""
    try:
        if fp["backend"] == "numpy":
            return load_machine("local").device.peak_flops["float32"] * threads
        matmul = get_precision(str(fp.get("precision") or "fp32")).matmul
        for tag, name in (("H100", "dgx-h100"), ("A100", "dgx-a100")):
            if tag in fp["device"]:
                return load_machine(name).device.peak_flops.get(matmul)
    except DnnplanError:
        return None
    return None


@dataclass
class ProfileRequest:
    target: str                 # a network, or a grid mode ("gemm", "conv")
    devices: list[int]
    batch: int | None = None    # global batch; default 32 per device
    backend: str = "numpy"
    threads: int = 1
    out: str | None = None      # default: the per-user cache of this device
    max_seconds: float | None = None
    sizes: list[int] | None = None       # gemm grid sizes / conv spatial sizes
    channels: list[int] | None = None    # conv grid
    algorithms: list[str] | None = None
    quick: bool = False
    precision: str = "fp32"     # costmodel.choices.precision; a GPU's kernels run in any, numpy's in fp32


def plan_calls(req: ProfileRequest) -> list[KernelCall]:
    unknown = [a for a in req.algorithms or () if a not in CONV_ALGORITHMS]
    if unknown:
        raise DnnplanError(f"unknown convolution algorithm {short(unknown[0])} in --algorithms",
                           hint=f"use some of {', '.join(CONV_ALGORITHMS)}")
    if req.target == "gemm":
        return gemm_grid(req.sizes or [64, 128, 256, 512])
    if req.target == "conv":
        return conv_grid(req.devices if req.batch is None else [req.batch], req.channels or [16, 32, 64],
                         req.sizes or [14, 28, 56], algorithms=req.algorithms or (DEFAULT_CONV_ALGORITHM,),
                         passes=("fwd", "bwd_data", "bwd_weights"))
    net = with_precision(load_network(req.target), req.precision)
    # a GPU's kernel set runs attention fused (flash, the default of the GPU machines) or materialised
    attention = ("", "flash") if req.backend == "cupy" else ("",)
    return network_calls(net, req.devices, lambda p: req.batch or default_batch(p, net), req.algorithms, attention)


def run_profile(req: ProfileRequest, progress=None) -> tuple[ProfileRun, str, dict]:
    """Profile the request's calls into its table (resuming); returns (run, table path, fingerprint).
    Ctrl-C: what was measured is saved and :class:`profiler.run.ProfileInterrupted` raised."""
    if req.threads < 1:
        raise DnnplanError(f"--threads must be positive, got {req.threads}")
    if req.precision not in PRECISIONS:  # named with the precisions a kernel set times (fp8 is the datasheet's)
        timed = ", ".join(name for name in PRECISIONS if name not in DATASHEET_ONLY)
        raise DnnplanError(f"unknown --precision {short(req.precision)}",
                           hint=f"profile in one of {timed}; the numpy kernels run fp32 alone")
    if req.precision in DATASHEET_ONLY:
        raise DnnplanError(f"--precision {req.precision} is priced from the GPU datasheet; no kernel set times it",
                           hint="profile in bf16 (--precision bf16), and predict fp8 from the datasheet")
    if req.backend == "numpy" and req.precision != "fp32":
        raise DnnplanError(f"--precision {req.precision} is timed on a GPU; the numpy kernels run fp32",
                           hint="profile with --backend cupy on a machine with an NVIDIA GPU, or use --precision fp32")
    xp = array_module(req.backend)
    if req.backend == "cupy":
        libs.cupy()  # one line naming what to install, before any kernel runs
        set_precision(req.precision)
    fp = fingerprint(req.backend, req.threads, precision=req.precision)
    out = req.out or str(cache_path(fp))
    table = open_for_device(out, fp)
    calls = plan_calls(req)
    if req.backend == "cupy":
        policy = GPU_QUICK if req.quick else GPU_POLICY
    else:
        policy = QUICK if req.quick else TimingPolicy()
    run = profile_calls(calls, table, xp, threads=req.threads, policy=policy, max_seconds=req.max_seconds,
                        out=out, progress=progress, peak_flops=device_peak_flops(fp, req.threads))
    return run, out, fp


def run_summary(run: ProfileRun, fp: dict, threads: int, path: str) -> dict:
    flops = sum(e.flops for e in run.measured.values())
    secs = sum(e.median_s for e in run.measured.values() if e.flops > 0)
    best = max((e.flops / e.median_s for e in run.measured.values() if e.flops > 0), default=0.0)
    peak = device_peak_flops(fp, threads)
    return {"table": path, "device": fp["device"], "backend": fp["backend"], "threads": threads,
            "measured": len(run.measured), "resumed": run.skipped, "left": len(run.left),
            "interrupted": run.interrupted,
            "too_long": None if run.too_long is None else {"kernel": run.too_long[0].key,
                                                          "least_seconds": run.too_long[1]},
            "failed": run.failed, "seconds": run.seconds, "entries": len(run.table.entries),
            "achieved_flops": flops / secs if secs else 0.0, "best_flops": best, "peak_flops": peak,
            "by_kernel": _by_kernel(run)}


def _by_kernel(run: ProfileRun) -> list[dict]:
    agg: dict[tuple[str, str], list[float]] = {}
    for key, e in run.measured.items():
        kernel, _, _, algo = split_key(key)
        a = agg.setdefault((kernel, algo), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += e.median_s
        a[2] += e.flops
    return [{"kernel": k, "algo": a, "count": int(v[0]), "seconds": v[1],
             "flops_per_s": v[2] / v[1] if v[1] else 0.0} for (k, a), v in sorted(agg.items())]


def table_info(table: ProfileTable) -> dict:
    return {"device": table.fingerprint.get("device"), "fingerprint": table.short_id, "entries": len(table.entries),
            "comm": bool(table.comm)}


def host_profile(framework: str, calls: int = 2000, repeats: int = 7) -> tuple[HostDispatch, dict]:
    """`dnnplan profile --host`: ``framework``'s per-op dispatch cost timed on this computer
    (profiler.timing.host_dispatch), and the framework file fragment that states it
    (costmodel.frameworks.host_fragment), naming this computer's processor, its cores and today."""
    got = measure_host(framework, calls, repeats)
    where = f"{platform.machine()}, {os.cpu_count()} cores"
    return got, host_fragment(got.op_s, got.framework, got.version, got.device, where,
                              datetime.date.today().isoformat())
