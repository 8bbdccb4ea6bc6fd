"""Compute time of a layer's local shard: one interface, two estimators.

* :class:`Roofline`: ``max(flops / peak, bytes / bandwidth) / efficiency`` from the machine
  datasheet (docs/costmodel.md, "Compute").
* A profile table (:class:`costmodel.profiled_compute.ProfiledCompute`) that looks up the time of
  the very kernels the executor runs at the local shape, interpolating in log space between
  measured shapes.

Both answer :meth:`ComputeModel.pass_s` for (local layer, pass, convolution algorithm).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from costmodel.attention_calls import ATTENTION_ALGORITHMS
# DEFAULT_CONV_ALGORITHM is defined where the kernel calls fall back to it, and is public here
from costmodel.kernel_calls import (DEFAULT_CONV_ALGORITHM, KernelCall, attention_core_kernels, kernel_calls,
                                    reshard_copy_call)
from costmodel.layer_layouts import LocalLayer
from costmodel.machine import Machine
from costmodel.moe_calls import experts_kernels
from costmodel.precision import matmul_peak
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import DTYPE_BYTES, Network
from networks.ops.base import LayerCost, prod
from networks.ops.catalogue import OPS
from networks.ops.conv import algorithm_work_depth
from networks.ops.conv_geometry import make_geom
from networks.ops.conv_workspace import workspace_bytes

PASSES = ("fwd", "bwd_data", "bwd_weights")
CONV_ALGORITHMS = ("direct", "im2col", "fft", "winograd")
#: A layer that keeps none of its internals for backward and runs its forward again there instead
#: (activation recomputation; Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016;
#: per layer, as Korthikanti et al. 2022 recompute attention). Planned like an algorithm: a plan's
#: ``algorithm`` is the kernel choice, ``+recompute`` after it when recomputed (``flash+recompute``),
#: or ``recompute`` alone with the layer's default kernels (Megatron-Core keeps ``AttnBackend`` apart
#: from ``recompute_granularity`` likewise).
RECOMPUTE = "recompute"


def is_recomputed(algorithm: str) -> bool:
    """Whether a planned algorithm recomputes the layer (:data:`RECOMPUTE`)."""
    return algorithm == RECOMPUTE or algorithm.endswith("+" + RECOMPUTE)


def with_recompute(kernel: str) -> str:
    """The planned algorithm that runs ``kernel`` ("" for the default) and recomputes the layer."""
    return f"{kernel}+{RECOMPUTE}" if kernel else RECOMPUTE


def attention_default(machine) -> str:
    """The attention algorithm a machine runs unless a plan names another: FlashAttention-2 where the
    device runs it (``DeviceSpec.flash``: GPUs from Ampere on), else the materialised kernels."""
    return "flash" if machine.device.flash else "materialized"


def resolve_algorithm(layer, algorithm: str, machine) -> str:
    """``algorithm`` with an attention layer's kernel made explicit (``""`` -> the machine's
    :func:`attention_default`, ``recompute`` -> it with ``+recompute``); checks that the machine runs
    the kernel named. Other layers' algorithms come back unchanged."""
    if layer.op != "attention":
        return algorithm
    kernel = kernel_algorithm(algorithm) or attention_default(machine)
    if kernel not in ATTENTION_ALGORITHMS:
        raise DnnplanError(f"unknown attention algorithm '{kernel}'", layer=layer.name,
                           hint=f"use {' or '.join(ATTENTION_ALGORITHMS)}")
    if kernel == "flash" and not machine.device.flash:
        raise DnnplanError(f"flash attention does not run on {machine.device.name} (machine '{machine.name}')",
                           layer=layer.name, hint="use materialized, or a GPU machine that runs FlashAttention")
    return with_recompute(kernel) if is_recomputed(algorithm) else kernel


def default_algorithms(net: Network) -> dict[str, str]:
    """:data:`DEFAULT_CONV_ALGORITHM` for every convolution of ``net`` (layer name -> algorithm)."""
    return {layer.name: DEFAULT_CONV_ALGORITHM for layer in net.layers if layer.op == "conv2d"}


RECOMPUTE_MODES = ("none", "selective", "full")


def recompute_algorithms(net: Network, mode: str, attention: str = "") -> dict[str, str]:
    """:func:`default_algorithms` with :data:`RECOMPUTE` where ``mode`` puts it: ``selective``, on
    the attention layers (Korthikanti et al. 2022 recompute attention's core only; rerunning the
    whole op, projections included, prices more than they do); ``full``, on every layer inside a
    repeated block (Megatron's full recomputation checkpoints each transformer layer's input), or
    on every layer but the convolutions and the loss when the network has no blocks. ``attention``:
    the attention layers' algorithm ("" for the machine's default; ``materialized`` as the 2021-22
    Megatron-LM runs had it)."""
    if mode not in RECOMPUTE_MODES:
        raise DnnplanError(f"unknown recomputation '{mode}'", hint="use " + ", ".join(RECOMPUTE_MODES))
    if attention not in ("", *ATTENTION_ALGORITHMS):
        raise DnnplanError(f"unknown attention algorithm '{attention}'", hint=f"use {' or '.join(ATTENTION_ALGORITHMS)}")
    out = default_algorithms(net) | {layer.name: attention for layer in net.layers
                                     if layer.op == "attention" and attention}
    blocked = any(block_of(layer) for layer in net.layers)
    for layer in net.layers:
        if layer.op in ("conv2d", "softmax_cross_entropy"):
            continue
        if (mode == "selective" and layer.op == "attention") or \
                (mode == "full" and (block_of(layer) or not blocked)):
            out[layer.name] = with_recompute(out.get(layer.name, ""))
    return out


