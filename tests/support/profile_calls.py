"""Two kernel calls of different kinds (a GEMM and a reshard copy), shared by the on-demand and
in-run profiling tests."""

from __future__ import annotations

from costmodel.calls.kernel_call import linear_call
from costmodel.calls.layer_calls import reshard_copy_call


def _two_calls():
    return [linear_call("linear.fwd", 64, 64, 64, False, "float32", 4),
            reshard_copy_call(4096, 64, "float32", False)]
