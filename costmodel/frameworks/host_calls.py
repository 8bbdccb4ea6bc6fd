"""A step's calls as a framework's host issues them, on the host timeline (pure).

The step of :class:`costmodel.step.prediction.StepPrediction` holds each layer's device time per
pass; the framework (costmodel.frameworks.framework) says how many kernels each pass launches and
what the host pays for them. Per micro-batch, in the order the framework runs them:

- forward, layer by layer: the reshards into the layer (one launch each way that moves anything),
  the layer's forward kernels (``kernels.<op>.fwd`` launches, and ``kernels.<op>.per_local_expert``'s
  ``fwd`` more for each expert the layer's shard holds, sharing its forward time, the first
  one carrying the op's host cost ``host.op_s``; the host waits for the device after
  ``kernels.<op>.sync_after`` of them where the file says so; the first ``kernels.<op>.small`` of
  them small kernels that take no device time but their launch gap), its forward collectives (one
  launch each);
- backward, in reverse: its backward kernels (``kernels.<op>.bwd``), collectives and the reshards of
  the input gradients;

then the gradient sync's collectives, the update (``host.update_launches`` launches) and one
synchronisation (the loss read before the next step); with ``host.sync_each_pass``, one after
every layer pass too (an executor that waits for each layer's kernels). Every launch costs the host
``host.launch_s`` (``kernels.<op>.launch_s`` where the file gives one) and the device
``host.launch_gap_s`` beside its kernel. An op fused into a neighbour's kernel
(0 launches) keeps its device time, issued at no host cost. When CUDA graphs replay the step, the
host issues one graph launch (``host.graph_launch_s``) and nothing else.

The step is the timeline's end (costmodel.step.host_timeline); ``StepPrediction.host_s`` is what it
adds to the device's kernels, and the layers with a host-bound pass are named. On a CPU the
measured kernels already hold the host's time (numpy runs on it): nothing is added there.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.calls.algorithms import kernel_algorithm
from costmodel.frameworks.framework import Framework
from costmodel.parallel.shard import local_experts
from costmodel.step.host_timeline import Call, Timeline, run_timeline
from costmodel.step.prediction import StepPrediction
from networks.ir import Network


def _kernels(label: str, device_s: float, launches: int, first_host_s: float, fw: Framework,
             sync_after: int = 0, launch_s: float | None = None, small: int = 0) -> list[Call]:
    """A pass of ``launches`` kernels sharing ``device_s``, each costing the host ``launch_s`` (None:
    the file's ``host.launch_s``); the first carries ``first_host_s`` more; the first ``small`` of
    them (fewer than ``launches``) carry no device time but their launch gap; with ``sync_after``
    (0 < it < launches), the host waits for the device after that many."""
    host = fw.host
    if launches == 0:
        return [Call(label, first_host_s, device_s)] if device_s > 0 or first_host_s > 0 else []
    small = min(small, launches - 1)
    gap = host.launch_gap_s.value
    each = device_s / (launches - small) + gap
    per = host.launch_s.value if launch_s is None else launch_s
    calls = [Call(label, per + (first_host_s if i == 0 else 0.0), gap if i < small else each)
             for i in range(launches)]
    if 0 < sync_after < launches:
        calls.insert(sync_after, Call(label, 0.0, sync=True))
    return calls


def _single(label: str, device_s: float, fw: Framework) -> list[Call]:
    """One launch (a collective, a reshard) when it moves anything."""
    return _kernels(label, device_s, 1, 0.0, fw) if device_s > 0 else []


def step_calls(pred: StepPrediction, net: Network, fw: Framework) -> list[Call]:
    """The calls of ``pred``'s step (of ``net``) as ``fw``'s host issues them (module docstring);
    each labelled with its layer and pass (``name fwd``, ``name bwd``) or ``sync`` and ``update``."""
    op_s = fw.host.op_s.value
    layers = {layer.name: layer for layer in net.layers}
    kinds = {name: layer.op for name, layer in layers.items()}
    # the experts each layer's shard holds (a mixture of experts' grouped GEMMs issue one GEMM each)
    experts = {x.layer.name: local_experts(layers[x.layer.name], x.layer.strategy)
               for x in pred.layers if x.layer.name in layers}
    micro: list[Call] = []
    waits = fw.host.sync_each_pass
    for x in pred.layers:
        est, label = x.layer, f"{x.layer.name} fwd"
        ops = fw.op(kinds.get(est.name, ""), kernel_algorithm(est.algorithm))
        micro += _single(label, x.reshard_fwd_s, fw)
        micro += _kernels(label, est.fwd_compute_s, ops.launches("fwd", experts.get(est.name, 0)), op_s, fw,
                          ops.sync_after, ops.launch_s, ops.small)
        micro += [c for comm in est.comms if comm.phase == "fwd" for c in _single(label, comm.seconds, fw)]
        micro += [Call(label, 0.0, sync=True)] if waits else []
    for x in reversed(pred.layers):
        est, label = x.layer, f"{x.layer.name} bwd"
        ops = fw.op(kinds.get(est.name, ""), kernel_algorithm(est.algorithm))
        micro += _kernels(label, est.bwd_compute_s, ops.launches("bwd", experts.get(est.name, 0)), op_s, fw,
                          launch_s=ops.launch_s, small=ops.small)
        micro += [c for comm in est.comms if comm.phase == "bwd" for c in _single(label, comm.seconds, fw)]
        micro += _single(label, x.reshard_bwd_s, fw)
        micro += [Call(label, 0.0, sync=True)] if waits else []
    calls = micro * pred.micro_batches
    calls += [c for x in pred.layers for comm in x.layer.comms if comm.phase == "sync"
              for c in _single("sync", comm.seconds, fw)]
    calls += _kernels("update", pred.update_s, fw.host.update_launches, op_s, fw)
    calls.append(Call("update", 0.0, sync=True))
    if fw.host.cuda_graphs:
        return [Call("graph", fw.host.graph_launch_s.value, sum(c.device_s for c in calls), sync=True)]
    return calls


def host_timeline(pred: StepPrediction, net: Network, fw: Framework) -> Timeline:
    """The timeline of ``pred``'s step of ``net`` under ``fw`` (module docstring)."""
    return run_timeline(step_calls(pred, net, fw))


def with_host(pred: StepPrediction, net: Network, fw: Framework, gpu: bool) -> StepPrediction:
    """``pred`` with what ``fw``'s host and launches add to it (``host_s``) and its host-bound
    layers; unchanged on a CPU (``gpu`` False) or where the host never holds the device back."""
    if not gpu or fw.host.zero:
        return pred
    line = host_timeline(pred, net, fw)
    # the layers' host excess the planner weighs (costmodel.frameworks.layer_host, their dispatch_s
    # on a GPU) gives way to the timeline, which holds the host's time itself
    pred = replace(pred, layers=tuple(x if not x.layer.dispatch_s else
                                      replace(x, layer=replace(x.layer, dispatch_s=0.0)) for x in pred.layers))
    bound = tuple(dict.fromkeys(label.rsplit(" ", 1)[0] for label in line.host_bound
                                if label.endswith((" fwd", " bwd"))))
    return replace(pred, host_s=max(0.0, line.end_s - pred.work_s), host_bound=bound)
