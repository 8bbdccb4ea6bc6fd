"""Running a pipelined plan (``Plan.pipeline``): stages on disjoint rank groups, micro-batches,
GPipe or 1F1B (docs/executor.md, "Pipelined plans").

World rank ``r`` is rank ``i = r mod d`` of stage ``s = r // d`` (``d = devices / stages``); each
stage's ranks form a communicator of their own, on which the stage runs its layers as
:mod:`executor.runtime.stage` runs a whole plan, at one micro-batch (``StageIO``). A tensor a stage reads
from an earlier one (``costmodel.step.pipeline.stage_network``) arrives from the rank with the same
``i`` on the producing stage, as that rank's owned block (both stages' layouts span ``d`` ranks;
the arriving tensor keeps its producer's output layout and the stage reshards it to each reader as
usual): one message per rank and micro-batch forward and its gradient back, as the cost model
prices a stage's sends (executor.comm.p2p: sends non-blocking, each buffer let go once delivered,
receives blocking).

Schedules (Narayanan et al., SC21, section 2.2): GPipe runs every micro-batch's forward, then every
backward; 1F1B runs ``min(S - s - 1, m)`` forwards on stage ``s``, then alternates one forward and
one backward, then the backwards left.

Weight gradients are summed over the micro-batches (each micro-batch's loss counts its samples out
of the whole batch's, executor.ops.loss), then every stage syncs and updates once. A tied LM head
on another stage than its embedding keeps its own copy of the table (executor.runtime.pipeline_tied).

Timers: each receive is the ``wait`` phase of the stage's pseudo-layer ``stage s`` (the bubble
and the transfer are not told apart), its sends ``fwd_comm`` and ``bwd_comm``; every layer's
phases sum over the step's micro-batches.
"""

from __future__ import annotations

from dataclasses import replace

from costmodel.parallel.shard import output_layout
from costmodel.parallel.layout import block
from costmodel.step.pipeline import cut_at, stage_network
from executor.backend.device import Array, Backend, Communicator
from executor.comm.p2p import StageMessages
from executor.runtime.synthetic import init_weights, make_inputs
from executor.ops.base import region_shape
from executor.runtime.pipeline_tied import TiedPair, crossing_head
from executor.runtime.stage import StageIO, _Runtime, run_strategies
from executor.runtime.timers import Timers
from networks.ir import Network
from planner.plan.plan import Plan


def schedule_ops(schedule: str, stages: int, s: int, m: int) -> list[tuple[str, int]]:
    """Stage ``s``'s order of work in a step: ("F", j) forward and ("B", j) backward of micro-batch ``j``."""
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warm = min(stages - s - 1, m)
    ops = [("F", j) for j in range(warm)]
    for j in range(warm, m):
        ops += [("F", j), ("B", j - warm)]
    return ops + [("B", j) for j in range(m - warm, m)]


def stage_label(s: int) -> str:
    """The timers' pseudo-layer of stage ``s``'s point-to-point messages."""
    return f"stage {s}"


