"""A step as a framework runs it (pure): the cost model's step with the framework's overlap, host
and memory applied (costmodel.frameworks.framework).

The framework's kernels enter the layers' own times (costmodel.frameworks.kernels, the compute model
every command uses); its overlap efficiencies enter each layer's exposed communication
(:func:`framework_overlap`); its host and launches, on the timeline of the step's calls
(costmodel.frameworks.host_calls), and the memory it adds beyond the tensors, enter the step after
(:func:`step_as_run`). On a CPU the measured kernels already hold the host and nothing is added.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.comm.overlap import Overlap
from costmodel.frameworks.framework import Framework
from costmodel.frameworks.host_calls import with_host
from costmodel.machine.model import Machine
from costmodel.step.pipeline import PipelinePrediction
from costmodel.step.prediction import StepPrediction
from networks.ir import Network


def framework_overlap(overlap: Overlap, fw: Framework) -> Overlap:
    """``overlap`` with the framework's efficiency for each overlap it states."""
    if not fw.overlap:
        return overlap
    return replace(overlap, efficiency=tuple((k, v.value) for k, v in fw.overlap))


def pipeline_as_run(pred: PipelinePrediction, fw: Framework, machine: Machine) -> PipelinePrediction:
    """``pred`` (a pipelined step) with the memory ``fw`` adds on its fullest device; its stages'
    times already hold the framework's kernels and host (costmodel.frameworks.layer_host: the
    host's excess per layer, no timeline across stages)."""
    if machine.device.kind != "gpu":
        return pred
    added = fw.memory.added_bytes(pred.memory_allocated_bytes, pred.devices)
    return replace(pred, framework_bytes=added) if added else pred


def step_as_run(pred: StepPrediction, net: Network, fw: Framework, machine: Machine) -> StepPrediction:
    """``pred`` (a step of ``net`` on ``machine``) with ``fw``'s host time and added memory; where
    ``fw`` makes the weights' gradients in backward (``memory.grads_in_backward``) and the step runs
    one micro-batch, its peak holds only the gradients backward has made by then
    (``StepPrediction.grads_in_backward``; with accumulation they are all held from the first
    micro-batch's backward on)."""
    gpu = machine.device.kind == "gpu"
    if not gpu:
        return pred
    pred = with_host(pred, net, fw, gpu)
    if fw.memory.grads_in_backward and pred.micro_batches == 1 and not pred.grads_in_backward:
        pred = replace(pred, grads_in_backward=True)
    added = fw.memory.added_bytes(pred.memory_peak_bytes, pred.p)
    return replace(pred, framework_bytes=added) if added else pred