def local_cost(local: LocalLayer) -> LayerCost:
    """The op catalogue's counts for the local shard."""
    layer = local.layer
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    return OPS[layer.op].costs(local.p, local.in_shapes, local.out_shape, local.batch, itemsize)


def algorithm_factor(local: LocalLayer, algorithm: str) -> float:
    """Work of a convolution algorithm relative to direct convolution, every transform and product
    of the algorithm counted (networks.ops.conv.winograd_work, fft_work); the backward passes run
    the same algorithm (kernels.conv_winograd, conv_fft), so the same factor prices them."""
    if local.layer.op != "conv2d" or algorithm in ("direct", "im2col", ""):
        return 1.0
    c, h, w = local.in_shapes[0]
    f, ho, wo = local.out_shape
    kh, kw = local.p["kernel"]
    ph, pw = local.p["padding"]
    cg = c // local.p["groups"]
    args = (local.batch, cg, f, h + 2 * ph, w + 2 * pw, ho, wo, kh, kw)
    base, _ = algorithm_work_depth("direct", *args)
    work, _ = algorithm_work_depth(algorithm, *args)
    return work / max(base, 1)


#: Recomputation is weighed only for layers whose internals are at least this fraction of their
#: output (a norm's statistics are not worth a candidate; a dropout mask, at a quarter, is)
RECOMPUTE_MIN_SAVING = 0.125


def recompute_applies(layer) -> bool:
    """Whether recomputing ``layer`` saves memory worth weighing: it keeps internals of its own for
    backward (``LayerCost.activation_bytes``: attention's q, k, v and probabilities, dropout's mask,
    max pooling's indices, the loss's log-probabilities) of at least :data:`RECOMPUTE_MIN_SAVING`
    of its output."""
    if layer.op == "conv2d":
        return False
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    internals = OPS[layer.op].costs(layer.p, layer.in_shapes, layer.out_shape, 1, itemsize).activation_bytes
    return internals > 0 and internals >= RECOMPUTE_MIN_SAVING * prod(layer.out_shape) * itemsize


def resolve_algorithms(net: Network, algorithms: Mapping[str, str], machine) -> dict[str, str]:
    """A plan's algorithms with every attention layer's kernel made explicit (:func:`resolve_algorithm`)."""
    out = dict(algorithms)
    for layer in net.layers:
        if layer.op == "attention":
            out[layer.name] = resolve_algorithm(layer, out.get(layer.name, ""), machine)
    return out


def kernel_algorithm(algorithm: str) -> str:
    """The kernels' algorithm of a planned one: recomputation runs the layer's ordinary kernels."""
    if algorithm == RECOMPUTE:
        return ""
    return algorithm[:-len(RECOMPUTE) - 1] if is_recomputed(algorithm) else algorithm


def recomputed_comms(comms) -> list:
    """The collectives (``layer_cost.Comm``) a layer under ``RECOMPUTE`` runs again: its forward
    runs again in backward, collectives included (ZeRO-3's parameter gather excepted: the
    backward's own gather serves it)."""
    return [dataclasses.replace(c, phase="bwd") for c in comms if c.phase == "fwd" and c.purpose != "param_gather"]


def algorithm_applies(layer, algorithm: str) -> bool:
    """Whether a convolution algorithm can run this layer (the kernels' own applicability rule), or
    ``RECOMPUTE`` can apply to it."""
    if is_recomputed(algorithm):
        return recompute_applies(layer) and algorithm_applies(layer, kernel_algorithm(algorithm))
    if layer.op == "attention":
        return algorithm in ("", *ATTENTION_ALGORITHMS)
    if layer.op != "conv2d":
        return algorithm == ""
    p = layer.p
    if algorithm in ("direct", "im2col"):
        return True
    if algorithm == "winograd":
        return p["kernel"] == (3, 3) and p["stride"] == (1, 1) and p["dilation"] == (1, 1) and p["groups"] == 1
    if algorithm == "fft":
        return p["stride"] == (1, 1) and p["dilation"] == (1, 1) and p["groups"] == 1
    return False


