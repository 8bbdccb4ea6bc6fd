"""A whole training step under one strategy (and algorithm) per layer (pure).

The step, stated so the executor can do exactly the same (each collective at its exposed time:
what overlaps compute is in ``costmodel.comm.overlap``; none on the executor's CPU machine)::

    step = m x (sum over layers in order   of (reshard of inputs, forward compute, forward comm)
              + sum over layers in reverse of (backward compute, backward comm, reshard of input grads))
           (backward compute includes summing the gradients of an output that several layers read)
         + sum over layers of the weight-gradient allreduce
         + sum over layers of the optimiser update
         + the executor's own time per layer pass (Python between kernels; LayerEstimate.dispatch_s)
         + on P ranks sharing a computer, the time they wait for the slowest (StepPrediction.wait_s,
           measured per second of work on a probe; added by the executor's prediction)
         + on a GPU, what the framework's host and kernel launches add beyond the device's kernels
           (StepPrediction.host_s: the step's calls on the host timeline, costmodel.frameworks.host_calls)

Gradient accumulation (``micro_batches`` m, the schedule frameworks run without a pipeline:
PyTorch's ``no_sync``, Megatron-Core's ``num_microbatches``): every layer is priced at the
micro-batch of batch/m samples, its forward and backward run m times, the weights' gradients are
reduced and the optimiser updates once a step, and the activations of one micro-batch are held at
once (a pipeline of one stage under 1F1B is the same step, ``costmodel.step.pipeline``).

Peak memory per device = sum over layers of (weights + gradients + optimiser state + master weights)
+ the most, over layers i, of the activations layers 0..i keep for backward and layer i's transient
(its kernel workspace and the gradients its backward holds: ``layer_cost.Memory``): while layer i's
backward runs, the later layers' activations are gone. The planner holds a bound under its limit,
every layer's activations and the largest transient (``memory_bound_bytes``); the peak counts a
resharded input as the executor holds it (``costmodel.memory.held_inputs``). Under full recomputation (``checkpoints``)
an output that only recomputed readers of its block read is regenerated, not kept, and what one
block's recomputation holds while its backward runs is added (``costmodel.memory.recompute``).
Network inputs arrive already in the layout their first consumer needs (the data loader reads
each rank's block), so they cost no reshard.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from costmodel.compute.model import ComputeModel
from costmodel.calls.algorithms import resolve_algorithms
from costmodel.memory.held_inputs import held_deltas
from costmodel.layer.edge import EdgeEstimate, edge_estimate
from costmodel.layer.cost import LayerEstimate, layer_estimate
from costmodel.machine.model import Machine
from costmodel.choices.optimizer import Optimizer
from costmodel.comm.overlap import front_layers, hidden_expert_s, resolve_overlap
from costmodel.memory.recompute import block_transient_bytes, regenerated
from costmodel.parallel.strategy import Strategy
from costmodel.layer.tied import tie_estimate, ties
from networks.analysis import consumers, layer_cost, saved_outputs
from networks.errors import DnnplanError
from networks.ir import Network


@dataclass(frozen=True)
class LayerPrediction:
    layer: LayerEstimate
    reshard_fwd_s: float  # reshards into this layer's inputs
    reshard_bwd_s: float  # the input gradients going back to the producers
    halo: bool
    held_delta: int = 0  # activations the executor holds beyond the per-layer count (costmodel.memory.held_inputs)

    @property
    def reshard_s(self) -> float:
        return self.reshard_fwd_s + self.reshard_bwd_s

    @property
    def total_s(self) -> float:
        return self.layer.total_s + self.reshard_s


@dataclass(frozen=True)
class StepPrediction:
    network: str
    batch: int
    p: int
    machine: str
    compute: str
    layers: tuple[LayerPrediction, ...]
    recompute_bytes: int = 0  # what one block's recomputation holds at once (costmodel.memory.recompute)
    # the runtime makes each layer's weight gradients in its backward pass (the dnnplan executor
    # without ZeRO), rather than in buffers allocated up front (Megatron-LM, PyTorch's DDP)
    grads_in_backward: bool = False
    # the time the ranks wait for the slowest at the barriers before collectives: the measured wait
    # per second of work of P ranks sharing one computer (executor.probes.wait) times the step's
    # work; 0 unless the executor's prediction adds it (executor.session.execute.predict)
    wait_s: float = 0.0
    # the executor's own code around each collective (its barrier, spans, a reshard's bookkeeping),
    # measured per collective on P ranks (executor.probes.collective_code) and summed over the barriers
    # the step makes (costmodel.step.barriers); 0 unless the executor's prediction adds it
    collective_code_s: float = 0.0
    # gradient accumulation: the layers are priced at one micro-batch of batch / micro_batches
    # samples, run that many times a step; the gradient sync and update once (module docstring)
    micro_batches: int = 1
    overlap: str = "none"  # which collectives hide under compute (costmodel.comm.overlap's mode)
    # what the framework's host and launches add to the step beyond the device's kernels, and the
    # layers whose passes the host holds back (costmodel.frameworks.host_calls; 0 and none: an idle host)
    host_s: float = 0.0
    host_bound: tuple[str, ...] = ()
    # what the framework holds beyond the tensors: context, communicator buffers and the caching
    # allocator's reserve (costmodel.frameworks.framework.FrameworkMemory)
    framework_bytes: int = 0

    def _comm(self, time) -> float:
        """``time(comm)`` summed over the step's collectives: a pass's each micro-batch, the sync once."""
        return sum(time(c) * (1 if c.phase == "sync" else self.micro_batches)
                   for x in self.layers for c in x.layer.comms)

    @property
    def comm_exposed_s(self) -> float:
        """The collectives' time the step waits for (inside forward, backward and gradient sync, and
        the expert all-to-alls no other micro-batch's pass hides: :attr:`unpaired_expert_s`)."""
        return self._comm(lambda c: c.seconds) + self.unpaired_expert_s

    @property
    def comm_overlapped_s(self) -> float:
        """The collectives' time hidden under compute (costmodel.comm.overlap; a context-parallel ring's
        under its attention steps): not in the step."""
        return self._comm(lambda c: c.link_time - c.seconds) - self.unpaired_expert_s

    @property
    def micro_batch(self) -> int:
        return self.batch // self.micro_batches

    @property
    def fwd_s(self) -> float:
        return self.micro_batches * sum(x.layer.fwd_compute_s + x.layer.fwd_comm_s + x.reshard_fwd_s
                                        for x in self.layers)

    @property
    def bwd_s(self) -> float:
        return self.micro_batches * sum(x.layer.bwd_compute_s + x.layer.bwd_comm_s + x.reshard_bwd_s
                                        for x in self.layers)

    @property
    def sync_s(self) -> float:
        return sum(x.layer.grad_sync_s for x in self.layers)

    @property
    def update_s(self) -> float:
        return sum(x.layer.update_s for x in self.layers)

    @property
    def dispatch_s(self) -> float:
        """The executor's own time between the kernels and collectives (LayerEstimate.dispatch_s)."""
        return self.micro_batches * sum(x.layer.dispatch_s for x in self.layers)

    @property
    def work_s(self) -> float:
        """The step without :attr:`wait_s`: every layer's compute, communication, update and dispatch."""
        return self.fwd_s + self.bwd_s + self.sync_s + self.update_s + self.dispatch_s

    @property
    def unpaired_expert_s(self) -> float:
        """Once a step, the expert all-to-alls that ``+experts`` hides under another micro-batch's
        opposite pass but Megatron-Core's combined 1F1B schedule cannot pair: without a pipeline the
        first micro-batch's forward and the last one's backward run alone (costmodel.comm.overlap,
        ``+experts``), so one forward's and one backward's hidden all-to-alls are exposed."""
        return hidden_expert_s(self.layers, "fwd") + hidden_expert_s(self.layers, "bwd")

    @property
    def step_s(self) -> float:
        return self.work_s + self.wait_s + self.collective_code_s + self.host_s + self.unpaired_expert_s

    @property
    def activation_bytes(self) -> int:
        """The activations every layer keeps from its forward to its backward, summed."""
        return sum(x.layer.memory.activations for x in self.layers)

    def _held(self) -> tuple[int, int, int]:
        """(activations held, transient, weight gradients held) when the step holds the most:
        while layer i's backward runs it holds what layers 0..i kept (the later layers' went with
        their backward; each as the executor holds it, ``costmodel.memory.held_inputs``) and its own
        transient (workspace, gradient buffers), more than its forward held; and every layer's
        weight gradients, or, with ``grads_in_backward``, those of layers i.. only (made by their
        backward passes so far, its own included)."""
        total = sum(x.layer.memory.grads for x in self.layers)
        acts, later, best = 0, total, (0, 0, total)
        for x in self.layers:
            m = x.layer.memory
            acts += m.activations + x.held_delta
            grads = later if self.grads_in_backward else total
            if acts + m.transient + grads > sum(best):
                best = (acts, m.transient, grads)
            later -= m.grads
        return best

    @property
    def memory_peak_bytes(self) -> int:
        """The most a device holds at once over the step (module docstring)."""
        return sum(self.memory_parts.values())

    @property
    def memory_allocated_bytes(self) -> int:
        """The tensors' peak a device (what ``torch.cuda.max_memory_allocated`` reports): the peak
        without what the framework adds."""
        return self.memory_peak_bytes - self.framework_bytes

    @property
    def memory_reserved_bytes(self) -> int:
        """The peak a device as the framework holds it (what runs out of memory): the tensors', the
        caching allocator's reserve, the CUDA context and the communicator's buffers
        (costmodel.frameworks.framework.FrameworkMemory.reserved_bytes); the peak itself."""
        return self.memory_peak_bytes

    @property
    def memory_bound_bytes(self) -> int:
        """Every layer's persistent memory and the largest transient: what the planner holds under
        its limit (its per-layer sums cannot see when each layer's activations go, nor which copy
        of a resharded input the executor keeps)."""
        mems = [x.layer.memory for x in self.layers]
        return sum(m.persistent for m in mems) + max((m.transient for m in mems), default=0) + self.recompute_bytes

    @property
    def memory_parts(self) -> dict[str, int]:
        """The peak per device by what holds it (bytes; they sum to ``memory_peak_bytes``): the
        weights, gradients and optimiser state of every layer, the activations held at the peak,
        and the transient there (workspace and gradients; a block's recomputation)."""
        mems = [x.layer.memory for x in self.layers]
        out = {k: sum(getattr(m, k) for m in mems) for k in ("weights", "grads", "master", "optimizer", "fp8")}
        if not out["fp8"]:  # only under fp8 (costmodel.choices.precision)
            del out["fp8"]
        out["activations"], out["transient"], out["grads"] = self._held()
        out["transient"] += self.recompute_bytes
        if self.framework_bytes:
            out["framework"] = self.framework_bytes
        return out


