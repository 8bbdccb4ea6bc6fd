"""Cost of one layer under a strategy, and of one edge between two strategies (pure).

Per layer (docs/costmodel.md, "Per layer"): forward and backward compute of the local shard; the
forward partial-sum allreduce of a split contraction (C); the backward allreduce of partial input
gradients of a split filter dimension (F); op-specific collectives (batch-norm statistics,
attention keys and values); the weight-gradient allreduce over the ranks holding replicas of the
same weight shard; the optimiser update; memory per device. Per edge: the reshard from the
producer's layout to the consumer's, forward and backward (halo exchanges included).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from costmodel.collective_groups import collective_s
from costmodel.collectives import alltoallv_s
from costmodel.compute import RECOMPUTE, ComputeModel, kernel_algorithm, local_cost, recomputed_comms
from costmodel.kernel_calls import dtype_for_itemsize, grad_sum_calls, kernel_calls, update_calls
from costmodel.layer_layouts import (LocalLayer, _splits, input_layout, local_layer, output_layout,
                                     received_block_bytes, windowed)
from costmodel.layout import Layout, copy_run, max_block_extents, reshard_peaks
from costmodel.machine import Machine
from costmodel.optimizer import Optimizer, as_optimizer
from costmodel.strategy import Strategy
from costmodel.tensor_comms import tensor_collectives
from networks.ir import DTYPE_BYTES, Layer
from networks.ops.base import prod

#: Bytes of the float32 master copy a 16-bit weight has under mixed precision (costmodel.precision)
MASTER_BYTES = 4


@dataclass(frozen=True)
class Comm:
    """One collective a layer runs: what it is for, the phase, bytes per rank and group size."""

    purpose: str  # "partial_sum", "input_grad", "output_grad", "input_gather", "stats", "kv", "grad_sync", "param_gather"
    phase: str  # "fwd", "bwd", "sync"
    collective: str
    nbytes: int
    group: int
    seconds: float


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

    @property
    def persistent(self) -> int:
        """Everything held across the step."""
        return self.weights + self.grads + self.optimizer + self.master + self.activations

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
        return self.bwd_data_s + self.bwd_weights_s + self.grad_sum_s

    @property
    def total_s(self) -> float:
        return (self.fwd_compute_s + self.bwd_compute_s + self.fwd_comm_s + self.bwd_comm_s
                + self.grad_sync_s + self.update_s + self.dispatch_s)


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


def group_time(collective: str, nbytes: float, strategy: Strategy, dims, machine: Machine,
               rule: str = "mpi", cold: bool = False) -> float:
    """Time of a collective over the ranks that differ only along ``dims`` (rank 0's group);
    ``cold``: right after a layer's kernels (``Machine.fitted_cold``). Inside one node, a time
    measured in the run for exactly this collective (``Machine.measured``) comes first."""
    dims = tuple(dims)
    if not dims or nbytes <= 0 or strategy.group_size(dims) == 1:
        return 0.0
    per_node, nodes = _group_span(strategy, dims, machine)
    if nodes == 1:
        got = machine.measured_s(collective, int(nbytes), per_node, cold)
        if got is not None:
            return got
    return collective_s(collective, nbytes, per_node, nodes, machine, rule=rule, cold=cold)


@lru_cache(maxsize=None)
def _group_span(strategy: Strategy, dims: tuple[str, ...], machine: Machine) -> tuple[int, int]:
    """``machine.group_span`` of rank 0's group along ``dims`` (memoised: the planner asks often)."""
    return machine.group_span(strategy.group_array(0, dims))


def _elems(shape) -> int:
    return prod(shape)


def layer_estimate(layer: Layer, strategy: Strategy, batch: int, machine: Machine,
                   compute: ComputeModel, algorithm: str = "", optimizer: Optimizer | str = "momentum",
                   rule: str = "mpi", consumers: int = 1, output_saved: bool = True) -> LayerEstimate:
    """Everything one layer costs under one strategy, per device (the straggler). ``consumers``:
    how many input slots read the layer's output (``networks.analysis.consumers``); each after the
    first costs a gradient sum in backward (``kernel_calls.grad_sum_calls``). ``output_saved``:
    whether the output stays in memory until backward (``networks.analysis.saved_outputs``).
    ``optimizer``: its state, and its ZeRO stage's sharding and collectives (costmodel.optimizer)."""
    opt = as_optimizer(optimizer)
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    local = local_layer(layer, strategy, batch)
    splits = _splits(layer)
    active = [(dim, splits[dim]) for dim, _ in strategy.degrees]
    comms: list[Comm] = []

    def add(purpose, phase, collective, nbytes, dims):
        dims = tuple(dims)
        if not dims or nbytes <= 0:
            return
        # partial sums, input gradients and statistics follow the layer's kernels (cold caches);
        # the executor makes the weight-gradient allreduces back to back (runtime.step)
        secs = group_time(collective, nbytes, strategy, dims, machine, rule, cold=phase != "sync")
        comms.append(Comm(purpose, phase, collective, int(nbytes), strategy.group_size(dims), secs))

    for args in tensor_collectives(layer, strategy, local, itemsize):
        add(*args)
    extra_dims = [d for d, s in active if s.extra]
    if extra_dims:
        for ex in dict((s.dim, s) for _, s in active if s.extra)[extra_dims[0]].extra:
            base = {"channels": local.in_shapes[0][0], "rows": local.batch * _elems(local.in_shapes[0][:-1]),
                    "output": local.batch * _elems(local.out_shape)}[ex.per]
            contrib = ex.factor * base * itemsize
            nbytes = contrib * strategy.group_size(extra_dims) if ex.collective == "allgather" else contrib
            add({"channels": "stats", "rows": "stats", "output": "kv"}[ex.per], ex.phase, ex.collective, nbytes,
                extra_dims)
    wshapes = dict(local.weight_shapes)
    replicas = {name: strategy.group_size(dims) if dims else 1 for name, dims in _grad_dims(layer, active).items()}
    for args in weight_collectives(layer, active, wshapes, itemsize, opt):
        add(*args)
    if algorithm == RECOMPUTE:
        comms += recomputed_comms(comms)
    weights, grads, state, master, gathered = _weight_memory(wshapes, replicas, itemsize, opt)
    kernel = kernel_algorithm(algorithm)
    memory = Memory(weights, grads, state, activation_bytes(local, strategy, output_saved, algorithm, batch),
                    compute.workspace_bytes(local, kernel), master=master,
                    buffers=gradient_buffer_bytes(local) + gathered)
    fwd, bwd_data, bwd_weights = passes_s(compute, local, algorithm)
    return LayerEstimate(
        name=layer.name, strategy=strategy, algorithm=algorithm,
        fwd_compute_s=fwd, bwd_data_s=bwd_data, bwd_weights_s=bwd_weights,
        update_s=sum(compute.update_s(-(-_elems(shape) // (replicas[n] if opt.zero >= 1 else 1)), itemsize,
                                      opt.slots) for n, shape in wshapes.items()),
        comms=tuple(comms), memory=memory,
        grad_sum_s=sum(compute.call_s(c) for c in grad_sum_calls(local, consumers)),
        dispatch_s=dispatch_time(compute, local, kernel, consumers))


def passes_s(compute: ComputeModel, local: LocalLayer, algorithm: str) -> tuple[float, float, float]:
    """(forward, backward-data, backward-weights) compute of a layer's shard with ``algorithm``;
    under ``RECOMPUTE`` backward first runs the forward again (priced again: each run of a kernel
    is one call to ``compute``, so a recording model sees both)."""
    kernel = kernel_algorithm(algorithm)
    fwd = compute.pass_s(local, "fwd", kernel)
    again = compute.pass_s(local, "fwd", kernel) if algorithm == RECOMPUTE else 0.0
    bwd_data = compute.pass_s(local, "bwd_data", kernel) + again
    bwd_weights = compute.pass_s(local, "bwd_weights", kernel) if local.layer.has_weight_grad else 0.0
    return fwd, bwd_data, bwd_weights


def _grad_dims(layer: Layer, active) -> dict[str, tuple[str, ...]]:
    """Each weight's gradient group: the split dimensions whose ranks hold replicas of its shard."""
    return {name: tuple(d for d, s in active if name in s.partial_weight_grad) for name, _ in layer.weights}


def weight_collectives(layer: Layer, active, wshapes: dict, itemsize: int, opt: Optimizer) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of the weights' collectives: the gradient
    allreduce per gradient group, or ZeRO's reduce-scatter and allgathers (costmodel.optimizer)."""
    by_group: dict[tuple[str, ...], int] = {}
    for name, dims in _grad_dims(layer, active).items():
        if dims:
            by_group[dims] = by_group.get(dims, 0) + _elems(wshapes[name]) * itemsize
    out = []
    for dims, nbytes in by_group.items():
        if opt.zero == 0:
            out.append(("grad_sync", "sync", "allreduce", nbytes, dims))
        elif opt.zero < 3:
            out += [("grad_sync", "sync", "reduce_scatter", nbytes, dims),
                    ("param_gather", "sync", "allgather", nbytes, dims)]  # the updated shards, once
        else:
            out += [("grad_sync", "sync", "reduce_scatter", nbytes, dims),
                    ("param_gather", "fwd", "allgather", nbytes, dims),  # before forward, and again
                    ("param_gather", "bwd", "allgather", nbytes, dims)]  # before backward
    return out


def _weight_memory(wshapes: dict, replicas: dict[str, int], itemsize: int,
                   opt: Optimizer) -> tuple[int, int, int, int, int]:
    """(weights, gradients, optimiser state, master weights, gathered transient) bytes per device,
    each sharded over the weight's replicas from its ZeRO stage on (costmodel.optimizer)."""
    def sharded(stage: int, per_elem: int) -> int:
        return sum(-(-_elems(wshapes[n]) // (replicas[n] if opt.zero >= stage else 1)) * per_elem for n in wshapes)

    whole = sum(_elems(s) for s in wshapes.values()) * itemsize
    gathered = (whole if opt.zero >= 3 else 0) + (whole if opt.zero >= 2 else 0)
    return (sharded(3, itemsize), sharded(2, itemsize), sharded(1, opt.slots * max(itemsize, 4)),
            sharded(1, MASTER_BYTES) if itemsize < 4 else 0, gathered)


def activation_bytes(local, strategy: Strategy, output_saved: bool, algorithm: str = "", batch: int = 0) -> int:
    """Activations kept for backward at the local shape: the output when it is saved (its sequence
    shard under the sequence-parallel variant), what the op keeps besides
    (``networks.analysis.kept_bytes``; nothing under ``RECOMPUTE``), plus the received input block
    when it carries halos (the executor keeps that buffer for backward)."""
    layer = local.layer
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    kept = 0 if algorithm == RECOMPUTE else local_cost(local).activation_bytes
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


@dataclass(frozen=True)
class EdgeEstimate:
    """A reshard on one edge, forward and backward (zero when the layouts match).

    ``fwd_s``/``bwd_s`` are the messages (Alltoallv on the link); the block copies around them
    (``fwd_copy``/``bwd_copy``: elements written, elements received, contiguous run) are priced by
    the compute model, :meth:`copy_s`, since they are kernels of this device (``reshard.copy``).
    """

    fwd_s: float
    bwd_s: float
    fwd_bytes: int  # the most any rank receives
    bwd_bytes: int
    halo: bool  # the layouts differ only by halos (a halo exchange)
    fwd_copy: tuple[int, int, int] = (0, 0, 1)
    bwd_copy: tuple[int, int, int] = (0, 0, 1)
    dtype: str = "float32"

    def copy_s(self, compute: ComputeModel | None) -> tuple[float, float]:
        """Seconds of the forward and backward block copies on ``compute``."""
        return (reshard_copy_s(compute, *self.fwd_copy, self.dtype, False),
                reshard_copy_s(compute, *self.bwd_copy, self.dtype, True))


def reshard_copy_s(compute: ComputeModel | None, written: int, recv: int, run: int, dtype: str,
                   backward: bool) -> float:
    """The executor's block copies in one reshard on its busiest rank (``executor.comm.reshard.reshard``):
    every element of the destination block written once (copied from the rank's own block or from
    the receive buffer; added, backward), and the packing of what it sends (taken as much as it
    receives, as the messages are). Zero when no rank receives anything (then the executor, at
    most, slices its own block; not counted). ``written`` and ``recv`` are maxima over ranks, so
    this is an upper bound when the busiest writer and receiver differ."""
    if compute is None or recv <= 0:
        return 0.0
    return compute.copy_s(written, run, dtype, backward) + compute.copy_s(recv, run, dtype, False)


def _strip_windows(layout: Layout) -> Layout:
    return Layout(layout.shape, layout.strategy,
                  tuple(None if a is None else a.__class__(a.dim, a.degree, a.extent if a.window is None
                                                           else layout.shape[i]) for i, a in enumerate(layout.axes)))


def _reshard_dims(src: Layout, dst: Layout) -> tuple[str, ...]:
    """The ranks one rank exchanges with in a reshard lie in the group of the dimensions either
    layout splits."""
    return tuple(sorted(set(src.split_dims()) | set(dst.split_dims())))


def reshard_exchange(src: Layout, dst: Layout, backward: bool, itemsize: int) -> tuple[int, int]:
    """``(bytes, group size)`` of a reshard's Alltoallv: the most bytes any rank receives, and the
    ranks of the group it exchanges in (``Machine.measured`` keys ``("alltoallv", bytes, group,
    "cold")``)."""
    return reshard_peaks(src, dst, backward)[0] * itemsize, _exchange_group(src, dst, _reshard_dims(src, dst))


def _exchange_group(src: Layout, dst: Layout, dims: tuple[str, ...]) -> int:
    """The larger of the two strategies' groups along ``dims`` (a replicated consumer of a
    sample-split producer gathers from the producer's group, its own being one rank)."""
    if not dims:
        return dst.strategy.p
    return max(src.strategy.group_size(dims), dst.strategy.group_size(dims))


def _reshard_time(src: Layout, dst: Layout, backward: bool, itemsize: int, machine: Machine) -> tuple[float, int]:
    recv, messages, _ = reshard_peaks(src, dst, backward)
    nbytes = recv * itemsize
    if nbytes == 0:
        return 0.0, 0
    dims = _reshard_dims(src, dst)
    link = _link(dst.strategy, dims, machine)
    if link is None:  # inside one node: the Alltoallv timed in the run (Machine.measured), else the
        got = machine.measured_s("alltoallv", nbytes, _exchange_group(src, dst, dims), True)
        if got is not None:
            return got, nbytes
        # fitted alltoall link of this message size, when measured, after a layer's kernels (cold)
        link = machine.link_for_collective("alltoall", nbytes, cold=True)
    # sends are spread over replicas as evenly as receives (assumed; the executor measures it)
    return alltoallv_s(nbytes, nbytes, messages, link), nbytes


@lru_cache(maxsize=None)
def _link(strategy: Strategy, dims: tuple[str, ...], machine: Machine):
    """The link of rank 0's group along ``dims`` (every rank when ``dims`` is empty), memoised;
    None inside one node, where a reshard (an Alltoallv) is costed by the message's size."""
    link = machine.link_for(strategy.group_array(0, dims) if dims else np.arange(strategy.p))
    return None if link is machine.intra else link


@lru_cache(maxsize=None)
def edge_estimate(producer: Layer, pstrat: Strategy, consumer: Layer, cstrat: Strategy, slot: int,
                  batch: int, machine: Machine) -> EdgeEstimate:
    return layout_edge(output_layout(producer, pstrat, batch), input_layout(consumer, cstrat, batch, slot),
                       DTYPE_BYTES.get(producer.dtype, 4), machine)


def layout_edge(src: Layout, dst: Layout, itemsize: int, machine: Machine) -> EdgeEstimate:
    """The reshard from ``src`` (owned blocks) to ``dst`` (needed blocks), its gradient summed back."""
    fwd_s, fwd_b = _reshard_time(src, dst, False, itemsize, machine)
    bwd_s, bwd_b = _reshard_time(dst, src, True, itemsize, machine)
    halo = bool(fwd_b) and reshard_peaks(src, _strip_windows(dst))[0] == 0
    run = copy_run(src, dst)
    (f_recv, _, f_written), (b_recv, _, b_written) = reshard_peaks(src, dst, False), reshard_peaks(dst, src, True)
    return EdgeEstimate(fwd_s, bwd_s, fwd_b, bwd_b, halo, (f_written, f_recv, run), (b_written, b_recv, run),
                        dtype_for_itemsize(itemsize))
