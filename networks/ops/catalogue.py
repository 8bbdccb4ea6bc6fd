"""The op catalogue: every op name a network spec may use, mapped to its description."""

from __future__ import annotations

from networks.ops import attention, conv, dense, loss, moe, norm, pointwise, pool
from networks.ops.base import OpDef

OPS: dict[str, OpDef] = {op.name: op for op in (
    conv.OP, dense.LINEAR, pointwise.RELU, pointwise.GELU, pool.MAXPOOL, pool.AVGPOOL,
    pool.GLOBAL_AVGPOOL, norm.BATCHNORM, norm.LAYERNORM, norm.RMSNORM, pointwise.DROPOUT, pointwise.SWIGLU,
    pointwise.ADD, pointwise.CONCAT, pointwise.FLATTEN, dense.EMBEDDING, attention.OP, moe.OP, loss.OP,
)}


def get_op(name: str) -> OpDef | None:
    return OPS.get(name)