def predict_step(net: Network, batch: int, strategies: dict[str, Strategy], algorithms: dict[str, str],
                 machine: Machine, compute: ComputeModel, optimizer: Optimizer | str = "momentum",
                 rule: str = "mpi", checkpoints: bool = False, grads_in_backward: bool = False,
                 micro_batches: int = 1, overlap=None) -> StepPrediction:
    """Predict one training step of ``net`` at ``batch`` with the given per-layer strategies and algorithms,
    run as ``micro_batches`` micro-batches of ``batch / micro_batches`` samples (gradient accumulation,
    module docstring; the strategies are those of the micro-batch). ``overlap``: which collectives
    hide under compute (costmodel.comm.overlap: a mode or an ``Overlap``; None, the machine's default).
    ``checkpoints``: recomputation runs block by block from each block's kept input (full
    recomputation, ``costmodel.memory.recompute``), rather than layer by layer from each layer's
    kept input (what the planner's per-layer choice prices). ``grads_in_backward``: the runtime
    makes the weight gradients during backward (:attr:`StepPrediction.grads_in_backward`)."""
    whole, batch = batch, micro_batch(batch, micro_batches)
    overlap = resolve_overlap(overlap, machine)
    front = front_layers(net, overlap.bucket_bytes)
    by_name = {layer.name: layer for layer in net.layers}
    readers = consumers(net)
    algorithms = resolve_algorithms(net, algorithms, machine)
    dropped = regenerated(net, algorithms) if checkpoints else set()
    saved = {name: kept and name not in dropped for name, kept in saved_outputs(net).items()}
    tied = {head: embed for embed, head in ties(net)}
    deltas = {} if dropped else held_deltas(net, batch, strategies, saved, algorithms)
    rows = []
    # a layer's estimate and an edge's are functions of the layers' costs, not their names: priced
    # once for layers that repeat (a transformer's blocks), the name set on each; a compute model
    # that notes every kernel it prices (costmodel.compute.calibration) is asked for every layer
    once = not getattr(compute, "notes_every_call", False)
    unnamed = {layer.name: layer.unnamed() for layer in net.layers}
    estimates: dict[tuple, LayerEstimate] = {}
    edges: dict[tuple, EdgeEstimate] = {}
    for layer in net.layers:
        strat = strategies[layer.name]
        key = (unnamed[layer.name], strat, algorithms.get(layer.name, ""), readers[layer.name], saved[layer.name],
               layer.name in front)
        est = estimates.get(key) if once else None
        if est is None:
            est = estimates[key] = layer_estimate(layer, strat, batch, machine, compute, algorithms.get(layer.name, ""),
                                                  optimizer, rule, readers[layer.name], saved[layer.name], overlap,
                                                  layer.name in front, micro_batches)
        elif est.name != layer.name:
            est = dataclasses.replace(est, name=layer.name)
        fwd = bwd = 0.0
        halo = False
        for slot, src in enumerate(layer.inputs):
            if src not in by_name:
                continue
            ekey = (unnamed[src], strategies[src], key[0], strat, slot)
            edge = edges.get(ekey)
            if edge is None:
                edge = edges[ekey] = edge_estimate(by_name[src], strategies[src], layer, strat, slot, batch, machine)
            fcopy, bcopy = edge.copy_s(compute)
            fwd += edge.fwd_s + fcopy
            bwd += edge.bwd_s + bcopy
            halo = halo or edge.halo
        if layer.name in tied:  # the embedding's table resharded to the head's rows, and back (costmodel.layer.tied)
            embed = by_name[tied[layer.name]]
            edge = tie_estimate(embed, strategies[embed.name], layer, strat, machine)
            fcopy, bcopy = edge.copy_s(compute)
            fwd, bwd = fwd + edge.fwd_s + fcopy, bwd + edge.bwd_s + bcopy
        rows.append(LayerPrediction(est, fwd, bwd, halo, deltas.get(layer.name, 0)))
    return StepPrediction(net.name, whole, next(iter(strategies.values())).p if strategies else 1,
                          machine.name, compute.name, tuple(rows),
                          block_transient_bytes(net, batch, strategies, algorithms, dropped) if dropped else 0,
                          grads_in_backward, micro_batches=micro_batches, overlap=overlap.spec)


