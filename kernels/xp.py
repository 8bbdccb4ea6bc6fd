"""The array module behind the kernels: ``numpy`` on the CPU, ``cupy`` on an NVIDIA GPU.

Every kernel in :mod:`kernels` is written once against an array module ``xp`` and finds it
from its arguments with :func:`module_of`, so the executor and the profiler run the same code on
either backend.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy

from networks.errors import DnnplanError

BACKENDS = ("numpy", "cupy")


def _import_cupy() -> ModuleType | None:
    try:
        return importlib.import_module("cupy")
    except Exception:  # ImportError, or a CUDA library that fails to load
        return None


def array_module(backend: str) -> ModuleType:
    """Return the array module for ``backend`` ("numpy" or "cupy")."""
    if backend == "numpy":
        return numpy
    if backend == "cupy":
        cp = _import_cupy()
        if cp is None:
            raise DnnplanError("backend 'cupy' was asked for but cupy cannot be imported",
                               hint="install dnnplan[gpu] (CUDA 12) or dnnplan[gpu-cuda13] (CUDA 13) on a "
                                    "machine with an NVIDIA GPU, or use --backend numpy")
        return cp
    raise DnnplanError(f"unknown array backend '{backend}'",
                       hint=f"choose one of {', '.join(BACKENDS)}")


def storage_dtype(name: str) -> numpy.dtype:
    """The numpy dtype of a storage format's name (``bfloat16`` is ml_dtypes', a dependency of onnx)."""
    if name == "bfloat16":
        importlib.import_module("ml_dtypes")  # registers the name with numpy
    return numpy.dtype(name)


def module_of(array) -> ModuleType:
    """Return the module (numpy or cupy) that ``array`` belongs to."""
    if isinstance(array, numpy.ndarray) or numpy.isscalar(array):
        return numpy
    mod = type(array).__module__.split(".")[0]
    if mod == "cupy":
        return importlib.import_module("cupy")
    return numpy


def synchronize(xp: ModuleType) -> None:
    """Wait for queued device work (cupy); a no-op for numpy."""
    if xp is numpy:
        return
    xp.cuda.Device().synchronize()


def gpu_available() -> bool:
    """True when cupy imports and sees at least one CUDA device."""
    cp = _import_cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False