class ComputeModel(Protocol):
    """What every compute-time estimator answers. ``table`` is the profile table the times come
    from (:class:`costmodel.profile_table.ProfileTable`), or None for the datasheet roofline."""

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
        """One kernel call of :mod:`costmodel.kernel_calls` outside any layer's passes (the gradient
        sums of an output several layers read)."""
        ...

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int: ...

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        """The executor's own time around a layer's passes in one step, outside every kernel and
        collective: the Python that runs between them, slower the more the kernels before it
        evicted (:func:`costmodel.layer_cost.pass_bytes` lists the passes and their bytes); 0
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


@dataclass(frozen=True)
class Roofline:
    """Datasheet roofline: time = max(FLOPs / (peak x e_arith), bytes / (bandwidth x e_memory)).

    The peak and its efficiency class follow the layer (:func:`costmodel.precision.matmul_peak`):
    GEMM-like ops in 16 bits, or float32 ones under ``tf32``, run on the tensor cores; everything
    else at the float32 peak on the CUDA cores. ``e`` is the device's fraction of peak for that
    class and for memory traffic (``DeviceSpec.efficiency_of``), each at most 1, so no kernel is
    priced below its arithmetic at peak or its bytes at full bandwidth.
    """

    machine: Machine
    tf32: bool = False
    name: str = "roofline"
    table: None = None  # a datasheet, not a profile

    def peak(self, peak_key: str) -> float:
        """The device's FLOP/s for ``peak_key`` (its float32 peak when the datasheet has none)."""
        peaks = self.machine.device.peak_flops
        return peaks.get(peak_key) or peaks["float32"]

    def _time(self, flops: float, nbytes: float, peak_key: str = "float32", kind: str = "cuda_cores") -> float:
        dev = self.machine.device
        return max(flops / (self.peak(peak_key) * dev.efficiency_of(kind)),
                   nbytes / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory")))

    def pass_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        if local.layer.op == "attention":
            return self._attention_s(local, pass_, algorithm or attention_default(self.machine))
        if local.layer.op == "moe":
            return sum(self._moe_call_s(local, c) for c in kernel_calls(local, pass_, algorithm))
        cost = local_cost(local)
        i = PASSES.index(pass_)
        flops = cost.flops[i] * algorithm_factor(local, algorithm)
        nbytes = cost.bytes_read[i] + cost.bytes_written[i]
        if flops == 0 and nbytes == 0:
            return 0.0
        return self._time(flops, nbytes, *matmul_peak(local.layer, self.tf32))

    def _moe_call_s(self, local: LocalLayer, call) -> float:
        """A mixture of experts' kernel (costmodel.moe_calls): the router's and the experts' GEMMs on
        the matrix peak, the experts' activation, FP8 casts and the routing on the CUDA cores; an
        experts call's kernels one after the other, each on its own roofline (its FLOPs or its
        bytes, whichever takes longer: ``moe_calls.experts_kernels``)."""
        key, kind = matmul_peak(local.layer, self.tf32)
        if call.kernel.startswith("linear."):
            return self._time(call.flops, call.bytes, key, kind)
        if call.kernel.startswith("moe_experts."):
            return sum(self._time(f, b, key, kind) if matrix else self._time(f, b)
                       for f, b, matrix in experts_kernels(call, key == "float8"))
        return self._time(call.flops, call.bytes)

    def _attention_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        """Attention's kernels one after another (costmodel.attention_calls): the projections' GEMMs
        and the core, every kernel on its own roofline as it runs: FlashAttention's one fused kernel
        on the tensor cores; the materialised core's GEMMs on the tensor cores and its softmax on
        the CUDA cores."""
        key, kind = matmul_peak(local.layer, self.tf32, fp8=False)  # the core (bf16 under fp8)
        item = DTYPE_BYTES.get(local.layer.dtype, 4)
        total = 0.0
        for call in kernel_calls(local, pass_, algorithm, self.machine.device.sram_bytes):
            if not call.kernel.startswith("attention."):  # a projection's GEMM (FP8 under fp8)
                total += self._time(call.flops, call.bytes, *matmul_peak(local.layer, self.tf32))
                continue
            if call.algo == "flash":
                total += self._time(call.flops, call.bytes, key, kind)
                continue
            n, heads, sq, sk, dh = call.shape[:5]
            for flops, nbytes, gemm in attention_core_kernels(n, heads, sq, sk, dh, item, pass_ != "fwd"):
                total += self._time(flops, nbytes, key, kind) if gemm else self._time(flops, nbytes)
        return total

    def update_s(self, weight_elems: int, itemsize: int, slots: int = 1) -> float:
        return self._time(3 * max(slots, 1) * weight_elems, update_bytes(itemsize, slots) * weight_elems) \
            if weight_elems else 0.0

    def copy_s(self, elems: int, run: int, dtype: str, accumulate: bool) -> float:
        if elems <= 0:
            return 0.0
        call = reshard_copy_call(elems, run, dtype, accumulate)
        return self._time(call.flops, call.bytes)

    def call_s(self, call: KernelCall) -> float:
        return self._time(call.flops, call.bytes)

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int:
        return conv_workspace_bytes(local, algorithm)

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        return 0.0  # a datasheet says nothing about the executor's own overhead
