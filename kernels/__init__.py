"""The one kernel set: the profiler times these functions and the executor runs them.

All kernels are written once over an array module (numpy or cupy, found from the arguments with
``kernels.xp.module_of``). ``KERNELS`` names every timed kernel; the functions are also importable
directly from their modules (``kernels.conv``, ``.gemm``, ``.pool``, ``.norm``,
``.activation``, ``.loss``, ``.attention``, ``.optimizer``, ``.reshard``).
"""

from __future__ import annotations

from typing import Callable

from kernels import activation, attention, conv, cuda, gemm, loss, moe, moe_route, norm, optimizer, pool, reshard

#: Bumped whenever a kernel's work changes, so that timings of the old kernels are not reused: the
#: per-user profile cache is one file per revision (profiler.tables.store.cache_path), and the revision is
#: recorded in every table's fingerprint. What each revision changed:
#: 2: conv2d.bwd_data returns a contiguous array; im2col's weight gradient folds the batch into one
#:    GEMM for large per-sample buffers.
#: 3: Winograd builds its transform matrices once, gathers input tiles in one strided copy,
#:    transforms the rotated filter of the data gradient without building it and writes the weight
#:    gradient in its layout.
#: 4: gelu keeps its input only (its backward computes the tanh again); dropout keeps a one-byte
#:    mask.
#: 5: FFT convolution takes scaled transforms, each 2-D one as its two 1-D passes, and lets each
#:    buffer go when done (NumPy's unscaled single-precision FFT ran through double precision);
#:    SGD's update forms lr * v in chunks on the CPU.
#: 6: gelu's backward and attention's backward compute in place (gelu in two buffers of its input's
#:    size, attention's score gradient in one score-sized buffer).
KERNELS_REVISION = 6

KERNELS: dict[str, Callable] = {
    "sgd.update": optimizer.sgd_momentum_update,
    "grad.cast": optimizer.cast_gradient,
    "grad.scale": optimizer.scale_gradient,
    "conv2d.fwd": conv.conv2d_forward,
    "conv2d.bwd_data": conv.conv2d_backward_data,
    "conv2d.bwd_weights": conv.conv2d_backward_weights,
    "gemm": gemm.gemm,
    "linear.fwd": gemm.linear_forward,
    "linear.bwd": gemm.linear_backward,
    "linear.bwd_data": gemm.linear_backward_data,
    "linear.bwd_weights": gemm.linear_backward_weights,
    "maxpool2d.fwd": pool.maxpool2d_forward,
    "maxpool2d.bwd": pool.maxpool2d_backward,
    "avgpool2d.fwd": pool.avgpool2d_forward,
    "avgpool2d.bwd": pool.avgpool2d_backward,
    "global_avgpool.fwd": pool.global_avgpool_forward,
    "global_avgpool.bwd": pool.global_avgpool_backward,
    "batchnorm.local_sums": norm.bn_local_sums,
    "batchnorm.fwd_apply": norm.bn_forward_apply,
    "batchnorm.bwd_local_sums": norm.bn_backward_local_sums,
    "batchnorm.bwd_apply": norm.bn_backward_apply,
    "batchnorm2d.fwd": norm.batchnorm2d_forward,
    "batchnorm2d.bwd": norm.batchnorm2d_backward,
    "layernorm.fwd": norm.layernorm_forward,
    "layernorm.bwd": norm.layernorm_backward,
    "relu.fwd": activation.relu_forward,
    "relu.bwd": activation.relu_backward,
    "gelu.fwd": activation.gelu_forward,
    "gelu.bwd": activation.gelu_backward,
    "dropout.fwd": activation.dropout_forward,
    "dropout.bwd": activation.dropout_backward,
    "add.fwd": activation.add_forward,
    "add.bwd": activation.add_backward,
    "concat.fwd": activation.concat_forward,
    "concat.bwd": activation.concat_backward,
    "softmax_xent.fwd": loss.softmax_xent_forward,
    "softmax_xent.bwd": loss.softmax_xent_backward,
    "attention.fwd": attention.attention_forward_packed,
    "attention.bwd": attention.attention_backward_packed,
    "moe_dispatch.fwd": moe_route.dispatch_forward,
    "moe_dispatch.bwd": moe_route.dispatch_backward,
    "moe_combine.fwd": moe_route.combine_forward,
    "moe_combine.bwd": moe_route.combine_backward,
    "moe_experts.fwd": moe.experts_forward,
    "moe_experts.bwd_data": moe.experts_backward_data,
    "moe_experts.bwd_weights": moe.experts_backward_weights,
    "reshard.copy": reshard.copy_block,
    "reshard.add": reshard.add_block,
}

__all__ = ["KERNELS", "activation", "attention", "conv", "gemm", "loss", "moe", "moe_route", "norm", "pool", "reshard"]
