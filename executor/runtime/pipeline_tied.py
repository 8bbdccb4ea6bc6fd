"""A tied LM head whose embedding is on another pipeline stage (executor.runtime.pipeline).

As Megatron-LM does, the head's stage keeps its own copy of the embedding's token table, the
head's ``weight`` there (costmodel.step.pipeline.stage_network; its initial value is the table's).
Each step, after the backward and before the stages' gradient syncs, rank ``i`` of the
embedding's stage and rank ``i`` of the head's sum their local gradients of the table (one
allreduce of two ranks, in the embedding's and the head's ``grad_sync``, as costmodel.step.pipeline
prices it); each stage then sums over its own sample and position groups, so both hold the whole
gradient and apply the same update to equal tables. Both stages must split the two layers alike
rank by rank (:func:`executor.ops.embedding.tie_mismatch`).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.layer.tied import crossing_ties, tie_mismatch
from executor.comm.collectives import allreduce_, wait_for
from executor.ops.embedding import refused_tie
from networks.errors import DnnplanError


def crossing_head(net, stage_of: dict):
    """The tied head on another stage than its embedding, and that embedding (None, None: none)."""
    crossing = crossing_ties(net, stage_of.__getitem__)
    heads = [layer for layer in net.layers if layer.op == "linear" and layer.name in crossing]
    if len(heads) > 1:
        raise DnnplanError("the executor runs at most one tied head on another stage than its embedding",
                           layer=heads[1].name)
    if not heads:
        return None, None
    return heads[0], next(layer for layer in net.layers if layer.name == heads[0].p["tied_to"])


@dataclass
class TiedPair:
    pair: object = None  # the two-rank communicator (None: no tie crosses stages, or this rank is in neither)
    layer: str | None = None  # this stage's end of the tie: the embedding or the head
    weight: str = ""  # its weight holding the table: "tokens" or "weight"
    timers: object = None

    @classmethod
    def build(cls, comm, net, strategies, stage_of: dict, stage: int, d: int, timers) -> TiedPair:
        """Collective over ``comm`` when a tie crosses stages (every rank finds that from the plan alone)."""
        head, embed = crossing_head(net, stage_of)
        if head is None:
            return cls()
        hs, es = strategies[head.name], strategies[embed.name]
        why = tie_mismatch(head, hs, embed, es)
        if why:
            raise refused_tie(head, hs, embed, es, why)
        ends = (stage_of[embed.name], stage_of[head.name])
        pair = comm.split(comm.rank % d if stage in ends else None, comm.rank)
        if stage == ends[0]:
            return cls(pair, embed.name, "tokens", timers)
        if stage == ends[1]:
            return cls(pair, head.name, "weight", timers)
        return cls()

    def sum_pair(self, total: dict) -> None:
        """The two stages' gradients of the table summed, before the stages' own syncs."""
        if self.layer is None:
            return
        wait_for(self.pair, self.timers, self.layer)
        with self.timers.span(self.layer, "grad_sync"):
            allreduce_(self.pair, total[self.layer][self.weight])

    def free(self) -> None:
        if self.layer is not None:
            self.pair.free()
