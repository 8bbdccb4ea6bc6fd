"""A recording stand-in for cupy on a computer without a GPU: what the GPU path launches, counted.

Arrays are :class:`DeviceArray`, numpy arrays whose type says ``cupy`` (so kernels.dispatch sends
them to the GPU kernel set, as it does cupy's); everything that would be a launch on a GPU is
recorded in :attr:`FakeCupy.launches` as ``(kind, name)``:

- ``kernel``: a compiled fused pass (``RawModule(...).get_function(name)(grid, block, args)``);
  when :attr:`FakeCupy.models` holds a numpy model of that kernel (tests/support/doubles/gpu_kernel_models.py)
  it runs on the arguments (host views, and ``dtype``: the storage format the source was compiled
  for, None for bfloat16, which numpy lacks), so its results can be checked, else the outputs stay
  as allocated;
- ``elementwise`` / ``reduction``: a ufunc on device arrays (cupy's elementwise and reduction
  kernels: ``a + b``, ``cp.sqrt``, ``a.sum()``), ``astype`` that copies;
- ``memset`` (``zeros``, ``fill``), ``copy`` (``concatenate``, ``copy``, a non-contiguous
  ``ascontiguousarray``), ``to_device`` (``asarray`` of host data, ``set``), ``to_host``
  (``asnumpy``, ``float()`` of a device array: also a wait for the device).

Allocation (``empty``, ``empty_like``) and views (slices, reshapes) launch nothing, as on a GPU.
``cuda.Event`` counts the events made (:attr:`FakeCupy.events_made`); each ``record`` reads a
device clock 1 ms later than the one before.
What it does not do: time anything, or know what cupy would fuse or cache. Tests built on it prove
which launches dnnplan's GPU path makes per op, not how long they take.
"""

from __future__ import annotations

import ctypes

from types import SimpleNamespace

import numpy as np

#: The recorder arrays report to (the fixture's :class:`FakeCupy`; module state, as cupy's own is)
_ACTIVE: dict = {0: None}


def _record(kind: str, name: str) -> None:
    if _ACTIVE[0] is not None:
        _ACTIVE[0].launches.append((kind, name))


def _host(a):
    return a.view(np.ndarray) if isinstance(a, DeviceArray) else a


def _device(a):
    if isinstance(a, DeviceArray):
        return a
    if isinstance(a, (np.ndarray, np.generic)):
        return np.asarray(a).view(DeviceArray)
    return a


#: Arrays whose address was asked (``arr.data.ptr``), by address: a kernel given pointers (a
#: multi-tensor table) has its model find the arrays here (:func:`at`)
_MEMORY: dict[int, np.ndarray] = {}


class Pointer:
    """``arr.data``: its address as ``ptr`` (cupy's MemoryPointer)."""

    def __init__(self, arr):
        self.ptr = int(arr.__array_interface__["data"][0])
        _MEMORY[self.ptr] = arr.view(np.ndarray)


def at(ptr: int, count: int, dtype) -> np.ndarray:
    """The ``count`` elements of ``dtype`` at device address ``ptr`` (an array whose address was asked)."""
    arr = _MEMORY[int(ptr)]
    if arr.dtype != np.dtype(dtype):
        raise AssertionError(f"the array at {ptr:#x} is {arr.dtype}, a kernel reads it as {np.dtype(dtype)}")
    return arr.reshape(-1)[:int(count)]


