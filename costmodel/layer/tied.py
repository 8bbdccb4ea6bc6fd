"""A tied LM head and its embedding's token table (pure).

A tied head (``linear`` with ``tied_to``) multiplies by the rows of the embedding's table that its
vocabulary (F) split gives it, every feature. Where the embedding's strategy holds exactly those
rows on every rank (Megatron-LM: the embedding split over the vocabulary as the head, or both
unsplit), the two share the array and nothing moves. Otherwise the table is resharded to the
head's layout before its forward and the head's gradient of it resharded back, summed into the
embedding's, before the gradient sync: the reshard the layout algebra prices for any tensor
(:func:`costmodel.layer.edge.layout_edge`), here of the table, after an allreduce of the head's
gradient over its sample and position group (a reshard takes one copy of a block several ranks
hold, so each copy must be the whole sum; the embedding's replicas then each add their share). The
planner weighs both as an edge between the two layers; the step prices them with the head's
reshards.

On another pipeline stage than its embedding, a head keeps its own copy of the table instead
(:func:`with_table`; costmodel.step.pipeline), and the two stages' ranks sum their gradients of it
(:func:`tied_sync_s`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from costmodel.comm.collectives import allreduce_s
from costmodel.layer.edge import EdgeEstimate, layout_edge
from costmodel.layer.comms import group_time
from costmodel.parallel.shard import weight_layouts
from costmodel.parallel.layout import Layout, block, same_blocks
from costmodel.machine.model import Machine
from costmodel.parallel.axes import N, H, GRID_ORDER
from costmodel.parallel.strategy import Strategy
from networks.ir import DTYPE_BYTES, Layer, Network
from networks.ops.base import prod


def with_table(head: Layer) -> Layer:
    """The head holding the table as its own ``weight``: (vocabulary, width), split as its F."""
    if any(name == "weight" for name, _ in head.weights):
        return head
    return dataclasses.replace(head, weights=(("weight", (head.p["features"], head.in_shapes[0][-1])),) + head.weights)


def table_layout(head: Layer, strategy: Strategy) -> Layout:
    """The table rows a tied head needs under ``strategy``: its vocabulary block, every feature."""
    return weight_layouts(with_table(head), strategy)["weight"]


def ties(net: Network) -> list[tuple[str, str]]:
    """(embedding, head) of every tied head whose embedding is in ``net``."""
    names = {layer.name for layer in net.layers}
    return [(layer.p["tied_to"], layer.name) for layer in net.layers
            if layer.op == "linear" and layer.p.get("tied_to") in names and not
            any(name == "weight" for name, _ in layer.weights)]


def tie_estimate(embed: Layer, embed_strategy: Strategy, head: Layer, head_strategy: Strategy,
                 machine: Machine) -> EdgeEstimate:
    """The table's reshard from the embedding's layout to the head's, and of its gradient back,
    summed over the head's group first (zero when the two share the rows: :func:`tie_mismatch`)."""
    if tie_mismatch(head, head_strategy, embed, embed_strategy) is None:
        return EdgeEstimate(0.0, 0.0, 0, 0, False)  # the same array: nothing moves
    edge = layout_edge(weight_layouts(embed, embed_strategy)["tokens"], table_layout(head, head_strategy),
                       DTYPE_BYTES.get(embed.dtype, 4), machine)
    return dataclasses.replace(edge, bwd_s=edge.bwd_s + head_sum_s(head, head_strategy, machine))


def head_sum_s(head: Layer, strategy: Strategy, machine: Machine, rule: str = "mpi") -> float:
    """The allreduce of a head's gradient of its table rows over its sample and position group."""
    dims = tuple(d for d in (N, H) if strategy.degree(d) > 1)
    if not dims:
        return 0.0
    nbytes = _block_elems(table_layout(head, strategy)) * DTYPE_BYTES.get(head.dtype, 4)
    return group_time("allreduce", nbytes, strategy, dims, machine, rule, cold=True)


def _block_elems(layout: Layout) -> int:
    """Elements of rank 0's block (every rank's is as large: the splits divide evenly)."""
    return prod(hi - lo for lo, hi in block(layout, 0))


def crossing_ties(net: Network, stage_of: Callable[[str], int]) -> set[str]:
    """The embeddings and tied heads on different stages (``stage_of``: a layer's stage)."""
    out = set()
    for layer in net.layers:
        embed = layer.p.get("tied_to") if layer.op == "linear" else None
        if embed and stage_of(embed) != stage_of(layer.name):
            out |= {embed, layer.name}
    return out


def tied_table_s(layer: Layer, strategy, machine: Machine, ranks: tuple[int, int], block: int = 1) -> float:
    """The two-rank allreduce of the tied table's gradient that ``layer`` (an embedding, or a head
    holding its copy) takes part in under ``strategy``: each rank sums its own rows with the rank
    of the other stage (``ranks``: the first rank of each of the two stages; ``block``: a stage's
    ranks, each paired with its peer, all at once: the slowest pair sets the time)."""
    rows = weight_layouts(layer, strategy)["tokens" if layer.op == "embedding" else "weight"]
    nbytes = _block_elems(rows) * DTYPE_BYTES.get(layer.dtype, 4)
    return allreduce_s(nbytes, 2, machine.intra if machine.pairs_same_domain(*ranks, block) else machine.inter)


def tied_sync_s(stage: Network, strategies: dict, names: set[str], machine: Machine, ranks: tuple[int, int],
                block: int = 1) -> float:
    """:func:`tied_table_s` of the stage's layers in ``names`` (:func:`crossing_ties`)."""
    return sum(tied_table_s(layer, strategies[layer.name], machine, ranks, block) for layer in stage.layers
               if layer.name in names)


def tie_mismatch(head: Layer, head_strategy: Strategy, embed: Layer, embed_strategy: Strategy) -> str | None:
    """Why a head and its embedding cannot share (or, pipelined, sum) their token rows rank by rank
    (None: they can): each rank must hold the same vocabulary rows and every feature, and the two
    must split samples and positions alike (the same gradient-sync groups)."""
    table, needed = weight_layouts(embed, embed_strategy)["tokens"], table_layout(head, head_strategy)
    if not same_blocks(table, needed):  # every rank at once (rank by rank: 12 of gpt-tiny's 14 s on 4,096 H100s)
        return "they must hold the same vocabulary rows and every feature"
    if not np.array_equal(_partition(head_strategy), _partition(embed_strategy)):
        return "their sample and position splits must match"
    return None


def _partition(strategy: Strategy) -> np.ndarray:
    """Each rank's group over the sample and position splits, named by its least member (the
    rank with coordinate 0 along N and H): two strategies group the ranks alike exactly when these
    agree (O(p), where listing every rank's group was O(p^2): 17 s of GPT-3's build on 1024)."""
    out = np.arange(strategy.p, dtype=np.int64)
    for d in (N, H):
        if strategy.degree(d) > 1:
            out = out - strategy.coords_all(d) * strategy.strides[GRID_ORDER.index(d)]
    return out
