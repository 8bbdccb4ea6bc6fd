"""The GPU kernel set: what frameworks run, behind the same kernel names as the numpy set.

Convolutions are cuDNN's engines through its Python frontend (``conv``: forward, backward-data and
backward-weights graphs; the engines grouped into the four algorithm names by their numerical
notes, ``engines``); GEMMs are cuBLAS in the operands' format with float32 accumulation
(``gemm``); attention is cuDNN's fused SDPA (``flash``) or cuBLAS GEMMs around a fused softmax
(``materialized``) (``attention``); normalisations, activations, dropout, the loss, pooling and the
optimiser's update are one fused pass each (``norm``, ``elementwise``, ``loss``, ``pool``, CUDA C in
``source``), the update of every weight of a step one launch (``multi_tensor``). ``precision``
holds the formats and the process's float32 mode; ``libs`` finds and loads cupy, cuDNN and NCCL on
first use (nothing here imports them at import time).

Importing this package registers every implementation with :mod:`kernels.dispatch`, so the numpy
kernels' names run these on cupy arrays (kernels/__init__.py imports it).
"""

from __future__ import annotations

from kernels import dispatch
from kernels.cuda import attention, conv, elementwise, embedding, gemm, loss, multi_tensor, norm, pool

#: Bumped whenever a GPU kernel's work changes (as kernels.KERNELS_REVISION for the numpy set), and
#: recorded in a GPU table's fingerprint (``gpu_kernels``): 1, the first GPU kernel set (cuDNN,
#: cuBLAS, fused passes); a cupy table without it timed the numpy kernels' array-module code.
GPU_KERNELS_REVISION = 1

#: kernel name -> GPU implementation (each takes the numpy kernel's arguments and ``fallback``)
IMPLEMENTATIONS = {
    "conv2d.fwd": conv.conv2d_forward,
    "conv2d.bwd_data": conv.conv2d_backward_data,
    "conv2d.bwd_weights": conv.conv2d_backward_weights,
    "gemm": gemm.gemm,
    "linear.fwd": gemm.linear_forward,
    "linear.bwd": gemm.linear_backward,
    "linear.bwd_data": gemm.linear_backward_data,
    "linear.bwd_weights": gemm.linear_backward_weights,
    "attention.fwd": attention.attention_forward,
    "attention.bwd": attention.attention_backward,
    "batchnorm.local_sums": norm.bn_local_sums,
    "batchnorm.fwd_apply": norm.bn_forward_apply,
    "batchnorm.bwd_local_sums": norm.bn_backward_local_sums,
    "batchnorm.bwd_apply": norm.bn_backward_apply,
    "layernorm.fwd": norm.layernorm_forward,
    "layernorm.bwd": norm.layernorm_backward,
    "relu.fwd": elementwise.relu_forward,
    "relu.bwd": elementwise.relu_backward,
    "gelu.fwd": elementwise.gelu_forward,
    "gelu.bwd": elementwise.gelu_backward,
    "dropout.fwd": elementwise.dropout_forward,
    "dropout.bwd": elementwise.dropout_backward,
    "add.fwd": elementwise.add_forward,
    "sgd.update": elementwise.sgd_momentum_update,
    "sgd.update_many": multi_tensor.sgd_momentum_update_many,  # not timed: the executor's one update launch
    "grad.cast": elementwise.cast_gradient,
    "grad.scale": elementwise.scale_gradient,
    "softmax_xent.fwd": loss.softmax_xent_forward,
    "softmax_xent.bwd": loss.softmax_xent_backward,
    "maxpool2d.fwd": pool.maxpool2d_forward,
    "maxpool2d.bwd": pool.maxpool2d_backward,
    "global_avgpool.fwd": pool.global_avgpool_forward,
    "global_avgpool.bwd": pool.global_avgpool_backward,
    # not timed kernels (the cost model prices the embedding by its fallback), but the executor runs them
    "embedding.fwd": embedding.embedding_forward,
    "embedding.bwd_weights": embedding.embedding_backward_weights,
}

for _name, _fn in IMPLEMENTATIONS.items():
    dispatch.register(_name, _fn)
