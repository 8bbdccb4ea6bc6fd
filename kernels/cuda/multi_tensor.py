"""One launch over many tensors on the GPU: SGD with momentum on every weight of a step
(kernels/cuda/cu/multi_tensor.cu), as PyTorch's ``foreach`` SGD and apex's ``multi_tensor_apply``
make it.

The kernel reads one int64 table per group of weights (one storage format, with or without float32
masters): the weights', momenta's, masters' and gradients' device pointers, the sizes and each
tensor's first block. The table is made once per group (:data:`PREPARED`, keyed by what it holds:
the pointers and sizes, which stay put across steps); a step writes only the gradients' pointers
into it, and only when they moved (a memory pool often hands a step the same addresses as the one
before), so a step's update is one launch per group and at most one small host-to-device copy,
from page-locked memory: an asynchronous copy that a CUDA graph captures (a replay copies what the
capture wrote there). The copy is the runtime's ``cudaMemcpyAsync``: CuPy's ``ndarray.set`` refuses
every host-to-device copy while the stream captures ("the current stream is capturing, so H2D
transfers are disallowed", on the H200, 2026-12-04), and a captured step's gradients come from the
graph's own memory pool, so their pointers always move there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy

from kernels.cuda import libs
from kernels.cuda.launch import THREADS, f32, fits, i32, run_grid

#: Elements one block updates
CHUNK = THREADS * 8


@dataclass
class Prepared:
    """One group's table on the device and the gradient pointers it holds now."""

    table: object  # int64 device array, kernels/cuda/cu/multi_tensor.cu's meta
    n: int
    blocks: int
    grads: numpy.ndarray  # the gradient pointers in the table (page-locked host memory)


#: groups made so far, by (device, storage format, mixed, the weights' pointers)
PREPARED: dict[tuple, Prepared] = {}


def _prepare(key: tuple, ws, vs, ms) -> Prepared:
    cp = libs.cupy()
    n = len(ws)
    sizes = numpy.array([w.size for w in ws], dtype=numpy.int64)
    first = numpy.concatenate([[0], numpy.cumsum(-(-sizes // CHUNK))]).astype(numpy.int64)
    host = numpy.concatenate([[w.data.ptr for w in ws], [v.data.ptr for v in vs],
                              [m.data.ptr if m is not None else 0 for m in ms], numpy.zeros(n), sizes,
                              first]).astype(numpy.int64)
    staged = numpy.frombuffer(cp.cuda.alloc_pinned_memory(8 * max(n, 1)), dtype=numpy.int64, count=n)
    staged[...] = 0
    PREPARED[key] = Prepared(cp.asarray(host), n, int(first[-1]), staged)
    return PREPARED[key]


def _copy_pointers(prep: Prepared) -> None:
    """The gradient pointers from page-locked memory into the table, on the current stream."""
    cp = libs.cupy()
    rt = cp.cuda.runtime
    rt.memcpyAsync(prep.table.data.ptr + 8 * 3 * prep.n, prep.grads.ctypes.data, 8 * prep.n, rt.memcpyHostToDevice,
                   cp.cuda.get_current_stream().ptr)


def _group_fits(ws, vs, gs, ms) -> bool:
    """Whether the kernel takes the group: contiguous arrays of one storage format it knows; with
    masters, those and the momenta float32."""
    if ms[0] is None:
        return all(fits(w, v, g) for w, v, g in zip(ws, vs, gs))
    return all(fits(w, g) and fits(m, v) and m.dtype.name == "float32" for w, v, g, m in zip(ws, vs, gs, ms))


def _key(dtype_name: str, mixed: bool, ws, vs, ms) -> tuple:
    """What a group's table holds (pointers and sizes), so an equal key is an equal table."""
    return (libs.cupy().cuda.Device().id, dtype_name, mixed,
            tuple((w.data.ptr, w.size, v.data.ptr, 0 if m is None else m.data.ptr) for w, v, m in zip(ws, vs, ms)))


def sgd_momentum_update_many(weights, momenta, grads, lr, momentum, masters=None, *, fallback: Callable):
    masters = list(masters) if masters is not None else [None] * len(weights)
    groups: dict[tuple, list[int]] = {}
    for i, w in enumerate(weights):
        groups.setdefault((w.dtype.name, masters[i] is not None), []).append(i)
    for (dtype_name, mixed), idx in groups.items():
        ws, vs = [weights[i] for i in idx], [momenta[i] for i in idx]
        gs, ms = [grads[i] for i in idx], [masters[i] for i in idx]
        if not _group_fits(ws, vs, gs, ms):
            fallback(ws, vs, gs, lr, momentum, ms if mixed else None)
            continue
        key = _key(dtype_name, mixed, ws, vs, ms)
        prep = PREPARED.get(key) or _prepare(key, ws, vs, ms)
        ptrs = numpy.fromiter((g.data.ptr for g in gs), dtype=numpy.int64, count=len(gs))
        if not numpy.array_equal(ptrs, prep.grads):
            prep.grads[...] = ptrs  # the previous step's copy is done: each step starts after the last ended
            _copy_pointers(prep)
        if prep.blocks:
            run_grid("sgd_many", dtype_name, (prep.blocks,), (THREADS,),
                     (prep.table, i32(prep.n), i32(CHUNK), f32(lr), f32(momentum), i32(int(mixed))))
    return weights, momenta
