"""One kernel name, one implementation per device: the numpy kernel, or the GPU kernel set's.

Every kernel with a GPU implementation is decorated with :func:`device_kernel`: called with cupy
arrays it runs the function :mod:`kernels.cuda` registered under the same name (cuDNN engines,
cuBLAS GEMMs, fused passes); called with numpy arrays it runs itself, exactly as before. The
executor and the profiler call the same functions (``kernels.KERNELS``, or the modules' names)
either way, so one plan runs the kernels its profile timed on each device. A kernel the GPU set
does not cover runs its array-module code on cupy (``kernels.xp.module_of``).

The registry is filled when :mod:`kernels` is imported (``kernels/__init__.py`` imports
:mod:`kernels.cuda`, which registers without importing cupy); this module imports no kernel.
"""

from __future__ import annotations

import functools
from typing import Callable

#: kernel name -> GPU implementation (kernels.cuda fills it)
GPU: dict[str, Callable] = {}


def register(name: str, fn: Callable) -> None:
    if name in GPU:
        raise ValueError(f"GPU kernel {name!r} registered twice")
    GPU[name] = fn


def is_device_array(obj) -> bool:
    """Whether ``obj`` is a cupy array (no cupy import: its type's module says so)."""
    return type(obj).__module__.split(".")[0] == "cupy"


def _first_array(args):
    """The array that decides the device: the first argument, the first of a list (concat), or
    the first array in a cache mapping (a backward kernel given only its cache)."""
    if not args:
        return None
    a = args[0]
    if isinstance(a, (list, tuple)) and a:
        return a[0]
    if isinstance(a, dict):
        return next((v for v in a.values() if is_device_array(v)), None)
    return a


def on_device(args) -> bool:
    return is_device_array(_first_array(args))


def device_kernel(name: str) -> Callable[[Callable], Callable]:
    """Decorate a numpy kernel: cupy arguments run ``GPU[name]`` when registered, which is handed
    the numpy kernel as ``fallback`` (for arrays its fused passes do not take: float64, strided)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if on_device(args):
                impl = GPU.get(name)
                if impl is not None:
                    return impl(*args, fallback=fn, **kwargs)
            return fn(*args, **kwargs)

        run.kernel_name = name
        return run

    return wrap
