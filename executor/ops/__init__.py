"""Distributed forward and backward per op, one file per op family; :data:`OPS` maps an op name
to its ``(forward, backward)`` pair (see :mod:`executor.ops.base` for the contract)."""

from __future__ import annotations

from executor.ops import attention, conv, dense, embedding, loss, moe, norm, pointwise, pool

OPS = {
    "conv2d": (conv.forward, conv.backward),
    "linear": (dense.forward, dense.backward),
    "embedding": (embedding.forward, embedding.backward),
    "attention": (attention.forward, attention.backward),
    "moe": (moe.forward, moe.backward),
    "maxpool2d": (pool.pool_forward, pool.pool_backward),
    "avgpool2d": (pool.pool_forward, pool.pool_backward),
    "global_avgpool": (pool.gap_forward, pool.gap_backward),
    "batchnorm2d": (norm.bn_forward, norm.bn_backward),
    "layernorm": (norm.ln_forward, norm.ln_backward),
    "rmsnorm": (norm.rms_forward, norm.rms_backward),
    "relu": (pointwise.relu_fwd, pointwise.relu_bwd),
    "gelu": (pointwise.gelu_fwd, pointwise.gelu_bwd),
    "swiglu": (pointwise.swiglu_fwd, pointwise.swiglu_bwd),
    "dropout": (pointwise.dropout_fwd, pointwise.dropout_bwd),
    "add": (pointwise.add_fwd, pointwise.add_bwd),
    "concat": (pointwise.concat_fwd, pointwise.concat_bwd),
    "flatten": (pointwise.flatten_fwd, pointwise.flatten_bwd),
    "softmax_cross_entropy": (loss.forward, loss.backward),
}
