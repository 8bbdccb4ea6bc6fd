"""Which device a plan's ranks run on: one function, one branch per backend.

``dnnplan execute --device auto`` (the default) runs a plan where its profile was timed: a table
timed with ``--backend cupy`` runs on GPUs (executor.backend.cuda), any other on the host. A GPU
run pins each convolution to the cuDNN engine its profile table recorded for that call
(:func:`engine_pins`), so the executor runs the engines the prediction timed.
"""

from __future__ import annotations

from typing import Mapping

from costmodel.calls.kernel_call import split_key
from costmodel.compute.profile_table import ProfileTable, table_precision
from executor.backend.cuda import CudaBackend
from executor.backend.device import Backend
from executor.backend.host import HOST
from kernels.cuda.conv import pin_engines, pin_key
from networks.errors import DnnplanError
from planner.plan.plan import Plan

#: The array backends a profile can be taken on (its fingerprint's ``backend``, profiler.tables.fingerprint).
ARRAY_BACKENDS = ("numpy", "cupy")
#: ``dnnplan execute --device``: where the ranks run
DEVICES = ("auto", "host", "cuda")
#: The precisions the host runs (numpy kernels); a GPU runs every one of costmodel.choices.precision
HOST_PRECISIONS = ("fp32",)


def array_backend_for(device: str, table: ProfileTable | None) -> str:
    """``--device`` as an array backend: ``auto`` follows the profile table's backend."""
    if device not in DEVICES:
        raise DnnplanError(f"unknown --device '{device}'", hint=f"choose one of {', '.join(DEVICES)}")
    if device == "cuda":
        return "cupy"
    if device == "host":
        return "numpy"
    return "cupy" if table is not None and table.fingerprint.get("backend") == "cupy" else "numpy"


def engine_pins(table: ProfileTable | None) -> dict[tuple, str]:
    """The cuDNN engine each convolution call of a GPU table ran, keyed as kernels.cuda.conv pins
    them (pass, shape without the bias flag, dtype, algorithm, precision)."""
    if table is None or not table.records:
        return {}
    precision = table_precision(table.fingerprint)
    out = {}
    for key, rec in table.records.items():
        kernel, shape, dtype, algo = split_key(key)
        if kernel.startswith("conv2d.") and rec.get("engine"):
            out[pin_key(kernel.split(".", 1)[1], shape[:16], dtype, algo or "im2col", precision)] = rec["engine"]
    return out


def select_backend(plan: Plan, array_backend: str = "numpy", local_rank: int = 0,
                   engines: Mapping[tuple, str] | None = None) -> Backend:
    """The backend that runs ``plan``: ``array_backend`` is the profile's (its fingerprint's
    ``backend``, or ``--device``). numpy: the host (numpy arrays, MPI collectives, the host clock).
    cupy: the GPU of ``local_rank`` (CUDA arrays and events, NCCL or MPI staged through the host
    when ranks share a GPU), in the plan's precision, convolutions pinned to ``engines``."""
    if array_backend == "numpy":
        if plan.choices.precision not in HOST_PRECISIONS:
            raise DnnplanError(f"plan {plan.network_name} is for {plan.choices.precision} training; the host runs fp32",
                               hint="run it on GPUs (--device cuda), or plan again with --precision fp32")
        return HOST
    if array_backend == "cupy":
        backend = CudaBackend(local_rank, plan.choices.precision)
        if engines:
            pin_engines(dict(engines))
        return backend
    raise DnnplanError(f"unknown array backend '{array_backend}'", hint=f"choose one of {', '.join(ARRAY_BACKENDS)}")
