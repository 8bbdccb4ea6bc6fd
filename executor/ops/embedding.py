"""embedding split over N (samples), H (positions), C (vocabulary, Megatron's vocabulary-parallel
embedding) and F (features), and the token table it shares with a tied LM head.

Under C each rank holds a slice of the token table and looks up the ids that fall in it (zeros
elsewhere); the partial outputs are all-reduced over C, so only the rank with C-coordinate 0 adds
the position rows. The output gradient arriving is the whole one on every rank of the C group, so
each computes the whole position-table gradient (not summed over C: the op catalogue lists it as
partial under N and H only). Under H a rank adds and differentiates the position rows of its
sequence block; its position-table gradient is zero elsewhere (summed over H by the gradient sync).

No timed kernel: the gather and the scatter-add (kernels.embedding) are priced by the compute
model's fallback, as costmodel.calls.layer_calls lists no call for the embedding.

A tied LM head (``linear`` with ``tied_to``) multiplies by the embedding's local token rows (the
same array, so the update of the embedding's weight is the head's too) and leaves its weight
gradient in :class:`TiedTable`; the embedding's backward, which runs after the head's, scatter-adds
its own gradient into that array instead of into zeros, and the sum is synchronised and applied as
the embedding's ``tokens`` gradient. The two layers must hold the same rows on every rank and
share the gradient-sync group (N, H): :func:`tie` checks that from the plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.parallel.axes import N, H, C
from costmodel.parallel.shard import weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import Strategy
from costmodel.layer.tied import table_layout, tie_mismatch
from executor.backend.device import Array
from executor.ops.base import LayerCtx, check_shape, memo
from kernels.embedding import embedding_backward_weights, embedding_forward
from networks.errors import DnnplanError
from networks.ir import Layer


@dataclass
class TiedTable:
    """The token rows an embedding and its tied LM head share on this rank."""

    weight: Array  # the embedding's local token table: updated in place, read by both layers
    grad: Array | None = None  # the head's gradient of those rows, until the embedding adds its own
    #: when the head needs other rows than the embedding holds: (embedding's layout of the table,
    #: the head's) and the communicator the table is resharded over, each step (costmodel.layer.tied)
    layouts: tuple | None = None
    comm: object = None
    replicas: int = 1  # the embedding's ranks holding each block of the table (its gradient-sync group)


def _geometry(ctx: LayerCtx):
    """(first vocabulary row held, sequence block (lo, hi), whether this rank adds the positions)."""
    rows = block(weight_layouts(ctx.layer, ctx.strategy)["tokens"], ctx.rank)[0]
    seq = ctx.in_blocks[0][1]
    return rows[0], seq, ctx.coord(C) == 0


def forward(ctx: LayerCtx, xs):
    (ids,) = xs
    vocab_lo, (s_lo, s_hi), adds_positions = memo(ctx, _geometry)
    pos = ctx.weights.get("positions")
    pos = pos[s_lo:s_hi] if pos is not None and adds_positions else None
    with ctx.span("fwd_compute"):
        y, cache = embedding_forward(ids, ctx.weights["tokens"], pos, vocab_lo)
    ctx.allreduce(y, (C,), "fwd_comm")
    return check_shape(ctx, y), cache


def backward(ctx: LayerCtx, dy, cache):
    tied = ctx.tied
    start = None
    if tied is not None:
        start, tied.grad = tied.grad, None
    pos = ctx.weights.get("positions")
    with ctx.span("bwd_compute"):
        dtokens, dpos = embedding_backward_weights(dy, cache, start, pos is not None)
        grads = {"tokens": dtokens}
        if pos is not None:
            _, (s_lo, s_hi), _ = memo(ctx, _geometry)
            if (s_lo, s_hi) != (0, pos.shape[0]):
                full = ctx.xp.zeros_like(pos)
                full[s_lo:s_hi] = dpos
                dpos = full
            grads["positions"] = dpos
    return [None], grads


def tie(head: LayerCtx, embed: LayerCtx, comm=None) -> TiedTable:
    """Give a tied head the embedding's token rows (both contexts keep the returned table). When
    the two strategies do not hold the same rows on every rank, the head reads the table resharded
    to its rows over ``comm`` (costmodel.layer.tied); without ``comm`` (ZeRO), that is refused in one line."""
    why = tie_mismatch(head.layer, head.strategy, embed.layer, embed.strategy)
    if why and comm is None:
        raise refused_tie(head.layer, head.strategy, embed.layer, embed.strategy, why)
    shared = TiedTable(embed.weights["tokens"])
    if why:
        shared.layouts = (weight_layouts(embed.layer, embed.strategy)["tokens"], table_layout(head.layer, head.strategy))
        shared.comm = comm
        shared.replicas = embed.strategy.group_size(tuple(d for d in (N, H) if embed.strategy.degree(d) > 1))
    head.tied = embed.tied = shared
    return shared


def refused_tie(head: Layer, head_strategy: Strategy, embed: Layer, embed_strategy: Strategy,
                why: str) -> DnnplanError:
    return DnnplanError(f"the executor cannot run a tied head under {head_strategy.label} with its embedding "
                        f"'{embed.name}' under {embed_strategy.label}: {why}", layer=head.name,
                        hint="give both N=p, or the embedding C=t and the head F=t (Megatron)")
