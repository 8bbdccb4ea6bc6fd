"""A layer's weights across its ranks (pure): which ranks sum each weight's gradient, the
collectives that do it (or ZeRO's, costmodel.choices.optimizer), and the bytes the weights, gradients,
master copies and optimiser state hold per device (docs/costmodel.md, "Per layer", "ZeRO").

A weight's gradient is summed over the ranks that hold replicas of its shard: the split dimensions
whose ``DimSplit.partial_weight_grad`` lists it (``R`` replicas compute identical gradients and do
not talk). A weight cut in whole groups that a split exceeds (``DimSplit.weight_units``: grouped-query
attention's key/value heads under a head split above ``kv_heads``) is replicated over the
``share`` neighbouring ranks of that dimension holding the same group, each with the gradient of
its own query heads: those partial gradients are all-reduced over the ``share`` ranks first
(:func:`replica_sums`).
"""

from __future__ import annotations

from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import fp8_params, fp8_weight
from networks.ir import Layer
from networks.ops.base import prod, units_share

#: Bytes of the float32 master copy a 16-bit weight has under mixed precision (costmodel.choices.precision)
MASTER_BYTES = 4


def grad_dims(layer: Layer, active) -> dict[str, tuple[str, ...]]:
    """Each weight's gradient group: the split dimensions whose ranks hold replicas of its shard
    (``active``: the strategy's ``(dim, DimSplit)`` pairs)."""
    return {name: tuple(d for d, s in active if name in s.partial_weight_grad) for name, _ in layer.weights}


def weight_collectives(layer: Layer, active, wshapes: dict, itemsize: int, opt: Optimizer) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of the weights' collectives: the gradient
    allreduce per gradient group, or ZeRO's reduce-scatter and allgathers (costmodel.choices.optimizer).
    The allgathers move each weight as the layer keeps it: one byte an element for the GEMM weights
    of a layer whose weights are kept only in FP8 (``fp8_params``: Megatron-Core's
    ``--fp8-param-gather`` gathers the FP8 parameters), else the weights' own bytes."""
    by_group: dict[tuple[str, ...], int] = {}
    gathered: dict[tuple[str, ...], int] = {}
    fp8 = fp8_params(layer)
    for name, dims in grad_dims(layer, active).items():
        if dims:
            elems = prod(wshapes[name])
            by_group[dims] = by_group.get(dims, 0) + elems
            gathered[dims] = gathered.get(dims, 0) + elems * (1 if fp8 and fp8_weight(name, wshapes[name]) else itemsize)
    # the gradients in their wire precision (``Optimizer.reduce_bytes``), in every micro-batch's
    # backward or once a step (``Optimizer.reduces_each_micro``)
    wire, when = opt.reduce_bytes or itemsize, "bwd" if opt.reduces_each_micro else "sync"
    out = []
    for dims, elems in by_group.items():
        nbytes, gbytes = gathered[dims], elems * wire
        if opt.zero == 0:
            out.append(("grad_sync", when, "allreduce", gbytes, dims))
        elif opt.zero < 3:
            out += [("grad_sync", when, "reduce_scatter", gbytes, dims),
                    ("param_gather", "sync", "allgather", nbytes, dims)]  # the updated shards, once
        else:
            out += [("grad_sync", when, "reduce_scatter", gbytes, dims),
                    ("param_gather", "fwd", "allgather", nbytes, dims),  # before forward, and again
                    ("param_gather", "bwd", "allgather", nbytes, dims)]  # before backward
    return out


def replica_sums(active, degrees: dict[str, int], wshapes: dict, itemsize: int) -> list[tuple]:
    """(purpose, phase, collective, bytes, dim, share) of the gradient sums of grouped weights a
    split replicates (module docstring): one allreduce of the local shards of the weights of each
    such (dimension, share) over the ``share`` neighbouring ranks along that dimension."""
    by_share: dict[tuple[str, int], int] = {}
    for dim, split in active:
        for name, _ in split.weight_units:
            share = units_share(split, name, degrees[dim])
            if share > 1 and name in wshapes:
                by_share[(dim, share)] = by_share.get((dim, share), 0) + prod(wshapes[name]) * itemsize
    return [("grad_sync", "sync", "allreduce", nbytes, dim, share) for (dim, share), nbytes in by_share.items()]


def weight_memory(wshapes: dict, replicas: dict[str, int], itemsize: int,
                  opt: Optimizer) -> tuple[int, int, int, int, int]:
    """(weights, gradients, optimiser state, master weights, gathered transient) bytes per device,
    each sharded over the weight's replicas from its ZeRO stage on (costmodel.choices.optimizer);
    the gradients in the bytes they are accumulated in (``Optimizer.grad_bytes``). The gradients
    are held sharded only where they are reduced in every micro-batch: a stage 2 or 3 run that
    accumulates them and reduces once a step (``Optimizer.reduces_each_micro`` false, PyTorch
    FSDP's ``no_sync``) holds them whole ("FSDP will accumulate the full model gradients
    (instead of gradient shards) until the eventual sync": the ``no_sync`` docstring,
    torch/distributed/fsdp/fully_sharded_data_parallel.py)."""
    grads_sharded = opt.zero >= 2 and opt.reduces_each_micro

    def sharded(stage: int, per_elem: int, held_sharded: bool = True) -> int:
        return sum(-(-prod(wshapes[n]) // (replicas[n] if opt.zero >= stage and held_sharded else 1)) * per_elem
                   for n in wshapes)

    whole = sum(prod(s) for s in wshapes.values()) * itemsize
    gathered = (whole if opt.zero >= 3 else 0) + (whole if grads_sharded else 0)
    return (sharded(3, itemsize), sharded(2, opt.grad_bytes or itemsize, grads_sharded),
            sharded(1, opt.slots * max(itemsize, 4)),
            sharded(1, MASTER_BYTES) if itemsize < 4 else 0, gathered)
