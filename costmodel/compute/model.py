"""What every compute-time estimator answers (:class:`ComputeModel`), what one that times kernels on
demand adds (:class:`OnDemand`), and the kernels' own memory and update traffic both price by (pure).

Two estimators answer it: the datasheet roofline (:class:`costmodel.compute.roofline.Roofline`) and
a profile table (:class:`costmodel.compute.profiled.ProfiledCompute`)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from costmodel.parallel.shard import LocalLayer
from networks.ir import DTYPE_BYTES
from networks.ops.conv_geometry import make_geom
from networks.ops.conv_workspace import workspace_bytes


class ComputeModel(Protocol):
    """What every compute-time estimator answers. ``table`` is the profile table the times come
    from (:class:`costmodel.compute.profile_table.ProfileTable`), or None for the datasheet roofline."""

    name: str
    table: Any

    def pass_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float: ...

    def update_s(self, weight_elems: int, itemsize: int, slots: int = 1) -> float:
        """The optimiser step on ONE weight tensor of ``weight_elems`` elements, keeping ``slots``
        float32 values of state per weight (momentum 1, Adam 2)."""
        ...

    def copy_s(self, elems: int, run: int, dtype: str, accumulate: bool) -> float:
        """A reshard's block copy: ``elems`` elements in contiguous runs of ``run`` elements."""
        ...

    def call_s(self, call: KernelCall) -> float:
        """One kernel call of :mod:`costmodel.calls.layer_calls` outside any layer's passes (the gradient
        sums of an output several layers read)."""
        ...

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int: ...

    def kept_bytes(self, local: LocalLayer, algorithm: str) -> int:
        """What the kernels keep for backward beyond the op catalogue's count (a framework's unfused
        kernels: costmodel.frameworks.kernels); 0 for the cost model's own."""
        ...

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        """The executor's own time around a layer's passes in one step, outside every kernel and
        collective: the Python that runs between them, slower the more the kernels before it
        evicted (:func:`costmodel.compute.dispatch.pass_bytes` lists the passes and their bytes); 0
        where nothing measured it."""
        ...


@runtime_checkable
class OnDemand(Protocol):
    """A compute model that times kernels on this computer when asked (profiler.ondemand): it can
    list the calls a weighing looks up, time them again (alone, or in a plan's step context, the
    plan's collectives and the executor's time between kernels too), take timings made elsewhere,
    and write what it timed to its cache file. ``refresh``: every call is timed again on its first
    lookup (``--refresh-profile``)."""

    refresh: bool

    def calls_of(self, weigh: Callable[[], object], time_missing: bool = True) -> list[KernelCall]: ...

    def retime(self, calls: list[KernelCall]) -> None: ...

    def install(self, entries: dict) -> None: ...

    def time_in_step(self, calls: list[KernelCall], before: Mapping, updates: Sequence = ()) -> dict: ...

    def time_collectives_in_step(self, calls: Sequence, ranks: int) -> dict: ...

    def retime_dispatch(self) -> None: ...

    def save(self) -> None: ...


def conv_workspace_bytes(local: LocalLayer, algorithm: str) -> int:
    """Extra memory a convolution's kernels allocate, the largest of its three passes: the buffers
    each algorithm's implementation allocates (networks.ops.conv_workspace, the same closed forms
    the kernels' own accounting uses), on the local shard's shapes. Direct convolution too: its
    shifted slice and partial product."""
    if local.layer.op != "conv2d":
        return 0
    p = local.p
    c, h, w = local.in_shapes[0]
    geom = make_geom((local.batch, c, h, w), (local.out_shape[0], c // p["groups"], *p["kernel"]), p["stride"],
                     p["padding"], p["dilation"], p["groups"])
    itemsize = DTYPE_BYTES.get(local.layer.dtype, 4)
    return max(workspace_bytes(algorithm or DEFAULT_CONV_ALGORITHM, geom, name, itemsize) for name in ("fwd", "bwd_data", "bwd_weights"))


def update_bytes(itemsize: int, slots: int) -> int:
    """Bytes the optimiser step moves per weight with ``slots`` float32 state values (momentum 1,
    Adam 2). In full precision it reads the weight, its gradient and each state value and writes the
    weight and the state: (3 + 2 slots) x itemsize. In mixed precision (16-bit ``itemsize``) the
    float32 master weight and the state are read and written, the 16-bit gradient read and the
    16-bit weight copy written: 8 + 8 slots + 2 x itemsize (SGD with momentum 16 + 2 x itemsize,
    Adam 24 + 2 x itemsize)."""
    return (3 + 2 * slots) * itemsize if itemsize >= 4 else 8 + 8 * slots + 2 * itemsize
