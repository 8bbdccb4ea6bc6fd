"""The GPU libraries, found and loaded on first use: cupy, cuDNN's Python frontend and its library.

Nothing here runs at import (a computer without CUDA imports :mod:`kernels` as before). What is
missing becomes one :class:`networks.errors.DnnplanError` line naming the package to install
(:data:`INSTALL`), which every command prints with exit code 2.

cuDNN's frontend (``import cudnn``) dlopens ``libcudnn.so.9`` from ``nvidia/cudnn/lib`` of the
running interpreter's site-packages, else from the loader's path. The CUDA 13 wheels put their
libraries in ``nvidia/cu13/lib`` (cuBLAS, NVRTC), where the frontend does not look, and
nvidia-cudnn-cu13 9.28 in ``nvidia/cudnn/lib`` (its wheel's listing, 2026-11-27), so to load it from
either :func:`cudnn` first loads every ``libcudnn*.so.9`` it finds under any ``nvidia/*/lib`` of
``sys.path`` (the sub-libraries before the main one, as PyTorch preloads them) and hands the
frontend that handle.
"""

from __future__ import annotations

import ctypes
import glob
import importlib
import os
import sys
from functools import lru_cache
from types import ModuleType

from networks.errors import DnnplanError

#: What `pip install` brings each piece (pyproject's gpu extras, docs/profiler.md "GPU")
INSTALL = {
    "cupy": "pip install 'dnnplan[gpu]' (CUDA 12: cupy-cuda12x) or 'dnnplan[gpu-cuda13]' (CUDA 13: cupy-cuda13x)",
    "cudnn": "pip install 'dnnplan[gpu]' or 'dnnplan[gpu-cuda13]' (nvidia-cudnn-frontend==1.16.0 with "
             "nvidia-cudnn-cu12 or -cu13)",
    "nccl": "pip install 'dnnplan[gpu]' or 'dnnplan[gpu-cuda13]' (nvidia-nccl-cu12 or -cu13)",
}


def missing(what: str, why: str) -> DnnplanError:
    """The one line a missing GPU library becomes."""
    return DnnplanError(f"the GPU path needs {what}, which cannot be loaded here ({why})", hint=INSTALL[what])


@lru_cache(maxsize=None)
def cupy() -> ModuleType:
    """cupy, with a device present."""
    try:
        cp = importlib.import_module("cupy")
    except Exception as err:  # ImportError, or a CUDA library that fails to load
        raise missing("cupy", f"{type(err).__name__}: {str(err)[:120]}") from None
    try:
        count = cp.cuda.runtime.getDeviceCount()
    except Exception as err:  # noqa: BLE001 - no driver, or a driver older than the runtime
        raise DnnplanError(f"cupy finds no usable CUDA device ({str(err)[:120]})",
                           hint="run on a machine with an NVIDIA GPU and its driver, or use --backend numpy") from None
    if count < 1:
        raise DnnplanError("cupy finds no CUDA device", hint="use --backend numpy")
    return cp


#: cuDNN 9's sub-libraries in the order they need each other (graph first), then the rest by name
CUDNN_ORDER = ("graph", "engines_precompiled", "engines_runtime_compiled", "heuristic", "ops", "cnn", "adv")


def _order(path: str) -> tuple[int, str]:
    part = os.path.basename(path)[len("libcudnn_"):-len(".so.9")]
    return (CUDNN_ORDER.index(part) if part in CUDNN_ORDER else len(CUDNN_ORDER), path)


def cudnn_library_paths(roots=None) -> list[str]:
    """Every ``libcudnn*.so.9`` under ``nvidia/*/lib`` of ``roots`` (default ``sys.path``), the
    sub-libraries first (:data:`CUDNN_ORDER`) and ``libcudnn.so.9`` itself last, from the first
    directory that has it."""
    for root in (roots if roots is not None else sys.path):
        for libdir in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib"))):
            found = glob.glob(os.path.join(libdir, "libcudnn*.so.9"))
            if any(os.path.basename(p) == "libcudnn.so.9" for p in found):
                return sorted((p for p in found if os.path.basename(p) != "libcudnn.so.9"), key=_order) + \
                    [os.path.join(libdir, "libcudnn.so.9")]
    return []


@lru_cache(maxsize=None)
def cudnn() -> ModuleType:
    """cuDNN's Python frontend with its library loaded (module docstring)."""
    cupy()
    handle = None
    paths = cudnn_library_paths()
    for path in paths + paths[:-1]:  # a second pass for one that needed a later one
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue  # a sub-library whose own needs are not met: cuDNN loads what it needs later
        if os.path.basename(path) == "libcudnn.so.9":
            handle = ctypes.cast(lib._handle, ctypes.c_void_p).value
    try:
        mod = importlib.import_module("cudnn")
    except Exception as err:  # noqa: BLE001
        raise missing("cudnn", f"{type(err).__name__}: {str(err)[:120]}") from None
    if handle is not None:
        mod._pybind_module._set_dlhandle_cudnn(handle)
    try:
        mod.backend_version()
    except Exception as err:  # noqa: BLE001 - the frontend loaded without a cuDNN library
        raise missing("cudnn", f"libcudnn.so.9 not found: {str(err)[:100]}") from None
    return mod


@lru_cache(maxsize=None)
def nccl() -> ModuleType:
    """``cupy.cuda.nccl``."""
    cupy()
    try:
        return importlib.import_module("cupy.cuda.nccl")
    except Exception as err:  # noqa: BLE001
        raise missing("nccl", f"{type(err).__name__}: {str(err)[:120]}") from None


def versions() -> dict:
    """Library versions for a profile's fingerprint (what cannot be asked is left out)."""
    cp = cupy()
    out = {"cupy": cp.__version__, "cuda_runtime": int(cp.cuda.runtime.runtimeGetVersion()),
           "driver": int(cp.cuda.runtime.driverGetVersion())}
    try:
        out["cublas"] = int(cp.cuda.cublas.getVersion(cp.cuda.device.get_cublas_handle()))
    except Exception:  # noqa: BLE001 - informational
        pass
    try:
        mod = cudnn()
        out["cudnn"] = int(mod.backend_version())
        out["cudnn_frontend"] = str(getattr(mod, "__version__", "?"))
    except DnnplanError:
        pass
    try:
        out["nccl"] = int(nccl().get_version())
    except (DnnplanError, Exception):  # noqa: BLE001
        pass
    return out
