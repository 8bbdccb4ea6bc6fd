"""Compiling and launching the fused passes of :mod:`kernels.cuda.source` (cupy ``RawModule``).

One module per (device, storage format), compiled on first use (NVRTC, a second or so, cached by
cupy on disk after). Scalars go to the kernels as numpy scalars of the C parameter's exact type
(cupy passes a Python int or float by its own choice of width). Only C-contiguous float32,
float16 and bfloat16 arrays go to these kernels; :func:`fits` says whether an array may.
"""

from __future__ import annotations

import numpy

from kernels.cuda import libs
from kernels.cuda.source import DTYPES, source

THREADS = 256
#: The most blocks a grid-stride loop launches (132 SMs x 32 resident blocks of 256 threads is
#: about 4,200: more only queues)
MAX_BLOCKS = 1 << 16

_MODULES: dict[tuple[int, str], object] = {}


def fits(*arrays) -> bool:
    """Whether the fused kernels take these arrays: one storage format they know, C-contiguous."""
    dt = arrays[0].dtype
    return dt.name in DTYPES and all(a.dtype == dt and a.flags.c_contiguous for a in arrays)


_FUNCTIONS: dict[tuple[int, str, str], object] = {}


def function(dtype_name: str, name: str):
    """The compiled kernel ``name`` for arrays of ``dtype_name`` on the current device (looked up
    once: a step launches hundreds)."""
    cp = libs.cupy()
    dev = cp.cuda.runtime.getDevice()
    fn = _FUNCTIONS.get((dev, dtype_name, name))
    if fn is None:
        mod = _MODULES.get((dev, dtype_name))
        if mod is None:
            mod = _MODULES[(dev, dtype_name)] = cp.RawModule(code=source(dtype_name), options=("-std=c++17",))
        fn = _FUNCTIONS[(dev, dtype_name, name)] = mod.get_function(name)
    return fn


def blocks(n: int, threads: int = THREADS) -> int:
    return max(1, min((int(n) + threads - 1) // threads, MAX_BLOCKS))


def run(name: str, dtype_name: str, n: int, args, threads: int = THREADS) -> None:
    """A grid-stride kernel over ``n`` elements."""
    function(dtype_name, name)((blocks(n, threads),), (threads,), tuple(args))


def run_grid(name: str, dtype_name: str, grid: tuple, block: tuple, args) -> None:
    function(dtype_name, name)(grid, block, tuple(args))


def i64(v) -> numpy.int64:
    return numpy.int64(v)


def i32(v) -> numpy.int32:
    return numpy.int32(v)


def f32(v) -> numpy.float32:
    return numpy.float32(v)


def u64(v) -> numpy.uint64:
    return numpy.uint64(v)


def u32(v) -> numpy.uint32:
    return numpy.uint32(v)


def to_float32(a):
    """A float32 copy of ``a`` (any storage format) on the device; ``a`` itself when float32."""
    cp = libs.cupy()
    if a.dtype == numpy.float32:
        return a
    if a.dtype.name not in DTYPES:
        return a.astype(cp.float32)
    src = cp.ascontiguousarray(a)
    out = cp.empty(src.shape, dtype=cp.float32)
    run("to_f32", src.dtype.name, src.size, (src, out, i64(src.size)))
    return out


def from_float32(a32, dtype):
    """``a32`` (float32, contiguous) in ``dtype`` (itself when float32)."""
    cp = libs.cupy()
    dtype = numpy.dtype(dtype)
    if dtype == numpy.float32:
        return a32
    if dtype.name not in DTYPES:
        return a32.astype(dtype)
    out = cp.empty(a32.shape, dtype=dtype)
    run("from_f32", dtype.name, a32.size, (a32, out, i64(a32.size)))
    return out


_CLOCK_KHZ: dict[int, int] = {}


def spin(seconds: float) -> None:
    """Keep the device busy for about ``seconds`` (one thread spinning on the SM clock), queued on
    the current stream: what is enqueued after it is timed by events as device work only."""
    cp = libs.cupy()
    dev = cp.cuda.Device().id
    if dev not in _CLOCK_KHZ:
        try:
            _CLOCK_KHZ[dev] = int(cp.cuda.runtime.getDeviceProperties(dev).get("clockRate") or 2_000_000)
        except Exception:  # noqa: BLE001 - a property this cupy does not report: 2 GHz
            _CLOCK_KHZ[dev] = 2_000_000
    run_grid("spin", "float32", (1,), (1,), (i64(int(seconds * _CLOCK_KHZ[dev] * 1e3)),))