class PipelineRuntime:
    def __init__(self, plan: Plan, net: Network, comm: Communicator, backend: Backend, seed: int, timers: Timers):
        spec = plan.pipeline
        self.comm, self.backend, self.timers, self.plan = comm, backend, timers, plan
        self.d, self.stages, self.m = plan.stage_ranks, spec.stages, spec.micro_batches
        rank = comm.rank
        self.s, self.i = rank // self.d, rank % self.d
        self.sub = comm.split(self.s, self.i)
        cuts = cut_at(net, spec.first_layers)
        self.stage_of = {layer.name: k for k, layers in enumerate(cuts) for layer in layers}
        stage_net, _ = stage_network(net, cuts[self.s], self.s)
        strategies, mb = run_strategies(plan), plan.micro_batch
        by_name = {layer.name: layer for layer in net.layers}
        arrivals = {x.name: output_layout(by_name[x.name], strategies[x.name], mb)
                    for x in stage_net.inputs if x.name in self.stage_of}
        mine = {layer.name for layer in cuts[self.s]}
        self.sends = {name: sorted({self.stage_of[layer.name] for layer in net.layers if name in layer.inputs}
                                   - {self.s}) for name in mine}
        self.sends = {name: to for name, to in self.sends.items() if to}
        self.keep = frozenset(self.sends)  # outputs sent on after the stage's forward
        crossing = {src for layer in net.layers for src in layer.inputs
                    if src in self.stage_of and self.stage_of[src] != self.stage_of[layer.name]}
        cut_names = [layer.name for layer in net.layers if layer.name in crossing]
        self.label = stage_label(self.s)
        self.messages = StageMessages(comm, backend.xp, self.d, self.i, cut_names, self.m, timers, self.label)
        stage_plan = replace(plan, devices=self.d, batch=mb, pipeline=None,
                             layers=tuple(lp for lp in plan.layers if lp.name in mine))
        weights = init_weights(net, seed)
        head, embed = crossing_head(net, self.stage_of)
        if head is not None:  # the head's stage holds a copy of the table (executor.runtime.pipeline_tied)
            weights[(head.name, "weight")] = weights[(embed.name, "tokens")]
        io = StageIO(weights, make_inputs(net, plan.batch, seed), arrivals, self.m)
        self.rt = _Runtime(stage_plan, stage_net, self.sub, backend, seed, timers, False, io)
        self.arrivals = arrivals
        self.last = self.s == self.stages - 1
        self.ops = schedule_ops(spec.schedule, self.stages, self.s, self.m)
        self.tied = TiedPair.build(comm, net, strategies, self.stage_of, self.s, self.d, timers)
        self.layers = cuts[self.s]  # the whole network's layers of this stage (the head without its copy)

    def _recv(self, name: str, layout, j: int, peer_stage: int, backward: bool) -> Array:
        return self.messages.recv(name, region_shape(block(layout, self.i)), j, peer_stage, backward)

    def _forward(self, index: int, j: int, keep_grads: bool, caches: dict) -> float:
        acts = {name: self._recv(name, layout, j, self.stage_of[name], False) for name, layout in self.arrivals.items()}
        acts, caches[j] = self.rt._forward(index, keep_grads, micro=j, acts=acts, keep=self.keep)
        for name, to in self.sends.items():
            for q in to:
                self.messages.send(acts[name], name, j, q, False)
        return float(acts[self.rt.runs[-1].layer.name]) if self.last else 0.0

    def _backward(self, j: int, caches: dict, total: dict) -> None:
        grads = {}
        for name, to in self.sends.items():
            for q in to:
                g = self._recv(name, self.rt.out_layouts[name], j, q, True)
                grads[name] = g if name not in grads else grads[name] + g
        self.rt._backward(caches.pop(j), grads, into=total)  # each layer's weight gradients summed in place
        for name in self.arrivals:
            g = grads.pop(name, None)
            if g is None:  # read by nothing that reaches the loss
                g = self.rt.xp.zeros(region_shape(block(self.arrivals[name], self.i)), dtype=self.rt.xp.float32)
            self.messages.send(g, name, j, self.stage_of[name], True)

    def step(self, index: int, lr: float, momentum: float, keep_grads: bool):
        self.timers.begin_step(index)
        caches, total, loss = {}, {}, 0.0
        for kind, j in self.ops:
            if kind == "F":
                loss += self._forward(index, j, keep_grads, caches)
            else:
                self._backward(j, caches, total)
            self.messages.let_go()
        for layer in (run.layer.name for run in self.rt.runs):
            total.setdefault(layer, {})
        self.tied.sum_pair(total)
        kept = self.rt.finish(total, lr, momentum, keep_grads)
        self.messages.finish()
        self.timers.end_step()
        loss = self.comm.bcast_object(loss if self.last else None, (self.stages - 1) * self.d)
        return loss, kept

    def held(self) -> list[Array]:
        """The arrays this rank keeps from one step to the next."""
        return self.rt.held()

    def free(self) -> None:
        self.rt.comms.free()
        self.tied.free()
        self.sub.free()

