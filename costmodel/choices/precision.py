"""Training precision: the number formats a step computes and stores in (pure).

Four policies, the ones users train with:

* ``fp32``: float32 everywhere; GEMM-like kernels (convolution, linear, attention) on the CUDA
  cores at the device's float32 peak.
* ``tf32``: float32 storage; GEMM-like kernels on the tensor cores at the TF32 peak (Ampere and
  later; PyTorch's ``allow_tf32``). Everything else as fp32.
* ``fp16`` and ``bf16``: mixed precision (Micikevicius et al., "Mixed Precision Training", ICLR
  2018, section 3; as Megatron-LM and DeepSpeed hold it): activations, weights and gradients in
  16 bits, GEMM-like kernels on the tensor cores at that format's peak, and a float32 master copy
  of the weights with float32 optimiser state, so a parameter costs 2 + 2 + 4 + 4 x (optimiser
  slots) bytes (``costmodel.layer.cost``: 16 bytes with Adam, ZeRO's "16 Psi"). Gradients are
  all-reduced in 16 bits.
* ``fp8``: bf16 mixed precision with the GEMMs of the transformer blocks' linear layers (attention's
  projections, the MLP's and the experts' GEMMs) in FP8, as Transformer Engine runs them
  (``te.fp8_autocast`` with its ``DelayedScaling`` recipe; Megatron-Core's ``--fp8-format hybrid``):
  at the device's dense FP8 peak, where the machine file has one (an H100's is twice its BF16);
  attention's core, the embedding, the LM head, norms and activations stay bf16, as NVIDIA's
  default FP8 recipe keeps them. Each FP8 linear keeps an FP8 copy of its weight and of its
  transpose (one byte an element each, cached across micro-batches) and, per FP8 tensor of its
  GEMMs (input, weight, output; output and input gradients), a float32 scale, inverse scale and
  amax history of ``AMAX_HISTORY`` values (:func:`fp8_bytes`). With FP8 parameters (Megatron-Core's
  ``--fp8-param-gather``, which Megatron-Bridge's FP8 current-scaling recipe sets: the weight kept
  only in FP8, gathered in FP8; :func:`with_precision`'s ``fp8_params``) the FP8 copy is the
  weight itself: one byte an element and its transpose, no 16-bit copy.

Which peak and efficiency class a kernel gets is :func:`matmul_peak`; the storage format is
applied to the network once (:func:`with_precision`), so every byte count, collective and
reshard follows from the layers' element type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from networks.analysis import block_of
from networks.errors import DnnplanError, short
from networks.ir import Layer, Network


@dataclass(frozen=True)
class Precision:
    name: str
    storage: str  # the element type of activations, weights and gradients
    matmul: str  # the device peak (``peak_tflops`` key) GEMM-like kernels run at
    doc: str


PRECISIONS = {p.name: p for p in (
    Precision("fp32", "float32", "float32", "float32 throughout, CUDA cores"),
    Precision("tf32", "float32", "tf32", "float32 storage, TF32 tensor cores for convolutions and GEMMs"),
    Precision("fp16", "float16", "float16", "mixed precision: float16 with float32 master weights and optimiser"),
    Precision("bf16", "bfloat16", "bfloat16", "mixed precision: bfloat16 with float32 master weights and optimiser"),
    Precision("fp8", "bfloat16", "float8", "bf16 mixed precision with FP8 GEMMs in the transformer blocks "
              "(Transformer Engine)"),
)}
DEFAULT_PRECISION = "fp32"
#: Precisions priced from the datasheet alone: no kernel set runs them (the GPU profiler and the
#: executor refuse them in one line)
DATASHEET_ONLY = frozenset({"fp8"})

#: Ops whose kernels are GEMMs (or convolutions run as them): the tensor cores run these.
MATMUL_OPS = frozenset({"conv2d", "linear", "attention", "moe"})
#: Ops whose GEMMs run in FP8 under ``fp8`` (Transformer Engine's modules), inside a repeated block
FP8_OPS = frozenset({"linear", "attention", "moe"})
#: The layer parameter marking a layer whose GEMMs run in FP8 (set by :func:`with_precision`)
FP8_PARAM = "fp8_gemms"
#: Transformer Engine's ``DelayedScaling`` default ``amax_history_len``
AMAX_HISTORY = 1024
#: FP8 tensors a GEMM scales (forward: input, weight, output; backward: output and input gradients)
FP8_TENSORS_PER_GEMM = 5


#: the mixed precisions a GPU's tensor cores may run, the one a transformer trains in by default first
#: (:func:`mixed_precision`)
MIXED_PRECISIONS = ("bf16", "fp16")


def mixed_precision(peaks) -> str | None:
    """The 16-bit mixed precision a device with datasheet ``peaks`` (``peak_tflops``, by element
    type) trains a transformer in: bf16 where it has a bfloat16 peak (A100 and later, MI300X), else
    fp16 (V100); None where it has neither."""
    return next((name for name in MIXED_PRECISIONS if PRECISIONS[name].matmul in peaks), None)


def get_precision(name: str) -> Precision:
    got = PRECISIONS.get(name)
    if got is None:
        raise DnnplanError(f"unknown --precision {short(name)}", hint=f"use one of {', '.join(PRECISIONS)}")
    return got


def with_precision(net: Network, name: str, fp8_params: bool = False) -> Network:
    """``net`` with its float32 layers and inputs stored in the precision's format (unchanged for
    fp32 and tf32; integer inputs such as token ids and float64 layers stay as they are; the loss
    stays float32, as frameworks compute it, unless ``fused``: one kernel reading and keeping the
    logits in their own precision, networks.ops.loss)."""
    prec = get_precision(name)
    storage = prec.storage
    if storage == "float32":
        return net

    def conv(layer: Layer) -> Layer:
        if layer.dtype != "float32" or (layer.op == "softmax_cross_entropy" and not layer.p.get("fused")):
            return layer
        fp8 = prec.matmul == "float8" and layer.op in FP8_OPS and block_of(layer) is not None
        mark = ((FP8_PARAM, "params" if fp8_params else True),) if fp8 else ()
        return dataclasses.replace(layer, dtype=storage, params=layer.params + mark)

    inputs = tuple(dataclasses.replace(i, dtype=storage) if i.dtype == "float32" else i for i in net.inputs)
    return dataclasses.replace(net, inputs=inputs, layers=tuple(conv(layer) for layer in net.layers))


def matmul_peak(layer: Layer, tf32: bool, fp8: bool = True) -> tuple[str, str]:
    """(``peak_tflops`` key, efficiency class) of a layer's arithmetic: tensor cores for the GEMM-like
    ops in 16 bits, or in float32 under TF32, or at the FP8 peak for a layer marked to run its GEMMs
    in FP8 (``fp8``: whether this kernel is one of those GEMMs; attention's core is not); CUDA cores
    (the float32 peak) for everything else. FP8 GEMMs reach the same fraction of their peak as
    16-bit ones (class ``tensor_16bit``), and move the bytes of their bf16 operands (the casts to
    FP8 in place of the smaller operands: not below physics)."""
    if fp8 and is_fp8(layer) and layer.dtype in ("float16", "bfloat16"):
        return "float8", "tensor_16bit"
    if layer.op in MATMUL_OPS:
        if layer.dtype in ("float16", "bfloat16"):
            return layer.dtype, "tensor_16bit"
        if layer.dtype == "float32" and tf32:
            return "tf32", "tensor_tf32"
    if layer.dtype == "float64":
        return "float64", "cuda_cores"
    return "float32", "cuda_cores"


#: the kernels (costmodel.calls) that are GEMMs or convolutions run as them: a call of one alone
#: (no layer) runs on the matrix peak of its element type (:func:`call_peak`)
GEMM_KERNELS = ("gemm", "linear.", "conv2d.", "attention.", "moe_experts.")


def call_peak(kernel: str, dtype: str, tf32: bool) -> tuple[str, str]:
    """(``peak_tflops`` key, efficiency class) of one kernel call priced without its layer (a
    profile table's miss): a GEMM's as :func:`matmul_peak` gives a layer's of its element type (FP8
    GEMMs are their layers': a call alone is priced at its 16-bit peak, never below physics), the
    rest on the CUDA cores."""
    if kernel.startswith(GEMM_KERNELS):
        if dtype in ("float16", "bfloat16"):
            return dtype, "tensor_16bit"
        if dtype == "float32" and tf32:
            return "tf32", "tensor_tf32"
    if dtype == "float64":
        return "float64", "cuda_cores"
    return "float32", "cuda_cores"


def is_fp8(layer: Layer) -> bool:
    """Whether ``layer``'s GEMMs run in FP8 (``fp8`` precision, :func:`with_precision`)."""
    return bool(dict(layer.params).get(FP8_PARAM))


def fp8_params(layer: Layer) -> bool:
    """Whether an FP8 layer's GEMM weights are kept only in FP8 (module docstring)."""
    return dict(layer.params).get(FP8_PARAM) == "params"


def fp8_gemms(layer: Layer) -> int:
    """The FP8 GEMM modules of a layer (Transformer Engine's): attention's fused query/key/value
    projection and its output projection, a linear layer's one, two per expert of a mixture of experts."""
    if not is_fp8(layer):
        return 0
    if layer.op == "moe":
        return 2 * int(layer.p.get("experts", 1))
    return 2 if layer.op == "attention" else 1


def fp8_weight(name: str, shape) -> bool:
    """Whether a weight of an FP8 layer is a GEMM operand kept in FP8: matrices, not biases, not a
    mixture of experts' router (it stays bf16)."""
    return len(shape) >= 2 and "bias" not in name and name != "router"


def fp8_bytes(layer: Layer, weight_elems: int) -> int:
    """Bytes per device an FP8 layer holds besides its bf16 weights (module docstring): the FP8 copy
    of its local GEMM weights (``weight_elems``: a mixture of experts' router excluded) and of their
    transposes, one byte an element each, and each GEMM's scaling state: per FP8 tensor a float32
    scale, inverse scale and amax history."""
    if not is_fp8(layer):
        return 0
    return 2 * weight_elems + fp8_gemms(layer) * FP8_TENSORS_PER_GEMM * (2 + AMAX_HISTORY) * 4
