"""The collectives of a split contraction (pure): Megatron-LM's tensor-parallel reductions, and
their sequence-parallel variant (docs/costmodel.md, "Tensor parallelism").

Shoeybi et al. 2019, section 3: a row-parallel layer (split contraction, C) all-reduces its
partial output forward; a column-parallel one (split filters, F) all-reduces the partial input
gradient backward. Korthikanti et al. 2022, section 4.2.2: with sequence parallelism each of those
all-reduces is a reduce-scatter into sequence shards, and the tensor enters or leaves the layer in
those shards through an all-gather (``layer_layouts.sequence_scatter``).
"""

from __future__ import annotations

from costmodel.parallel.shard import LocalLayer, dim_splits, sequence_scatter
from costmodel.parallel.strategy import Strategy
from networks.ir import Layer
from networks.ops.base import prod


def tensor_collectives(layer: Layer, strategy: Strategy, local: LocalLayer, itemsize: int) -> list[tuple]:
    """(purpose, phase, collective, bytes, dims) of a split contraction's reductions: the partial
    output all-reduced forward (split C), the partial input gradients all-reduced backward (split F).

    Under the sequence-parallel variant (``layer_layouts.sequence_scatter``; Korthikanti et al.
    2022, section 4.2.2) each all-reduce of ``n`` bytes over the ``t`` ranks is a reduce-scatter
    into sequence shards of ``n / t`` bytes, and the tensor it reduces enters or leaves the layer in
    those shards: the partial output is reduce-scattered forward and its gradient all-gathered
    backward; the input is all-gathered forward and its gradient reduce-scattered backward. Bytes
    are the whole tensor ``n``, as the collectives take them (``costmodel.comm.collectives``): a ring
    reduce-scatter or all-gather moves ``(t-1)/t n`` a rank where the all-reduce moved twice that."""
    splits = dim_splits(layer)
    active = [(d, splits[d]) for d, _ in strategy.degrees]
    out_bytes = local.batch * prod(local.out_shape) * itemsize
    in_bytes = [local.batch * prod(shape) * itemsize for shape in local.in_shapes]
    partial_out = [d for d, s in active if s.partial_out]
    partial_in = [d for d, s in active if s.partial_in_grad]
    scatter = sequence_scatter(layer, strategy) if strategy.seq_scatter else None
    if not isinstance(scatter, tuple):
        return ([("partial_sum", "fwd", "allreduce", out_bytes, partial_out)]
                + [("input_grad", "bwd", "allreduce", n, partial_in) for n in in_bytes])
    dim, _, seq = scatter
    out = [("partial_sum", "fwd", "allreduce", out_bytes, [d for d in partial_out if d != dim])]
    if splits[dim].partial_out:
        out += [("partial_sum", "fwd", "reduce_scatter", out_bytes, (dim,)),
                ("output_grad", "bwd", "allgather", out_bytes, (dim,))]
    if splits[dim].partial_in_grad:
        for k, n in enumerate(in_bytes):
            if seq.in_axes[min(k, len(seq.in_axes) - 1)] is not None:
                out += [("input_gather", "fwd", "allgather", n, (dim,)), ("input_grad", "bwd", "reduce_scatter", n, (dim,))]
    return out
