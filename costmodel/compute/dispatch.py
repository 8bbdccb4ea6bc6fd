"""The executor's own work around a layer's passes, outside every kernel and collective (pure): the
bytes each pass moves, by which the time of the Python between kernels grows, and the compute
model's price of that time (``ComputeModel.dispatch_s``)."""

from __future__ import annotations

from costmodel.calls.layer_calls import grad_sum_calls, kernel_calls, update_calls
from costmodel.compute.model import ComputeModel
from costmodel.parallel.shard import LocalLayer


def pass_bytes(local: LocalLayer, algorithm: str = "", consumers: int = 1) -> list[int]:
    """The bytes the kernels move in each pass the executor makes over a layer in one step, each
    pass with its own Python around the kernels (executor.runtime.stage): forward, backward, the update
    when it has weights, and one gradient sum per reader of its output after the first."""
    layer = local.layer
    bwd = kernel_calls(local, "bwd_data", algorithm) + (kernel_calls(local, "bwd_weights", algorithm)
                                                         if layer.has_weight_grad else ())
    out = [sum(c.bytes for c in kernel_calls(local, "fwd", algorithm)), sum(c.bytes for c in bwd)]
    if layer.weights:
        out.append(sum(c.bytes for c in update_calls(local)))
    return out + [c.bytes for c in grad_sum_calls(local, consumers)]


def dispatch_time(compute: ComputeModel, local: LocalLayer, algorithm: str, consumers: int) -> float:
    """The compute model's time for the executor's own work around a layer's passes
    (``ComputeModel.dispatch_s``)."""
    return float(compute.dispatch_s(local, algorithm, consumers))