def _memcpy_async(dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
    """``cudaMemcpyAsync`` host to device (kind 1): ``nbytes`` from host address ``src`` into the
    device array that holds address ``dst``."""
    if kind != 1:
        raise AssertionError(f"only host-to-device copies are modelled, not kind {kind}")
    _record("to_device", "memcpyAsync")
    for base, arr in _MEMORY.items():
        raw = arr.reshape(-1).view(np.uint8)
        if base <= dst and dst + nbytes <= base + raw.size:
            raw[dst - base:dst - base + nbytes] = np.frombuffer((ctypes.c_char * nbytes).from_address(src), np.uint8)
            return
    raise AssertionError(f"no device array holds {nbytes} bytes at {dst:#x}")


class DeviceArray(np.ndarray):
    """A "device" array: numpy data; ufuncs, copies and transfers on it are recorded."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _record("elementwise" if method == "__call__" else "reduction", ufunc.__name__)
        out = kwargs.get("out")
        if out is not None:
            kwargs["out"] = tuple(_host(o) for o in out)
        result = getattr(ufunc, method)(*(_host(i) for i in inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return tuple(_device(r) for r in result) if isinstance(result, tuple) else _device(result)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if copy or np.dtype(dtype) != self.dtype:
            _record("elementwise", "astype")
        return _device(_host(self).astype(dtype, order=order, casting=casting, copy=copy))

    def copy(self, order="C"):
        _record("copy", "copy")
        return _device(_host(self).copy(order=order))

    def fill(self, value):
        _record("memset", "fill")
        _host(self).fill(value)

    def set(self, arr, stream=None):
        _record("to_device", "set")
        _host(self)[...] = arr

    def get(self, stream=None):
        _record("to_host", "get")
        return _host(self).copy()

    def __float__(self):
        _record("to_host", "float")
        return float(_host(self))

    @property
    def data(self):  # noqa: D401 - cupy's MemoryPointer, not numpy's buffer
        return Pointer(self)


DeviceArray.__module__ = "cupy._fake"  # kernels.dispatch.is_device_array reads the type's module


class FakeKernel:
    """A compiled kernel: each call recorded, and run by its numpy model when there is one."""

    def __init__(self, owner: FakeCupy, name: str, dtype):
        self.owner, self.name, self.dtype = owner, name, dtype

    def __call__(self, grid, block, args, **kw):
        self.owner.launches.append(("kernel", self.name))
        self.owner.grids.append((self.name, tuple(grid), tuple(block)))
        model = self.owner.models.get(self.name)
        if model is not None:
            model(tuple(grid), tuple(block), tuple(_host(a) for a in args), dtype=self.dtype)  # host views


class FakeCupy:
    """The ``cupy`` module as kernels.cuda uses it (``libs.cupy()``), recording launches."""

    def __init__(self, models: dict | None = None):
        self.launches: list[tuple[str, str]] = []
        self.grids: list[tuple] = []
        self.models = dict(models or {})
        self.compiled: list[str] = []  # one entry per RawModule made (its first kernel's use)
        owner = self

        class RawModule:  # noqa: D401 - cupy.RawModule
            def __init__(self, code: str, options=()):
                owner.compiled.append(code[:40])
                # the storage format the source was made for (kernels/cuda/source.py's preludes)
                self.dtype = (np.float32 if "typedef float T;" in code else
                              np.float16 if "cvt.f32.f16" in code else None)

            def get_function(self, name):
                return FakeKernel(owner, name, self.dtype)

        self.RawModule = RawModule
        self.ndarray = DeviceArray
        self.events_made = 0  # CUDA events created (FakeEvent)
        self.clock_ms = 0.0  # the device clock an event records: 1 ms later at each record

        class FakeEvent:  # noqa: D401 - cupy.cuda.Event
            def __init__(self, *a, **k):
                owner.events_made += 1
                self.ms = None

            def record(self, stream=None):
                owner.clock_ms += 1.0
                self.ms = owner.clock_ms

            def synchronize(self):
                if self.ms is None:
                    raise RuntimeError("an event waited on before it was recorded")

        def elapsed(a, b):
            return b.ms - a.ms

        stream = SimpleNamespace(ptr=1, use=lambda: None, synchronize=lambda: None)
        self.cuda = SimpleNamespace(runtime=SimpleNamespace(getDevice=lambda: 0, getDeviceCount=lambda: 1,
                                                            memcpyAsync=_memcpy_async, memcpyHostToDevice=1),
                                    Device=lambda i=0: SimpleNamespace(id=0, use=lambda: None,
                                                                       pci_bus_id="0000:01:00.0"),
                                    get_current_stream=lambda: stream, Stream=lambda non_blocking=False: stream,
                                    Event=FakeEvent, get_elapsed_time=elapsed,
                                    alloc_pinned_memory=lambda nbytes: bytearray(nbytes))

    def __enter__(self) -> FakeCupy:
        _ACTIVE[0] = self
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE[0] = None

    def install(self, monkeypatch) -> FakeCupy:
        """Make this the ``cupy`` of kernels.cuda (``libs.cupy``) with empty caches of compiled
        kernels and workspaces, recording while the test runs."""
        from kernels.cuda import launch, libs, multi_tensor, norm  # noqa: PLC0415 - the code under test

        monkeypatch.setattr(libs, "cupy", lambda: self)
        monkeypatch.setattr(launch, "_MODULES", {})
        monkeypatch.setattr(launch, "_FUNCTIONS", {})
        monkeypatch.setattr(norm, "_WORKSPACE", {})
        monkeypatch.setattr(multi_tensor, "PREPARED", {})
        monkeypatch.setitem(_ACTIVE, 0, self)  # undone after the test
        _MEMORY.clear()
        return self

    def kernels(self) -> list[str]:
        """The compiled kernels launched, in order."""
        return [name for kind, name in self.launches if kind == "kernel"]

    def take(self) -> list[tuple[str, str]]:
        """The launches since the last take (and forget them)."""
        out, self.launches[:] = list(self.launches), []
        return out

    # -- allocation (no launch) ---------------------------------------------------------------

    def empty(self, shape, dtype=np.float32):
        return np.empty(shape, dtype=dtype).view(DeviceArray)

    def empty_like(self, a, dtype=None):
        return np.empty(a.shape, dtype=dtype or a.dtype).view(DeviceArray)

    # -- launches ---------------------------------------------------------------------------

    def zeros(self, shape, dtype=np.float32):
        _record("memset", "zeros")
        return np.zeros(shape, dtype=dtype).view(DeviceArray)

    def zeros_like(self, a, dtype=None):
        return self.zeros(a.shape, dtype or a.dtype)

    def asarray(self, a, dtype=None):
        if isinstance(a, DeviceArray):
            return a if dtype is None or np.dtype(dtype) == a.dtype else a.astype(dtype)
        _record("to_device", "asarray")
        return np.array(a, dtype=dtype).view(DeviceArray)

    def ascontiguousarray(self, a, dtype=None):
        if isinstance(a, DeviceArray) and a.flags.c_contiguous and (dtype is None or np.dtype(dtype) == a.dtype):
            return a
        _record("copy", "ascontiguousarray")
        return np.ascontiguousarray(_host(a), dtype=dtype).view(DeviceArray)

    def concatenate(self, arrays, axis=0):
        _record("copy", "concatenate")
        return np.concatenate([_host(a) for a in arrays], axis=axis).view(DeviceArray)

    def asnumpy(self, a, stream=None):
        _record("to_host", "asnumpy")
        return _host(a).copy()

    def __getattr__(self, name):
        """dtypes and ufuncs as numpy's (a ufunc on device arrays records itself)."""
        return getattr(np, name)
