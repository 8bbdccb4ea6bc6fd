"""A layer's host time the device cannot hide, priced per layer so the planner can weigh it (pure).

The step under a framework comes from its host timeline (costmodel.frameworks.host_calls): the host
issues each pass's kernels at ``host.op_s`` for the op and ``host.launch_s`` a launch, the device
runs them, and a host that runs ahead hides its cost under long kernels. That timeline is a whole
step's: no sum over layers gives it, so the planner, whose objective is a sum over layers and edges
(planner.problem.build), cannot minimise it as such. It minimises instead, per layer and pass::

    excess = max(0, host - device)      host   = op_s + launches x launch_s (the op's, else the file's)
                                        device = the pass's kernels + launches x launch_gap_s

(a mixture of experts' launches include ``kernels.moe.per_local_expert``'s for each expert of its
shard), the time the device would sit idle if every pass waited for its own issue: what a host-bound layer
(a batch norm under eager PyTorch) costs, and 0 for a layer whose kernels outlast their issue. It
is the layer's ``dispatch_s`` under the framework (costmodel.frameworks.kernels), so it enters
every layer's cost, a pipeline stage's time and the planner's objective alike. The step a command
reports is still the timeline's (``with_host`` puts the timeline in place of these sums), which
lets the host run ahead of short passes across long ones and so is at most the sum's. The device's
own ``launch_gap_s`` beside each kernel is the layer's too (the timeline counts it as device time):
the pass takes ``max(host, device)``, its ``dispatch_s`` that less the kernels, ``excess`` plus the
gaps.

The device time is priced with the op's first kernel algorithm (``costmodel.layer.candidates``), so
a layer's excess is the same under each of its algorithms (the planner derives its algorithms'
costs from one estimate). Under CUDA graphs the host issues one graph a step: nothing per layer.
"""

from __future__ import annotations

from costmodel.calls.algorithms import kernel_algorithm
from costmodel.compute.model import ComputeModel
from costmodel.frameworks.framework import Framework
from costmodel.layer.candidates import algorithms
from costmodel.parallel.shard import LocalLayer


def pass_excess_s(host_s: float, device_s: float) -> float:
    """The time a pass's device waits for its issue when nothing runs ahead (module docstring)."""
    return max(0.0, host_s - device_s)


def layer_host_excess_s(local: LocalLayer, fw: Framework, compute: ComputeModel) -> float:
    """The forward's and the backward's host excess of ``local`` under ``fw`` and their launch gaps
    (module docstring), its kernels priced by ``compute``."""
    host = fw.host
    if host.cuda_graphs or host.zero:
        return 0.0
    algorithm = algorithms(local.layer)[0]
    ops = fw.op(local.layer.op, kernel_algorithm(algorithm))
    fwd = compute.pass_s(local, "fwd", algorithm)
    bwd = compute.pass_s(local, "bwd_data", algorithm) + compute.pass_s(local, "bwd_weights", algorithm)
    launch_s = host.launch_s.value if ops.launch_s is None else ops.launch_s  # the op's own, where it has one
    total = 0.0
    experts = local.p.get("experts", 0) if local.layer.op == "moe" else 0  # the shard's own experts
    for launches, device_s in ((ops.launches("fwd", experts), fwd), (ops.launches("bwd", experts), bwd)):
        issue = host.op_s.value + launches * launch_s
        gaps = launches * host.launch_gap_s.value
        total += gaps + pass_excess_s(issue, device_s + gaps)
    return total
