"""The kernels a framework runs, priced from the cost model's (pure): :class:`FrameworkKernels`.

The cost model prices each layer's pass as fused kernels (costmodel.compute: a profile table or the
datasheet roofline). A framework runs its own (costmodel.frameworks.framework): each op kind's
device time is the cost model's times the file's ``kernels.<op>.device``; a GEMM whose matrix has
a dimension that is not a multiple of 8 runs ``unaligned_gemm`` times slower (cuBLAS's ``align1``
kernels). A GEMM-like layer (linear, attention, a convolution, experts) in float32 on the CUDA cores
keeps the cost model's time: its arithmetic bounds it, and the kernels a framework adds around it
(casts) are small beside it. The extra passes over memory an unfused framework makes
(``kernels.<op>.passes``: the scale, mask, softmax and dropout over attention's scores, in
float32 under autocast) each read and write the scores, or the op's output, once at the machine's
memory bandwidth, in every precision. Where a file gives an op's ``peak_fraction``, its
compute-bound kernels reach that fraction of the datasheet peak of their format (tensor cores or
CUDA cores) in place of the machine's class efficiency; its kernels' workspace is the file's share
of the cost model's (``workspace``), plus the copies of an input gradient an unfused backward holds
(``grad_copies``); where its convolutions are NCHW (``layout.convolutions``), each
pass on the tensor cores adds cuDNN's transposes of its input and output. And where the framework's defaults run float32 convolutions or matmuls on TF32 tensor
cores (``precision``), those layers are priced at the TF32 peak on the datasheet (a profile table's
kernels ran as they were timed). Everything else is the cost model's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from costmodel.calls.algorithms import kernel_algorithm
from costmodel.calls.kernel_call import KernelCall
from costmodel.calls.layer_calls import kernel_calls
from costmodel.choices.precision import matmul_peak
from costmodel.compute.calibration import with_efficiencies
from costmodel.compute.model import ComputeModel
from costmodel.compute.roofline import Roofline
from costmodel.frameworks.framework import Framework
from costmodel.frameworks.layer_host import layer_host_excess_s
from costmodel.machine.model import EFFICIENCY_CLASSES, Machine
from costmodel.parallel.shard import LocalLayer
from networks.ir import DTYPE_BYTES
from networks.ops.base import prod

#: op kinds whose kernels are GEMMs that a framework's float32_matmuls setting moves to TF32
MATMUL_OPS = frozenset({"linear", "attention", "moe"})
#: op kinds whose time is their GEMMs' (convolutions too)
GEMM_OPS = MATMUL_OPS | {"conv2d"}
#: cuBLAS's fast (vectorised) GEMM kernels need every dimension a multiple of this many elements
GEMM_ALIGNMENT = 8


@dataclass(frozen=True)
class FrameworkKernels:
    """``inner``'s times as framework ``framework`` runs the kernels (module docstring)."""

    inner: ComputeModel
    framework: Framework
    machine: Machine

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def table(self):
        return self.inner.table

    @property
    def misses(self):
        """The kernel shapes a profile table lacked (``costmodel.compute.profiled``): the inner
        model's, so a prediction under a framework still says what to profile (None: no table)."""
        return getattr(self.inner, "misses", None)

    @property
    def fallback(self):
        return getattr(self.inner, "fallback", None)

    def _model_for(self, local: LocalLayer, algorithm: str) -> ComputeModel:
        """The compute model of ``local``'s kernels: the datasheet at the fraction of the peak the
        framework's kernels for the op reach (``peak_fraction``), and on the TF32 peak where the
        framework runs its float32 GEMMs there (a profile table's kernels ran as they were timed)."""
        fw, op = self.framework, local.layer.op
        if not isinstance(self.inner, Roofline):
            return self.inner
        model = self.inner
        if self._on_tf32(local) and not model.tf32:
            model = replace(model, tf32=True)
        fraction = fw.op(op, kernel_algorithm(algorithm)).peak_fraction
        return model if fraction is None else replace(model, peak_fraction=fraction)

    def _on_tf32(self, local: LocalLayer) -> bool:
        """Whether the framework runs ``local``'s float32 kernels on the TF32 tensor cores by default
        (``precision.float32_convolutions``, ``precision.float32_matmuls``)."""
        fw, op = self.framework, local.layer.op
        return local.layer.dtype == "float32" and ((fw.float32_convolutions == "tf32" and op == "conv2d")
                                                   or (fw.float32_matmuls == "tf32" and op in MATMUL_OPS))

    def pass_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        model = self._model_for(local, algorithm)
        base = model.pass_s(local, pass_, algorithm)
        if base == 0.0:
            return base
        factor = self._factor(local, model, algorithm)
        out = base * factor
        ops = self.framework.op(local.layer.op, kernel_algorithm(algorithm))
        if factor < 1.0 and ops.launches("fwd" if pass_ == "fwd" else "bwd"):  # kernels of its own
            out = max(out, min(base, self._floor_s(local, pass_, algorithm, model)))
        out += self._transposes_s(local, model)
        if pass_ == "bwd_weights":
            return out
        return out + ops.passes * self._pass_bytes_s(local, pass_, algorithm)

    @cached_property
    def _at_peak(self) -> Machine:
        """The machine with every class of kernels at its datasheet peak and memory at its full bandwidth."""
        return with_efficiencies(self.machine, {kind: 1.0 for kind in EFFICIENCY_CLASSES})

    def _floor_s(self, local: LocalLayer, pass_: str, algorithm: str, model: ComputeModel) -> float:
        """The pass's arithmetic at the peak of the format it runs on and its bytes at the full memory
        bandwidth: what no kernel of its own beats. A framework's factor below 1 (fitted: the
        machine's efficiencies price eager PyTorch's elementwise kernels slower than they run) speeds
        the cost model's time up to this and no further (nor is the time raised past the cost
        model's own: a profile table's kernels ran as timed, a Winograd engine under direct FLOPs)."""
        tf32 = getattr(model, "tf32", False) or self._on_tf32(local)
        return Roofline(self._at_peak, tf32=tf32).pass_s(local, pass_, algorithm)

    def _transposes_s(self, local: LocalLayer, model: ComputeModel) -> float:
        """What an NCHW convolution on the tensor cores adds to each pass: cuDNN's tensor-core
        kernels take NHWC, so the pass's input and output are transposed (NVIDIA Deep Learning
        Performance Documentation, "Convolutional Layers User's Guide", "Tensor Layouts In Memory:
        NCHW vs NHWC"): the file's ``layout.transposes`` read-and-write passes over them at the
        machine's memory rate. Nothing in channels last (``nhwc``), nor on the CUDA cores, whose
        kernels take NCHW as it is, nor from a profile table (its kernels ran as they were timed)."""
        if (local.layer.op != "conv2d" or self.framework.convolution_layout != "nchw"
                or not isinstance(model, Roofline) or matmul_peak(local.layer, model.tf32)[1] == "cuda_cores"):
            return 0.0
        item = DTYPE_BYTES.get(local.layer.dtype, 4)
        nbytes = local.batch * (prod(local.in_shapes[0]) + prod(local.out_shape)) * item
        dev = self.machine.device
        return (self.framework.convolution_transposes.value * 2 * nbytes
                / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory")))

    def _factor(self, local: LocalLayer, model: ComputeModel, algorithm: str) -> float:
        """The framework's device factor of ``local``'s kernels (module docstring)."""
        if local.layer.op in GEMM_OPS and matmul_peak(local.layer, getattr(model, "tf32", False))[1] == "cuda_cores":
            return 1.0  # float32 GEMMs on the CUDA cores: bound by their arithmetic, as priced
        factor = self.framework.op(local.layer.op, kernel_algorithm(algorithm)).device
        if local.layer.op == "linear" and unaligned(local):
            factor *= self.framework.unaligned_gemm.value
        return factor

    def _pass_bytes_s(self, local: LocalLayer, pass_: str, algorithm: str) -> float:
        """One extra read-and-write pass over attention's scores (float32) or the op's output, at
        the machine's memory bandwidth and efficiency."""
        dev = self.machine.device
        return 2 * _scores_bytes(local, pass_, algorithm) / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory"))

    def kept_bytes(self, local: LocalLayer, algorithm: str) -> int:
        """The inner model's, and the framework's ``kernels.<op>.kept`` copies of attention's
        float32 scores (another op: of its output) kept for backward: eager PyTorch's unfused
        attention keeps its float32 softmax output and dropout's mask and output, each a tensor of
        its own, where the cost model counts the probabilities once; and ``kept_stored`` copies of
        the scores in the layer's own format (another op: of its output): Inductor's fused
        attention keeps the raw scores, dropout's mask and the probabilities."""
        op = self.framework.op(local.layer.op, kernel_algorithm(algorithm))
        inner = self.inner.kept_bytes(local, algorithm)
        if not (op.kept or op.kept_stored):
            return inner
        scores = _scores_bytes(local, "fwd", algorithm)
        stored = scores // 4 * DTYPE_BYTES.get(local.layer.dtype, 4) if local.layer.op == "attention" else scores
        return inner + int(op.kept * scores) + int(op.kept_stored * stored)

    def update_s(self, weight_elems: int, itemsize: int, slots: int = 1) -> float:
        return self.inner.update_s(weight_elems, itemsize, slots)

    def copy_s(self, elems: int, run: int, dtype: str, accumulate: bool) -> float:
        return self.inner.copy_s(elems, run, dtype, accumulate)

    def call_s(self, call: KernelCall) -> float:
        return self.inner.call_s(call)

    def workspace_bytes(self, local: LocalLayer, algorithm: str) -> int:
        """What the layer's kernels hold while its passes run beyond its tensors and the gradients
        the cost model counts: the file's ``kernels.<op>.workspace`` share of the inner model's
        workspace (cuDNN's implicit-GEMM convolutions, which PyTorch runs, form no im2col column
        matrix; PyTorch allocates the chosen engine's workspace from its caching allocator for the
        call alone), and ``grad_copies`` copies of the layer's input gradient (eager PyTorch's
        cross-entropy holds the log-probabilities' gradient and the logits' beside each other)."""
        op = self.framework.op(local.layer.op, kernel_algorithm(algorithm))
        inner = self.inner.workspace_bytes(local, algorithm)
        own = inner if op.workspace == 1.0 else int(op.workspace * inner)
        if not op.grad_copies:
            return own
        grads = local.batch * sum(prod(s) for s in local.in_shapes) * DTYPE_BYTES.get(local.layer.dtype, 4)
        return own + int(op.grad_copies * grads)

    def dispatch_s(self, local: LocalLayer, algorithm: str, consumers: int) -> float:
        """The inner model's, and the host time the framework's issue of the layer's passes adds
        beyond their kernels (costmodel.frameworks.layer_host: what the planner weighs of the host;
        a step's prediction puts its host timeline in place of it)."""
        return self.inner.dispatch_s(local, algorithm, consumers) + layer_host_excess_s(local, self.framework, self)


def _scores_bytes(local: LocalLayer, pass_: str, algorithm: str) -> int:
    """Attention's scores in float32 (as autocast runs the softmax), another op's output."""
    if local.layer.op == "attention":
        cores = [c for c in kernel_calls(local, pass_, kernel_algorithm(algorithm) or "materialized")
                 if c.kernel.startswith("attention.")]
        return sum(prod(c.shape[:4]) for c in cores[:1]) * 4
    return local.batch * prod(local.out_shape) * DTYPE_BYTES.get(local.layer.dtype, 4)


def unaligned(local: LocalLayer) -> bool:
    """Whether a linear layer's GEMM has a feature dimension that is not a multiple of
    :data:`GEMM_ALIGNMENT` (GPT-2's vocabulary of 50,257 in its LM head)."""
    dims = (local.in_shapes[0][-1], local.out_shape[-1]) if local.in_shapes else (local.out_shape[-1],)
    return any(d % GEMM_ALIGNMENT for d in dims)


def framework_kernels(compute: ComputeModel, framework: Framework, machine: Machine) -> ComputeModel:
    """``compute`` as ``framework`` runs the kernels on ``machine``'s GPUs, its host's issue of each
    layer included; ``compute`` itself on a CPU (whose measured kernels are dnnplan's own) or where
    the framework's kernels are the cost model's and its host never holds the device back."""
    gpu = machine.device.kind == "gpu"
    own = framework.prices_device or not (framework.host.zero or framework.host.cuda_graphs)
    return FrameworkKernels(compute, framework, machine) if gpu and own else compute
