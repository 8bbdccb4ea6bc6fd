"""One kernel invocation (:class:`KernelCall`) and what its shape tuple means, per kernel (pure).

:mod:`costmodel.calls.layer_calls` lists the calls each layer pass makes (the one kernel set,
docs/kernels.md); the profiler times them and the compute models look them up by
:attr:`KernelCall.key`. Kept apart so that the modules listing calls per op family
(:mod:`costmodel.calls.attention`) and the one listing them per layer share the type.
"""

from __future__ import annotations

from dataclasses import dataclass

_CONV = ("n", "c", "h", "w", "f", "kh", "kw", "sh", "sw", "pt", "pb", "pl", "pr", "dh", "dw", "groups", "bias")
_POOL = ("n", "c", "h", "w", "kh", "kw", "sh", "sw", "pt", "pb", "pl", "pr", "dh", "dw", "ceil_mode")
_AVGPOOL = _POOL + ("count_include_pad",)
_NCHW = ("n", "c", "h", "w")
_LINEAR = ("rows", "c", "f", "bias")
# ``kv_heads`` last (a structure field: a grouped-query call is never a multi-head one's neighbour)
_ATTN = ("n", "heads", "sq", "sk", "dh", "causal", "kv_heads")
# a mixture of experts (kernels.moe_route, kernels.moe): the token movement over (N, S, D) tokens
# routed to ``experts`` with ``top_k`` choices into buffers of ``cap`` rows a sequence; the experts'
# MLPs, ``e`` of them over ``rows`` rows each, of width ``hidden``, ``gated`` (SwiGLU-style) or not,
# activation ``act`` (an index into costmodel.calls.moe.ACTIVATION_CODES)
_MOE_ROUTE = ("n", "sq", "d", "experts", "top_k", "cap")
_MOE_EXPERTS = ("e", "rows", "d", "hidden", "gated", "act")

#: Meaning of each position of ``KernelCall.shape``, per kernel.
SHAPE_FIELDS: dict[str, tuple[str, ...]] = {
    "conv2d.fwd": _CONV, "conv2d.bwd_data": _CONV, "conv2d.bwd_weights": _CONV,
    "linear.fwd": _LINEAR, "linear.bwd_data": _LINEAR, "linear.bwd_weights": _LINEAR,
    "gemm": ("m", "k", "n", "trans_a", "trans_b"),
    "maxpool2d.fwd": _POOL, "maxpool2d.bwd": _POOL,
    "avgpool2d.fwd": _AVGPOOL, "avgpool2d.bwd": _AVGPOOL,
    "global_avgpool.fwd": _NCHW, "global_avgpool.bwd": _NCHW,
    "batchnorm.local_sums": _NCHW, "batchnorm.fwd_apply": _NCHW,
    "batchnorm.bwd_local_sums": _NCHW, "batchnorm.bwd_apply": _NCHW,
    "layernorm.fwd": ("rows", "d"), "layernorm.bwd": ("rows", "d"),
    "relu.fwd": ("elems",), "relu.bwd": ("elems",), "gelu.fwd": ("elems",), "gelu.bwd": ("elems",),
    "dropout.fwd": ("elems",), "dropout.bwd": ("elems",),
    "add.fwd": ("elems",), "add.bwd": ("elems",),
    # concat along axis 1 of (outer, size_k, inner) blocks; the shape is (outer, inner, size_1, ...)
    "concat.fwd": ("outer", "inner"), "concat.bwd": ("outer", "inner"),
    "softmax_xent.fwd": ("rows", "k"), "softmax_xent.bwd": ("rows", "k"),
    "attention.fwd": _ATTN, "attention.bwd": _ATTN,
    "moe_dispatch.fwd": _MOE_ROUTE, "moe_dispatch.bwd": _MOE_ROUTE,
    "moe_combine.fwd": _MOE_ROUTE, "moe_combine.bwd": _MOE_ROUTE,
    "moe_experts.fwd": _MOE_EXPERTS, "moe_experts.bwd_data": _MOE_EXPERTS, "moe_experts.bwd_weights": _MOE_EXPERTS,
    "sgd.update": ("elems",),
    # PyTorch FSDP's kernels on a unit's gradient (costmodel.layer.fsdp): a 16-bit array cast to
    # float32, and an in-place division
    "grad.cast": ("elems",), "grad.scale": ("elems",),
    # a reshard's block copies: ``outer`` contiguous runs of ``inner`` elements
    "reshard.copy": ("outer", "inner"), "reshard.add": ("outer", "inner"),
}

#: Positions of a shape that are sizes (interpolated over); the others are structure (stride,
#: padding, flags), which must match exactly for two measurements to be neighbours.
SIZE_FIELDS = frozenset({"n", "c", "h", "w", "f", "rows", "m", "k", "d", "elems", "outer", "inner",
                         "heads", "sq", "sk", "dh", "cap", "e", "hidden"})


@dataclass(frozen=True)
class KernelCall:
    """One kernel invocation: registry name, flat shape (see :data:`SHAPE_FIELDS`), dtype,
    convolution algorithm ("" for other kernels), FLOPs (catalogue convention) and bytes moved."""

    kernel: str
    shape: tuple[int, ...]
    dtype: str
    algo: str
    flops: int
    bytes: int

    @property
    def key(self) -> str:
        """The profile-table key: ``kernel|d0,d1,...|dtype|algo``."""
        return f"{self.kernel}|{','.join(str(int(s)) for s in self.shape)}|{self.dtype}|{self.algo}"

    @property
    def work(self) -> int:
        """What interpolation scales with: FLOPs, or bytes for kernels that do no arithmetic."""
        return self.flops if self.flops > 0 else max(self.bytes, 1)


def split_key(key: str) -> tuple[str, tuple[int, ...], str, str]:
    kernel, shape, dtype, algo = key.split("|")
    return kernel, tuple(int(s) for s in shape.split(",") if s), dtype, algo


def shape_fields(kernel: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    """Field names of a shape (concat's trailing sizes are all sizes)."""
    fields = SHAPE_FIELDS[kernel]
    return fields + ("size",) * (len(shape) - len(fields))


def linear_call(kernel: str, rows: int, c: int, f: int, bias: bool, dtype: str, item: int) -> KernelCall:
    """One of linear.fwd / linear.bwd_data / linear.bwd_weights with the catalogue's FLOPs."""
    b = int(bool(bias))
    macs = rows * c * f
    extra = rows * f * b if kernel != "linear.bwd_data" else 0
    nbytes = (rows * c + rows * f + c * f) * item
    return KernelCall(kernel, (rows, c, f, b), dtype, "", 2 * macs + extra, nbytes)
