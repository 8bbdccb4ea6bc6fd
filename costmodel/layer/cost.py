"""Cost of one layer under a strategy (pure); an edge's reshard is priced in costmodel.layer.edge.

Per layer (docs/costmodel.md, "Per layer"): forward and backward compute of the local shard; its
collectives (costmodel.layer.comms: a split contraction's partial sums and input gradients,
op-specific ones, the weights' gradient sums), hidden under the passes where the overlap allows;
the optimiser update; memory per device.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute.model import ComputeModel, update_bytes
from costmodel.calls.algorithms import is_recomputed, kernel_algorithm, recomputed_comms, resolve_algorithm
from costmodel.compute.roofline import local_cost
from costmodel.calls.flash import attention_kept_bytes
from costmodel.compute.dispatch import dispatch_time
from costmodel.layer.comms import Comm, framework_exchange, shard_comms, weight_comms
from costmodel.layer.fsdp import fsdp_grad_copy, fsdp_prep_s
from costmodel.calls.layer_calls import grad_sum_calls
from costmodel.parallel.shard import (LocalLayer, dim_splits, local_layer, one_replica, output_layout,
                                      received_block_bytes, windowed)
from costmodel.parallel.layout import max_block_extents
from costmodel.machine.model import Machine
from costmodel.choices.optimizer import Optimizer, as_optimizer
from costmodel.choices.precision import fp8_bytes, fp8_params, fp8_weight
from costmodel.comm.overlap import overlapped, resolve_overlap
from costmodel.parallel.strategy import Strategy
from costmodel.comm.weight_sync import grad_dims, weight_memory
from networks.ir import DTYPE_BYTES, Layer
from networks.ops.base import prod


@dataclass(frozen=True)
class Memory:
    """Bytes per device one layer holds over a step (the straggler's shard).

    Persistent: weights, gradients, optimiser state and the float32 master weights (mixed
    precision), and the activations kept from forward to backward (``networks.analysis.kept_bytes``).
    Transient, only while the layer's passes run: its kernel's ``workspace`` and the gradient
    ``buffers`` of its backward (the output gradient and the input gradients it writes).
    """

    weights: int
    grads: int
    optimizer: int
    activations: int
    workspace: int
    master: int = 0
    buffers: int = 0
    fp8: int = 0  # FP8 weight copies and scaling state (costmodel.choices.precision.fp8_bytes)

    @property
    def persistent(self) -> int:
        """Everything held across the step."""
        return self.weights + self.grads + self.optimizer + self.master + self.activations + self.fp8

    @property
    def transient(self) -> int:
        """Held only while this layer's passes run."""
        return self.workspace + self.buffers

    @property
    def total(self) -> int:
        return self.persistent + self.transient


@dataclass(frozen=True)
class LayerEstimate:
    name: str
    strategy: Strategy
    algorithm: str
    fwd_compute_s: float
    bwd_data_s: float
    bwd_weights_s: float
    update_s: float
    comms: tuple[Comm, ...]
    memory: Memory
    grad_sum_s: float = 0.0  # summing the gradients of an output several input slots read
    grad_prep_s: float = 0.0  # PyTorch FSDP's kernels on the weights' gradient (costmodel.layer.fsdp)
    dispatch_s: float = 0.0  # the executor's own time around the layer's passes (pass_bytes)

    def comm_s(self, phase: str) -> float:
        return sum(c.seconds for c in self.comms if c.phase == phase)

    @property
    def fwd_comm_s(self) -> float:
        return self.comm_s("fwd")

    @property
    def bwd_comm_s(self) -> float:
        return self.comm_s("bwd")

    @property
    def grad_sync_s(self) -> float:
        return self.comm_s("sync")

    @property
    def bwd_compute_s(self) -> float:
        return self.bwd_data_s + self.bwd_weights_s + self.grad_sum_s + self.grad_prep_s

    @property
    def total_s(self) -> float:
        """Compute, collectives of each phase (:meth:`comm_s`'s sums, in one pass), update and dispatch."""
        fwd, bwd, sync = [], [], []
        by_phase = {"fwd": fwd, "bwd": bwd, "sync": sync}
        for c in self.comms:
            seconds = by_phase.get(c.phase)
            if seconds is not None:
                seconds.append(c.seconds)
        return (self.fwd_compute_s + self.bwd_compute_s + sum(fwd) + sum(bwd)
                + sum(sync) + self.update_s + self.dispatch_s)


def _elems(shape) -> int:
    return prod(shape)


def shard_of(layer: Layer, strategy: Strategy, batch: int, memo: dict | None = None) -> LocalLayer:
    """``local_layer``, kept in ``memo`` (``costmodel.layer.comms.group_time``'s) when given: a function of its arguments alone."""
    if memo is None:
        return local_layer(layer, strategy, batch)
    key = ("local", layer, strategy, batch)
    got = memo.get(key)
    if got is None:
        got = memo[key] = local_layer(layer, strategy, batch)
    return got


def layer_estimate(layer: Layer, strategy: Strategy, batch: int, machine: Machine,
                   compute: ComputeModel, algorithm: str = "", optimizer: Optimizer | str = "momentum",
                   rule: str = "mpi", consumers: int = 1, output_saved: bool = True, overlap=None,
                   front: bool = False, micro_batches: int = 1, memo: dict | None = None) -> LayerEstimate:
    """Everything one layer costs under one strategy, per device (the straggler). ``consumers``:
    how many input slots read the layer's output (``networks.analysis.consumers``); each after the
    first costs a gradient sum in backward (``kernel_calls.grad_sum_calls``). ``output_saved``:
    whether the output stays in memory until backward (``networks.analysis.saved_outputs``).
    ``optimizer``: its state, and its ZeRO stage's sharding and collectives (costmodel.choices.optimizer).
    An attention layer's ``algorithm`` "" is the machine's default (``compute.resolve_algorithm``).
    ``overlap``: which collectives hide under the passes (costmodel.comm.overlap; None: the machine's
    default); ``front``: the layer's gradients are in the bucket the backward makes last
    (``overlap.front_layers``). ``micro_batches``: how many a step runs (PyTorch FSDP's gradient
    kernels, :func:`fsdp_prep_s`). ``memo``: what a caller pricing many layers on one machine and
    compute model keeps (``costmodel.layer.comms.group_time``): the collectives' times, each shard with what it
    prices whatever the optimiser (:func:`_sharded`), and each layer's weights with what they price
    whatever the batch (:func:`_weighed`)."""
    opt = as_optimizer(optimizer)
    algorithm = resolve_algorithm(layer, algorithm, machine)
    shard = _sharded(layer, strategy, batch, machine, compute, algorithm, rule, consumers, output_saved, memo)
    local, kernel, fwd, bwd_data, bwd_weights, head, tail, grad_sum, acts, workspace, dispatch, buffers = shard
    wcomms, prep_fwd, prep_bwd, held, update = _weighed(layer, strategy, local, machine, compute, opt, rule,
                                                       micro_batches, memo)
    comms = head + list(wcomms) + tail
    if is_recomputed(algorithm):
        comms += recomputed_comms(comms)
    fwd += prep_fwd
    comms = overlapped(comms, layer, {"fwd": fwd, "bwd": bwd_data + bwd_weights + grad_sum + prep_bwd},
                       resolve_overlap(overlap, machine), front)
    weights, grads, state, master, gathered, fp8, grad_copy = held
    memory = Memory(weights, grads, state, acts, workspace, master=master,
                    buffers=buffers + gathered + grad_copy + gathered_kv_bytes(head), fp8=fp8)
    return LayerEstimate(
        name=layer.name, strategy=strategy, algorithm=algorithm,
        fwd_compute_s=fwd, bwd_data_s=bwd_data, bwd_weights_s=bwd_weights,
        update_s=update, comms=comms, memory=memory,
        grad_sum_s=grad_sum, grad_prep_s=prep_bwd,
        dispatch_s=dispatch)


def gathered_kv_bytes(comms) -> int:
    """The other ranks' keys and values an attention layer over a split sequence holds while its
    pass runs, where they are all-gathered (costmodel.comm.context: ``c kv`` gathered, its own ``kv``
    among them, already counted with its activations); the gradients' reduce-scatter reuses the
    buffer. Nothing where they go round a ring (one chunk in flight)."""
    return max((c.nbytes - c.nbytes // c.group for c in comms
                if c.purpose == "kv" and c.collective == "allgather" and c.group > 1), default=0)


def micro_floor_s(layer: Layer, strategy: Strategy, batch: int, machine: Machine, compute: ComputeModel,
                  algorithm: str = "", rule: str = "mpi", consumers: int = 1, output_saved: bool = True,
                  overlap=None, front: bool = False, memo: dict | None = None) -> float:
    """No optimiser and no ZeRO stage prices this layer's per-micro-batch seconds (``total_s`` less
    its once-a-step gradient sync and update, as ``layer_estimate`` has them) below this: its
    passes, gradient sum, dispatch and the exposed part of every collective but the weights' own,
    the passes as their windows (:func:`shard_parts`, what every ZeRO stage shares). A ZeRO stage
    adds only what cannot make the sum less: the weights' collectives (a collective joining a
    window leaves each other one there at least as exposed, ``costmodel.comm.overlap.overlapped``'s
    shares grow with the window's link time), and PyTorch FSDP's kernels on the weights (each
    second of a window hides at most a second of collectives). So a pipeline pair bounded on it is
    bounded under every ZeRO stage at once (planner.pipeline.bound)."""
    algorithm = resolve_algorithm(layer, algorithm, machine)
    fwd, bwd_data, bwd_weights, comms, grad_sum, dispatch = shard_parts(layer, strategy, batch, machine, compute,
                                                                        algorithm, rule, consumers, output_saved, memo)
    return floor_s(comms, layer, (fwd, bwd_data, bwd_weights), grad_sum, dispatch, algorithm, overlap, machine, front)


def shard_parts(layer: Layer, strategy: Strategy, batch: int, machine: Machine, compute: ComputeModel,
                algorithm: str, rule: str, consumers: int, output_saved: bool, memo: dict | None) -> tuple:
    """(forward, backward-data, backward-weights seconds, the collectives but the weights' own,
    gradient sum, dispatch) of a layer's shard under a resolved ``algorithm``, whatever the
    optimiser (:func:`_sharded`, kept in ``memo``)."""
    shard = _sharded(layer, strategy, batch, machine, compute, algorithm, rule, consumers, output_saved, memo)
    _, _, fwd, bwd_data, bwd_weights, head, tail, grad_sum, _, _, dispatch, _ = shard
    return fwd, bwd_data, bwd_weights, tuple(head + tail), grad_sum, dispatch


def floor_s(comms, layer: Layer, passes: tuple[float, float, float], grad_sum: float, dispatch: float,
            algorithm: str, overlap, machine: Machine, front: bool) -> float:
    """:func:`micro_floor_s` from its parts: ``comms`` (under recomputation the forward's run
    again) hidden under ``passes`` (forward, backward-data, backward-weights) and the gradient sum
    as ``layer_estimate`` hides them, plus the passes and ``dispatch``."""
    fwd, bwd_data, bwd_weights = passes
    comms = tuple(comms)
    if is_recomputed(algorithm):
        comms += tuple(recomputed_comms(comms))
    comms = overlapped(comms, layer, {"fwd": fwd, "bwd": bwd_data + bwd_weights + grad_sum},
                       resolve_overlap(overlap, machine), front)
    return (fwd + bwd_data + bwd_weights + grad_sum + dispatch
            + sum(c.seconds for c in comms if c.phase in ("fwd", "bwd")))


def _weighed(layer: Layer, strategy: Strategy, local: LocalLayer, machine: Machine, compute: ComputeModel,
             opt: Optimizer, rule: str, micro_batches: int, memo: dict | None) -> tuple:
    """What :func:`layer_estimate` prices from the weights' shards alone, whatever the batch: their
    collectives (:func:`weight_comms`), PyTorch FSDP's (forward, backward) seconds on them
    (:func:`fsdp_prep_s`), their bytes (weights, gradients, optimiser state, master copies,
    gathered transient, FP8 copies, FSDP's gradient copy) and the update's seconds; kept in
    ``memo`` (``costmodel.layer.comms.group_time``'s) when given, by these arguments, all but FSDP's seconds whatever
    the micro-batch count (the micro-batch counts a pipeline search weighs price the same weights)."""
    key = ("weights", layer, strategy, local.weight_shapes, opt, rule)
    base = None if memo is None else memo.get(key)
    if base is None:
        itemsize = DTYPE_BYTES.get(layer.dtype, 4)
        wcomms = tuple(weight_comms(layer, strategy, local, machine, opt, rule, memo))
        active = [(dim, dim_splits(layer)[dim]) for dim, _ in strategy.degrees]
        wshapes = dict(local.weight_shapes)
        replicas = {name: strategy.group_size(dims) if dims else 1 for name, dims in grad_dims(layer, active).items()}
        weights, grads, state, master, gathered = weight_memory(wshapes, replicas, itemsize, opt)
        fp8_elems = sum(-(-prod(s) // (replicas[n] if opt.zero >= 3 else 1)) for n, s in wshapes.items()
                        if fp8_weight(n, s))
        fp8 = fp8_bytes(layer, fp8_elems)
        if fp8_params(layer):  # the weight is its FP8 copy, one byte (costmodel.choices.precision): no 16-bit one
            weights, fp8 = weights - fp8_elems * (itemsize - 1), fp8 - fp8_elems
        held = (weights, grads, state, master, gathered, fp8, fsdp_grad_copy(wshapes, itemsize, opt))
        base = (wcomms, replicas, held, _update_s(compute, wshapes, replicas, itemsize, opt))
        if memo is not None:
            memo[key] = base
    wcomms, replicas, held, update = base
    prep = None if memo is None or not opt.fsdp_kernels else memo.get(key + (micro_batches,))
    if prep is None:  # FSDP's kernels per micro-batch (none without them: fsdp_prep_s answers at once)
        prep = fsdp_prep_s(compute, dict(local.weight_shapes), replicas, layer.dtype, opt, micro_batches)
        if memo is not None and opt.fsdp_kernels:
            memo[key + (micro_batches,)] = prep
    return wcomms, prep[0], prep[1], held, update


def _sharded(layer: Layer, strategy: Strategy, batch: int, machine: Machine, compute: ComputeModel, algorithm: str,
             rule: str, consumers: int, output_saved: bool, memo: dict | None) -> tuple:
    """What :func:`layer_estimate` prices whatever the optimiser and its ZeRO stage: the shard, its
    kernel, passes, collectives before and after the weights' own (:func:`shard_comms`), gradient
    sum, kept activations, workspace, dispatch and gradient buffers; kept in ``memo`` (``costmodel.layer.comms.group_time``'s) when given,
    by these arguments (the ZeRO stages of one planning call price the same shards)."""
    strategy, batch = one_replica(layer, strategy, batch, machine.domain_size, machine.copies)
    exchange = framework_exchange(compute)
    key = ("shard", layer, strategy, batch, algorithm, rule, consumers, output_saved, exchange)
    got = None if memo is None else memo.get(key)
    if got is not None:
        return got[:5] + (list(got[5]), list(got[6])) + got[7:]
    local = shard_of(layer, strategy, batch, memo)
    kernel = kernel_algorithm(algorithm)
    fwd, bwd_data, bwd_weights = passes_s(compute, local, algorithm)
    head, tail = shard_comms(layer, strategy, local, machine, rule, kernel,
                              (fwd, bwd_data - (fwd if is_recomputed(algorithm) else 0.0)), memo, exchange)
    grad_sum = sum(compute.call_s(c) for c in grad_sum_calls(local, consumers))
    acts = activation_bytes(local, strategy, output_saved, algorithm, batch) + framework_kept_bytes(compute, local,
                                                                                                    algorithm)
    got = (local, kernel, fwd, bwd_data, bwd_weights, tuple(head), tuple(tail), grad_sum, acts,
           compute.workspace_bytes(local, kernel), dispatch_time(compute, local, kernel, consumers),
           gradient_buffer_bytes(local))
    if memo is not None:
        memo[key] = got
    return got[:5] + (list(got[5]), list(got[6])) + got[7:]


def _update_s(compute: ComputeModel, wshapes: dict, replicas: dict[str, int], itemsize: int, opt: Optimizer) -> float:
    """The optimiser step on each weight's local shard (from ZeRO stage 1 on, its replicas' share),
    scaled by the bytes it moves where the framework's update is not the fused step
    (``Optimizer.update_bytes``: a memory-bound step's time goes with its bytes), or reads gradients
    held wider than the weights (``Optimizer.grad_bytes``: a float32 gradient buffer under 16-bit
    weights, read once)."""
    fused = update_bytes(itemsize, opt.slots)
    wider = max(0, (opt.grad_bytes or itemsize) - itemsize)
    scale = (opt.update_bytes or fused + wider) / fused if opt.update_bytes or wider else 1.0
    return scale * sum(compute.update_s(-(-_elems(shape) // (replicas[n] if opt.zero >= 1 else 1)), itemsize, opt.slots)
                       for n, shape in wshapes.items())


def passes_s(compute: ComputeModel, local: LocalLayer, algorithm: str) -> tuple[float, float, float]:
    """(forward, backward-data, backward-weights) compute of a layer's shard with ``algorithm``;
    under recomputation backward first runs the forward again (priced again: each run of a kernel
    is one call to ``compute``, so a recording model sees both)."""
    kernel = kernel_algorithm(algorithm)
    fwd = compute.pass_s(local, "fwd", kernel)
    again = compute.pass_s(local, "fwd", kernel) if is_recomputed(algorithm) else 0.0
    bwd_data = compute.pass_s(local, "bwd_data", kernel) + again
    bwd_weights = compute.pass_s(local, "bwd_weights", kernel) if local.layer.has_weight_grad else 0.0
    return fwd, bwd_data, bwd_weights


def own_kept_bytes(local: LocalLayer, algorithm: str) -> int:
    """What a layer keeps for backward besides the tensors ``OpDef.saves`` names: nothing when it
    is recomputed; an attention layer's under its algorithm (costmodel.calls.flash.attention_kept_bytes);
    else the op catalogue's ``LayerCost.activation_bytes``."""
    if is_recomputed(algorithm):
        return 0
    if local.layer.op == "attention":
        return attention_kept_bytes(local, kernel_algorithm(algorithm))
    return local_cost(local).activation_bytes


def framework_kept_bytes(compute: ComputeModel, local: LocalLayer, algorithm: str) -> int:
    """What the compute model's kernels keep for backward beyond :func:`own_kept_bytes` (a
    framework's unfused kernels: ``ComputeModel.kept_bytes``); nothing when the layer is recomputed."""
    return 0 if is_recomputed(algorithm) else compute.kept_bytes(local, kernel_algorithm(algorithm))


def activation_bytes(local, strategy: Strategy, output_saved: bool, algorithm: str = "", batch: int = 0) -> int:
    """Activations kept for backward at the local shape: the output when it is saved (its sequence
    shard under the sequence-parallel variant), what the op keeps besides (:func:`own_kept_bytes`),
    plus the received input block when it carries halos (the executor keeps that buffer for
    backward)."""
    layer = local.layer
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    kept = own_kept_bytes(local, algorithm)
    if output_saved:
        kept += (_elems(max_block_extents(output_layout(layer, strategy, batch))) if strategy.seq_scatter
                 else local.batch * _elems(local.out_shape)) * itemsize
    if windowed(layer, strategy):
        kept += sum(received_block_bytes(local, slot) for slot in range(len(local.in_shapes)))
    return kept


def gradient_buffer_bytes(local: LocalLayer) -> int:
    """The gradients live while a layer's backward runs: its output gradient and the input
    gradients it writes (both freed, or handed on, when it is done)."""
    itemsize = DTYPE_BYTES.get(local.layer.dtype, 4)
    return local.batch * (_elems(local.out_shape) + sum(_elems(s) for s in local.in_shapes)) * itemsize
