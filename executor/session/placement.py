"""Where a plan runs (the host or GPUs), chosen and checked before any rank starts.

``--device auto`` runs a plan where its profile table was timed (executor.backend.select); on
GPUs the table must be of the GPU model the run has (refused otherwise, unless
``--foreign-profile``: then a warning says whose kernel times the prediction uses), and the GPU
libraries must load (one line naming what to install, kernels.cuda.libs).
"""

from __future__ import annotations

from costmodel.compute.model import ComputeModel
from executor.backend.select import array_backend_for
from kernels.cuda import GPU_KERNELS_REVISION, libs
from networks.errors import DnnplanError
from planner.plan.plan import Plan
from profiler.tables.compatibility import check_gpu


def local_gpu_name() -> str:
    cp = libs.cupy()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])


def choose_device(plan: Plan, plan_path: str, compute: ComputeModel, device: str,
                  foreign_ok: bool) -> tuple[str, list[str]]:
    """(array backend, warnings) of a run of ``plan`` (``device``: ``--device``)."""
    backend = array_backend_for(device, compute.table)
    if backend == "numpy":
        return backend, []
    if plan.choices.zero and plan.choices.precision in ("fp16", "bf16"):
        raise DnnplanError(f"the plan shards {plan.choices.precision} training with ZeRO stage {plan.choices.zero}; "
                           "the executor "
                           "runs mixed precision without ZeRO", file=plan_path, field="zero",
                           hint="plan again with --zero 0 to run it on GPUs")
    warnings = []
    if compute.table is not None:
        fp = compute.table.fingerprint
        if fp.get("backend") == "cupy" and fp.get("gpu_kernels") != GPU_KERNELS_REVISION:
            warnings.append(f"the GPU profile's kernels are revision {fp.get('gpu_kernels', 'none (cupy array code)')}, "
                            f"this build's revision {GPU_KERNELS_REVISION}: kernel times may differ from the "
                            "prediction (re-profile with --backend cupy)")
        name = local_gpu_name()
        line = check_gpu(compute.table, name, foreign_ok, f"but this run has {name}")
        if line:
            warnings.append(line)
        if compute.table.fingerprint.get("backend") != "cupy":
            warnings.append("the profile table was timed on the host (numpy): GPU times will differ from "
                            "the prediction (profile with --backend cupy)")
    return backend, warnings
