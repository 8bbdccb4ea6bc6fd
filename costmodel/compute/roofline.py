"""Compute time from the machine's datasheet: ``max(flops / peak, bytes / bandwidth) / efficiency``
per kernel (docs/costmodel.md, "Compute"); one of the two answers to
:class:`costmodel.compute.model.ComputeModel`, the other a profile table
(:class:`costmodel.compute.profiled.ProfiledCompute`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.calls.algorithms import attention_default
from costmodel.calls.attention import attention_core_kernels
from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.layer_calls import PASSES, kernel_calls, reshard_copy_call
from costmodel.calls.moe import experts_kernels
from costmodel.choices.precision import call_peak, matmul_peak
from costmodel.compute.model import conv_workspace_bytes, update_bytes
from costmodel.machine.model import Machine
from costmodel.parallel.shard import LocalLayer
from networks.ir import DTYPE_BYTES
from networks.ops.base import LayerCost
from networks.ops.catalogue import OPS
from networks.ops.conv import algorithm_work_depth


def local_cost(local: LocalLayer) -> LayerCost:
    """The op catalogue's counts for the local shard."""
    layer = local.layer
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    return OPS[layer.op].costs(local.p, local.in_shapes, local.out_shape, local.batch, itemsize)


def algorithm_factor(local: LocalLayer, algorithm: str) -> float:
    """Work of a convolution algorithm relative to direct convolution, every transform and product
    of the algorithm counted (networks.ops.conv.winograd_work, fft_work); the backward passes run
    the same algorithm (kernels.conv.winograd, .fft), so the same factor prices them."""
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


@dataclass(frozen=True)
class Roofline:
    """Datasheet roofline: time = max(FLOPs / (peak x e_arith), bytes / (bandwidth x e_memory)).

    The peak and its efficiency class follow the layer (:func:`costmodel.choices.precision.matmul_peak`):
    GEMM-like ops in 16 bits, or float32 ones under ``tf32``, run on the tensor cores; everything
    else at the float32 peak on the CUDA cores. ``e`` is the device's fraction of peak for that
    class and for memory traffic (``DeviceSpec.efficiency_of``), each at most 1, so no kernel is
    priced below its arithmetic at peak or its bytes at full bandwidth.
    """

    machine: Machine
    tf32: bool = False
    name: str = "roofline"
    table: None = None  # a datasheet, not a profile
    #: the fraction of the peak compute-bound kernels reach in place of the machine's class
    #: efficiency (a framework's kernels: ``kernels.<op>.peak_fraction``,
    #: costmodel.frameworks.kernels); None: the machine's
    peak_fraction: float | None = None

    def peak(self, peak_key: str) -> float:
        """The device's FLOP/s for ``peak_key`` (its float32 peak when the datasheet has none)."""
        peaks = self.machine.device.peak_flops
        return peaks.get(peak_key) or peaks["float32"]

    def _time(self, flops: float, nbytes: float, peak_key: str = "float32", kind: str = "cuda_cores") -> float:
        dev = self.machine.device
        fraction = dev.efficiency_of(kind) if self.peak_fraction is None else self.peak_fraction
        return max(flops / (self.peak(peak_key) * fraction),
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
        """A mixture of experts' kernel (costmodel.calls.moe): the router's and the experts' GEMMs on
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
        """Attention's kernels one after another (costmodel.calls.attention): the projections' GEMMs
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
        """One kernel call alone (no layer: a profile table's miss): a GEMM's on the matrix peak of
        its element type (:func:`costmodel.choices.precision.call_peak`), the others on the CUDA cores."""
        return self._time(call.flops, call.bytes, *call_peak(call.kernel, call.dtype, self.tf32))

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int:
        return conv_workspace_bytes(local, algorithm)

    def kept_bytes(self, local: LocalLayer, algorithm: str) -> int:
        return 0  # the cost model's kernels keep what the op catalogue counts

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        return 0.0  # a datasheet says nothing about the executor's own overhead