def micro_batch(batch: int, micro_batches: int) -> int:
    """The samples of one of ``micro_batches`` micro-batches (one clear line when they do not divide ``batch``)."""
    if micro_batches < 1 or batch % micro_batches:
        raise DnnplanError(f"{micro_batches} micro-batches do not divide the batch {batch}",
                           hint="choose --micro-batches dividing --batch")
    return batch // micro_batches


def model_flops_utilization(net: Network, batch: int, step_s: float, devices: int, machine: Machine,
                            peak_key: str = "float32") -> float:
    """Model FLOP utilisation (Chowdhery et al., "PaLM", 2022, Appendix B): the network's own
    training FLOPs for one step at ``batch`` (forward and both backward passes, as the op catalogue
    counts them: no recomputation, no algorithm's extra work) over what ``devices`` devices deliver
    at the ``peak_key`` peak in ``step_s``; FP8 training against the 16-bit peak, as published FP8
    runs state theirs, so the two precisions read on one scale."""
    peak_key = "bfloat16" if peak_key == "float8" else peak_key
    flops = sum(sum(layer_cost(layer, batch).flops) for layer in net.layers)
    peak = machine.device.peak_flops.get(peak_key) or machine.device.peak_flops["float32"]
    return flops / (step_s * devices * peak) if step_s > 0 else 0.0


