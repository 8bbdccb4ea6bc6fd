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
  slots) bytes (``costmodel.layer_cost``: 16 bytes with Adam, ZeRO's "16 Psi"). Gradients are
  all-reduced in 16 bits.

Which peak and efficiency class a kernel gets is :func:`matmul_peak`; the storage format is
applied to the network once (:func:`with_precision`), so every byte count, collective and
reshard follows from the layers' element type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

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
)}
DEFAULT_PRECISION = "fp32"

#: Ops whose kernels are GEMMs (or convolutions run as them): the tensor cores run these.
MATMUL_OPS = frozenset({"conv2d", "linear", "attention", "moe"})


def get_precision(name: str) -> Precision:
    got = PRECISIONS.get(name)
    if got is None:
        raise DnnplanError(f"unknown --precision {short(name)}", hint=f"use one of {', '.join(PRECISIONS)}")
    return got


def with_precision(net: Network, name: str) -> Network:
    """``net`` with its float32 layers and inputs stored in the precision's format (unchanged for
    fp32 and tf32; integer inputs such as token ids and float64 layers stay as they are; the loss
    stays float32, as frameworks compute it)."""
    storage = get_precision(name).storage
    if storage == "float32":
        return net

    def conv(layer: Layer) -> Layer:
        if layer.dtype != "float32" or layer.op == "softmax_cross_entropy":
            return layer
        return dataclasses.replace(layer, dtype=storage)

    inputs = tuple(dataclasses.replace(i, dtype=storage) if i.dtype == "float32" else i for i in net.inputs)
    return dataclasses.replace(net, inputs=inputs, layers=tuple(conv(layer) for layer in net.layers))


def matmul_peak(layer: Layer, tf32: bool) -> tuple[str, str]:
    """(``peak_tflops`` key, efficiency class) of a layer's arithmetic: tensor cores for the GEMM-like
    ops in 16 bits, or in float32 under TF32; CUDA cores (the float32 peak) for everything else."""
    if layer.op in MATMUL_OPS:
        if layer.dtype in ("float16", "bfloat16"):
            return layer.dtype, "tensor_16bit"
        if layer.dtype == "float32" and tf32:
            return "tf32", "tensor_tf32"
    if layer.dtype == "float64":
        return "float64", "cuda_cores"
    return "float32", "cuda_cores"
