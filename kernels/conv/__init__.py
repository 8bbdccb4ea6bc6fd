"""2-D convolution, one file an algorithm (:mod:`.direct`, :mod:`.im2col`, :mod:`.fft`,
:mod:`.winograd`, with their shared buffers and padding in :mod:`.buffers`), and the three passes
that run the one named (:mod:`.passes`), whose names this package hands on."""

from kernels.conv.passes import (CONV_ALGORITHMS, CONV_PASSES, PASS_FALLBACK, conv2d_backward_data,
                                 conv2d_backward_weights, conv2d_forward, conv_applicable, conv_output_hw,
                                 conv_workspace_bytes, kernel_run)

__all__ = ["CONV_ALGORITHMS", "CONV_PASSES", "PASS_FALLBACK", "conv_applicable", "conv_output_hw",
           "conv2d_forward", "conv2d_backward_data", "conv2d_backward_weights", "conv_workspace_bytes",
           "kernel_run"]
