"""The device fingerprint a profile table records, so a table is never silently used elsewhere."""

from __future__ import annotations

import platform
from typing import Any

import numpy
from threadpoolctl import threadpool_info

import kernels
from costmodel.machine.loading import usable_cores
from kernels.cuda import GPU_KERNELS_REVISION, libs
from kernels.xp import array_module
from networks.errors import DnnplanError


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def _memory_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _blas() -> str:
    try:
        libs = [f"{i.get('internal_api')} {i.get('version')}" for i in threadpool_info() if i.get("user_api") == "blas"]
        return ", ".join(sorted(set(libs))) or "unknown"
    except Exception:  # noqa: BLE001 - informational only
        return "unknown"


def fingerprint(backend: str = "numpy", threads: int = 1, concurrency: int = 1,
                precision: str = "fp32") -> dict[str, Any]:
    """Device, core count, memory, library versions and thread count of this process's device;
    ``concurrency`` (recorded when above 1): how many ranks share the machine while it is timed;
    ``precision`` (recorded when not fp32, part of the table's identity): what the kernels ran in.

    On a GPU (``backend`` cupy): the GPU's name, its SM count as ``cores``, its memory, L2 cache,
    compute capability, the driver's and CUDA runtime's versions, and cuDNN's, cuBLAS's and NCCL's
    (kernels.cuda.libs.versions)."""
    fp: dict[str, Any] = {"backend": backend, "threads": int(threads), "numpy": numpy.__version__,
                          "blas": _blas(), "python": platform.python_version(),
                          "kernels": kernels.KERNELS_REVISION}
    if concurrency > 1:
        fp["concurrency"] = int(concurrency)
    if precision != "fp32":
        fp["precision"] = precision
    if backend == "cupy":
        cp = array_module("cupy")
        try:
            dev = cp.cuda.Device()
            props = cp.cuda.runtime.getDeviceProperties(dev.id)
            name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            fp.update(device=name, cores=int(props["multiProcessorCount"]),
                      memory_bytes=int(props["totalGlobalMem"]), l2_bytes=int(props.get("l2CacheSize", 0)),
                      compute_capability=f"{props.get('major', '?')}.{props.get('minor', '?')}")
            fp.update(libs.versions())
            fp["gpu_kernels"] = GPU_KERNELS_REVISION
        except DnnplanError:
            raise
        except Exception as err:  # noqa: BLE001
            raise DnnplanError(f"cannot query the CUDA device: {err}", hint="use --backend numpy") from None
    else:
        fp.update(device=_cpu_model(), cores=usable_cores(), memory_bytes=_memory_bytes())
    return fp
