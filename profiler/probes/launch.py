"""Launching a probe or a benchmark as a child job: the ``mpiexec`` found, and the environment the
child gets (its threads, and this checkout first on its path so ``python -m executor...`` imports
these modules)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from networks.errors import DnnplanError


#: The environment variables that size a process's BLAS and OpenMP thread pools.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def probe_env(threads: int | None = None) -> dict[str, str]:
    """The environment of a probe's child process: this one's, ``threads`` BLAS/OpenMP threads
    when given, and this checkout first on PYTHONPATH (its ``python -m executor...`` must import
    these modules)."""
    env = dict(os.environ, **({} if threads is None else {v: str(threads) for v in THREAD_VARS}))
    root = str(Path(__file__).resolve().parents[2])  # the checkout holding profiler/probes/launch.py
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def find_mpiexec() -> str:
    """``mpiexec`` next to this Python (the mpich wheel's), else on PATH; a clear error if none."""
    here = Path(sys.executable).parent
    for name in ("mpiexec", "mpirun"):
        cand = here / name
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found:
            return found
    raise DnnplanError(f"no mpiexec found next to {sys.executable} or on PATH",
                       hint="install an MPI: `pip install mpich` (the mpich wheel), or your system's MPI")
