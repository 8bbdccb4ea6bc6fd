"""cuBLAS called through its C API, so that a training step's GEMMs can be captured in a CUDA graph.

CuPy refuses every cuBLAS call while its stream is capturing: its ``cublas.setStream``, which each
of its cuBLAS wrappers calls first, raises ``NotImplementedError: calling cuBLAS API during stream
capture is currently unsupported`` (cupy_backends/cuda/libs/cublas.pyx; seen on an H200 with CuPy
14.2, 2026-12-04). cuBLAS itself can be captured (the cuBLAS guide, "CUDA Graphs Support") once the
handle's stream and a workspace of the caller's are set before the capture begins, so that nothing
is allocated inside it; PyTorch captures its GEMMs so, with a 32 MiB workspace on Hopper.

:func:`bound` does that for one capture: the device's cuBLAS handle (CuPy's) set to the capture's
stream with a workspace this module keeps for as long as the process (a replayed graph's GEMMs use
it); while it holds, :func:`captured_handle` names the handle and kernels.cuda.gemm calls
:func:`gemmEx` and :func:`gemmStridedBatchedEx` here, with the arguments of CuPy's wrappers of
the same names, instead of those wrappers. Outside a
capture nothing changes (CuPy's wrappers set the stream again at each call, which also gives the
handle back its default workspace).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from contextlib import contextmanager
from functools import lru_cache

from networks.errors import DnnplanError
from kernels.cuda import libs

#: The workspace a captured step's GEMMs use: PyTorch's on Hopper (CUBLAS_WORKSPACE_CONFIG :4096:8)
WORKSPACE_BYTES = 32 * 2**20
#: device -> CuPy's cuBLAS handle, while a capture on that device is under way (:func:`bound`)
_BOUND: dict[int, int] = {}
#: device -> the workspace captured GEMMs were given (never freed: replays use it)
_WORKSPACES: dict[int, object] = {}

_P, _I, _LL = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
#: The C signatures called here (cublas_api.h; every one returns a cublasStatus_t)
SIGNATURES = {
    "cublasSetStream_v2": (_P, _P),
    "cublasSetWorkspace_v2": (_P, _P, ctypes.c_size_t),
    "cublasGemmEx": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I),
    "cublasGemmStridedBatchedEx": (_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _LL, _P, _I, _I, _LL, _P, _P, _I, _I,
                                   _LL, _I, _I, _I),
}


def library_paths(major: int, roots=None) -> list[str]:
    """Where ``libcublas.so.MAJOR`` may be: the loader's own lookup first (it answers with the copy
    CuPy already loaded), then ``nvidia/*/lib`` under ``roots`` (default ``sys.path``), as the CUDA
    wheels lay it out."""
    name = f"libcublas.so.{major}"
    found = [p for root in (roots if roots is not None else sys.path)
             for p in sorted(glob.glob(os.path.join(root or ".", "nvidia", "*", "lib", name)))]
    return [name, *found]


@lru_cache(maxsize=None)
def library():
    """The cuBLAS library CuPy runs (same major version), its functions typed (:data:`SIGNATURES`)."""
    cp = libs.cupy()
    major = int(cp.cuda.cublas.getVersion(cp.cuda.device.get_cublas_handle())) // 10000
    for path in library_paths(major):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, args in SIGNATURES.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = list(args), ctypes.c_int
        return lib
    raise DnnplanError(f"cannot load libcublas.so.{major}, which CuPy runs, to capture GEMMs in a CUDA graph",
                       hint="run the plan eagerly with --no-graphs, or put the CUDA libraries on LD_LIBRARY_PATH")


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned cuBLAS status {status}")


def captured_handle() -> int | None:
    """The cuBLAS handle to call directly while a capture on this device holds it, else None."""
    if not _BOUND:
        return None
    return _BOUND.get(libs.cupy().cuda.Device().id)


@contextmanager
def bound(stream_ptr: int):
    """Inside: the device's cuBLAS handle runs on ``stream_ptr`` with this module's workspace, and
    kernels.cuda.gemm calls cuBLAS directly (module docstring). Enter it before the capture begins."""
    cp = libs.cupy()
    dev = cp.cuda.Device().id
    handle = int(cp.cuda.device.get_cublas_handle())
    ws = _WORKSPACES.get(dev)
    if ws is None:
        ws = _WORKSPACES[dev] = cp.empty(WORKSPACE_BYTES, dtype=cp.uint8)
    lib = library()
    check(lib.cublasSetStream_v2(handle, stream_ptr), "cublasSetStream")
    check(lib.cublasSetWorkspace_v2(handle, ws.data.ptr, WORKSPACE_BYTES), "cublasSetWorkspace")
    _BOUND[dev] = handle
    try:
        yield handle
    finally:
        _BOUND.pop(dev, None)


def workspace_bytes() -> int:
    """What the captured GEMMs' workspace holds on the current device (0 before any capture)."""
    return WORKSPACE_BYTES if _WORKSPACES.get(libs.cupy().cuda.Device().id) is not None else 0


def gemmEx(*args) -> None:  # noqa: N802 - CuPy's name, so kernels.cuda.gemm calls either the same way
    """``cublasGemmEx`` with ``cupy.cuda.cublas.gemmEx``'s arguments (the C API's, in its order)."""
    check(library().cublasGemmEx(*args), "cublasGemmEx")


def gemmStridedBatchedEx(*args) -> None:  # noqa: N802 - CuPy's name
    """``cublasGemmStridedBatchedEx`` with ``cupy.cuda.cublas.gemmStridedBatchedEx``'s arguments."""
    check(library().cublasGemmStridedBatchedEx(*args), "cublasGemmStridedBatchedEx")
