"""A tied LM head whose embedding is on another pipeline stage (executor.pipeline_run).

As Megatron-LM does, the last stage keeps its own copy of the embedding's token table
(executor.ops.embedding.tied_copy); each step, after the backward and before the stages' gradient
syncs, rank ``i`` of the embedding's stage and rank ``i`` of the head's sum their local gradients
of the table (one allreduce of two ranks, in the embedding's and the head's ``grad_sync``); each
stage then sums over its own sample and position groups, so both hold the whole gradient and apply
the same update to equal tables. Both stages must split the two layers alike rank by rank
(:func:`executor.ops.embedding.tie_mismatch`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from costmodel.layer_layouts import output_layout
from executor.comm import allreduce_, mpi, wait_for
from kernels.optimizer import sgd_momentum_update
from networks.errors import DnnplanError
from executor.ops.embedding import refused_tie, tie_mismatch


@dataclass
class TiedPair:
    pair: object = None  # the two-rank communicator (None: no tie crosses stages, or this rank is in neither)
    head_run: object = None  # on the head's stage: the head's layer run
    embed: str | None = None  # on the embedding's stage: the embedding's name
    group: object = None  # on the head's stage: its sample/position group (None: one rank)
    timers: object = None
    acc: np.ndarray | None = None  # the head's gradient of its copy, summed over micro-batches

    @classmethod
    def build(cls, comm, net, strategies, micro_batch: int, stage_of: dict, stage: int, d: int, rt) -> TiedPair:
        """Collective over ``comm`` when a tie crosses stages (every rank finds that from the plan alone)."""
        by_name = {layer.name: layer for layer in net.layers}
        heads = [layer for layer in net.layers if layer.op == "linear" and layer.p.get("tied_to")
                 and stage_of[layer.name] != stage_of[layer.p["tied_to"]]]
        if not heads:
            return cls()
        if len(heads) > 1:
            raise DnnplanError("the executor runs at most one tied head on another stage than its embedding",
                               layer=heads[1].name)
        head, embed = heads[0], by_name[heads[0].p["tied_to"]]
        hs, es = strategies[head.name], strategies[embed.name]
        why = tie_mismatch(head, hs, output_layout(head, hs, micro_batch), embed, es)
        if why:
            raise refused_tie(head, hs, embed, es, why)
        ends = (stage_of[embed.name], stage_of[head.name])
        pair = comm.Split(comm.Get_rank() % d if stage in ends else mpi().UNDEFINED, comm.Get_rank())
        if stage == ends[0]:
            return cls(pair, embed=embed.name, timers=rt.timers)
        if stage == ends[1]:
            run = next(r for r in rt.runs if r.layer.name == head.name)
            return cls(pair, head_run=run, group=rt.comms.get(hs, ("N", "H")), timers=rt.timers)
        return cls()

    def collect(self) -> None:
        """After a micro-batch's backward on the head's stage: add the head's gradient of its copy."""
        if self.head_run is None:
            return
        tied = self.head_run.ctx.tied
        g, tied.grad = tied.grad, None
        if g is not None:
            self.acc = np.array(g, dtype=np.float32) if self.acc is None else np.add(self.acc, g, out=self.acc)

    def sum_pair(self, total: dict) -> None:
        """The two stages' gradients of the table summed, before the stages' own syncs."""
        if self.embed is not None:
            wait_for(self.pair, self.timers, self.embed)
            with self.timers.span(self.embed, "grad_sync"):
                allreduce_(self.pair, total[self.embed]["tokens"])
        elif self.head_run is not None:
            if self.acc is None:
                self.acc = np.zeros_like(self.head_run.ctx.tied.weight)
            wait_for(self.pair, self.timers, self.head_run.layer.name)
            with self.timers.span(self.head_run.layer.name, "grad_sync"):
                allreduce_(self.pair, self.acc)

    def sync_and_update(self, lr: float, momentum: float) -> None:
        """On the head's stage: the table's gradient summed over the head's group, and its update."""
        if self.head_run is None:
            return
        name, tied = self.head_run.layer.name, self.head_run.ctx.tied
        if self.group is not None:
            with self.timers.span(name, "grad_sync"):
                allreduce_(self.group, self.acc)
        with self.timers.span(name, "update"):
            sgd_momentum_update(tied.weight, tied.momentum, self.acc, lr, momentum)
        self.acc = None

    def free(self) -> None:
        if self.pair is not None and self.pair != mpi().COMM_NULL:
            self.pair.Free()