def prediction_json(pred: StepPrediction) -> dict:
    """The ``dnnplan predict --json`` object."""
    return {
        "network": pred.network, "batch": pred.batch, "devices": pred.p, "machine": pred.machine,
        "compute_model": pred.compute,
        "micro_batches": pred.micro_batches, "micro_batch": pred.micro_batch,
        "step_s": pred.step_s, "fwd_s": pred.fwd_s, "bwd_s": pred.bwd_s, "grad_sync_s": pred.sync_s,
        "update_s": pred.update_s, "dispatch_s": pred.dispatch_s, "wait_s": pred.wait_s,
        "collective_code_s": pred.collective_code_s, "host_s": pred.host_s, "host_bound_layers": list(pred.host_bound),
        "overlap": pred.overlap,
        "comm_exposed_s": pred.comm_exposed_s, "comm_overlapped_s": pred.comm_overlapped_s,
        "memory_peak_bytes": pred.memory_peak_bytes,
        "memory_allocated_bytes": pred.memory_allocated_bytes, "memory_reserved_bytes": pred.memory_reserved_bytes,
        "memory_parts_bytes": pred.memory_parts,
        # per layer: one micro-batch's times (the step runs them micro_batches times; the sync once)
        "layers": [{
            "name": x.layer.name, "strategy": x.layer.strategy.label, "degrees": x.layer.strategy.as_dict(),
            "algorithm": x.layer.algorithm,
            "fwd_compute_s": x.layer.fwd_compute_s, "bwd_compute_s": x.layer.bwd_compute_s,
            "comm_s": x.layer.fwd_comm_s + x.layer.bwd_comm_s + x.layer.grad_sync_s,
            "comm": [{"purpose": c.purpose, "phase": c.phase, "collective": c.collective, "bytes": c.nbytes,
                      "group": c.group, "s": c.seconds, "link_s": c.link_time} for c in x.layer.comms],
            "reshard_s": x.reshard_s, "halo": x.halo, "update_s": x.layer.update_s,
            "memory_bytes": x.layer.memory.total,
        } for x in pred.layers],
    }
