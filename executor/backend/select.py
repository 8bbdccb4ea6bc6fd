"""Which device a plan's ranks run on: one function, one branch per backend."""

from __future__ import annotations

from executor.backend.device import Backend
from executor.backend.host import HOST
from networks.errors import DnnplanError
from planner.plan import Plan

#: The array backends a profile can be taken on (its fingerprint's ``backend``, profiler.fingerprint).
ARRAY_BACKENDS = ("numpy", "cupy")


def select_backend(plan: Plan, array_backend: str = "numpy") -> Backend:
    """The backend that runs ``plan``: ``array_backend`` is the profile's (its fingerprint's
    ``backend``), the kernels the plan's prediction was timed with. numpy: the host (numpy arrays,
    MPI collectives, the host clock). A GPU backend is one more branch here (cupy: CUDA arrays and
    events, NCCL, or MPI staged through the host when ranks share a GPU)."""
    if array_backend == "numpy":
        return HOST
    if array_backend == "cupy":
        raise DnnplanError(f"plan {plan.network_name} was predicted from kernels timed with cupy, and the "
                           "executor runs on the host only (numpy + MPI)",
                           hint="plan with a profile taken with --backend numpy")
    raise DnnplanError(f"unknown array backend '{array_backend}'", hint=f"choose one of {', '.join(ARRAY_BACKENDS)}")
