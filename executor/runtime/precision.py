"""Arrays in a plan's storage format, and the float32 master weights of mixed precision.

A plan in fp16 or bf16 (costmodel.choices.precision: every float32 layer and input stored in 16 bits,
the loss in float32) runs as frameworks' mixed precision does (Micikevicius et al., "Mixed
Precision Training", ICLR 2018, section 3): the kernels read 16-bit weights; each weight also has
a float32 master copy and float32 momentum, and the update steps the master and rounds it into
the 16-bit copy (kernels.optimizer.sgd_momentum_update with ``master``). Synthetic values are
made in float32 on the host (executor.runtime.synthetic) and rounded there, so every rank and the
reference start from the same 16-bit numbers.
"""

from __future__ import annotations

from executor.backend.device import Array, Backend, on_device
from kernels.xp import storage_dtype

SIXTEEN_BIT = ("float16", "bfloat16")


def stored(backend: Backend, host, dtype_name: str) -> Array:
    """A host float array on the backend's device in ``dtype_name`` (integers stay as they are)."""
    if host.dtype.kind == "f" and host.dtype.name != dtype_name:
        host = host.astype(storage_dtype(dtype_name))
    return on_device(backend, host)


def layer_weights(backend: Backend, blocks: dict, dtype_name: str) -> tuple[dict, dict]:
    """(weights the kernels read, float32 masters): the masters only for a 16-bit layer."""
    if dtype_name not in SIXTEEN_BIT:
        return {n: stored(backend, b, "float32") for n, b in blocks.items()}, {}
    masters = {n: stored(backend, b, "float32") for n, b in blocks.items()}
    return {n: stored(backend, b, dtype_name) for n, b in blocks.items()}, masters


def momentum_for(xp, weights: dict, masters: dict) -> dict:
    """Zero momentum per weight: float32 beside a master, else in the weight's format."""
    return {n: xp.zeros_like(masters[n] if n in masters else w) for n, w in weights.items()}
