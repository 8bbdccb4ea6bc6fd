"""The MPI runtime: build each rank's shard of every layer from a plan, run training steps, time
every piece of work, and (``check=True``) compare step 0 with the single-process reference.

One step (docs/executor.md, "How a run goes"):

1. forward, layers in order: reshard each input from its producer's owned layout to the layer's
   needed layout (``fwd_comm``; halos included), compute (``fwd_compute``), the op's forward
   collectives (``fwd_comm``: partial sums over C, batch-norm statistics, the loss);
2. backward, in reverse: compute (``bwd_compute``), the op's backward collectives (``bwd_comm``:
   input-gradient sums over F, batch-norm sums), then reshard the input gradients back to the
   producers' owned layouts, summing overlaps (``bwd_comm``), and add each to what the producer's
   other readers have sent it so far (the producer's ``bwd_compute``);
3. the weight-gradient allreduce of each layer over its replica group: the ranks that differ only
   along dimensions whose split lists the weight in ``partial_weight_grad`` (``grad_sync``);
4. SGD with momentum, ``v = momentum*v + g; w -= lr*v`` (``update``).

Under a ZeRO plan (stage 1-3, executor.zero) step 3 is a reduce-scatter instead (stage 1 after
the whole backward, stages 2 and 3 right after each layer's backward), step 4 updates the rank's
piece of each weight, and the updated pieces are all-gathered after it (stages 1 and 2,
``grad_sync``) or before each of the layer's passes (stage 3, ``fwd_comm``/``bwd_comm``).

Replication (the leftover factor R of a strategy) recomputes the same block on every replica; its
gradients are equal, not partial, so R never joins a gradient allreduce.

Warm-up steps are numbered ``-warmup .. -1`` in the timers, timed steps ``0 .. steps-1``. The
check compares the FIRST executed step (initial weights; a warm-up step when ``warmup > 0``),
gradients taken after the allreduce and before the update; gathering and the reference run after
that step's clock stops.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from costmodel.compute import DEFAULT_CONV_ALGORITHM
from costmodel.layer_layouts import input_layout, output_layout, require_fits, weight_layouts
from costmodel.layout import block
from costmodel.strategy import Strategy
from executor.check import CheckResult, run_check, tolerance_for
from executor.comm import GroupComms, allreduce_, reshard, reshard_plan, wait_for
from executor.init import init_weights, make_inputs, make_labels, take
from executor.memory import held_bytes, traced_peak_bytes
from executor.ops import OPS
from executor.ops.base import LayerCtx, region_shape
from executor.ops.embedding import tie
from executor.ops.norm import STAT_DIMS
from executor.timers import Timers
from executor.zero import LayerZero
from executor.zero_check import against_unsharded, whole_weights
from kernels.activation import add_forward
from kernels.optimizer import sgd_momentum_update
from networks.analysis import layer_splits
from networks.errors import DnnplanError
from networks.ir import Layer, Network
from planner.plan import Plan

LOSS_OP = "softmax_cross_entropy"


@dataclass
class RunResult:
    """``loss``: the first step's loss (initial weights, the one the check compares);
    ``losses``: every executed step's loss in order, warm-up first; ``step_s``: this rank's wall
    time of each timed step; ``check``: the comparison with the reference, when asked for;
    ``peak_bytes``: this rank's peak memory in the memory step (executor.memory)."""

    loss: float
    losses: list[float]
    step_s: list[float]
    check: CheckResult | None = None
    peak_bytes: int | None = None  # this rank's peak of the arrays it held in a step (executor.memory)


@dataclass
class _LayerRun:
    layer: Layer
    ctx: LayerCtx
    forward: object
    backward: object
    grad_groups: dict[str, object] = field(default_factory=dict)  # weight -> communicator or None
    momentum: dict[str, np.ndarray] = field(default_factory=dict)
    # from the plan alone, worked out once (per-step Python between kernels is time no kernel
    # timing accounts for): does any input reshard move data forward / backward on any rank,
    # and which input slots a layer produces (network inputs get no gradient)
    fwd_moves: bool = False
    bwd_moves: bool = False
    layer_inputs: tuple[tuple[int, str], ...] = ()
    zero: LayerZero | None = None  # the layer's weights under ZeRO (executor.zero), stage 1 and up
    tied_owner: _LayerRun | None = None  # a tied LM head: its embedding's run


def run_strategies(plan: Plan) -> dict[str, Strategy]:
    """The strategies the executor runs: the plan's, with Megatron's sequence-parallel variant
    (``SP``) as its plain split (the all-reduce, then a slice into the consumer's sequence shard);
    the executor predicts these too (executor.session.predict)."""
    return {name: s.plain for name, s in plan.strategies().items()}


def _grad_dims(layer: Layer, strategy: Strategy, weight: str) -> tuple[str, ...]:
    splits = layer_splits(layer)
    return tuple(d for d, _ in strategy.degrees if weight in splits[d].partial_weight_grad)


class _Runtime:
    def __init__(self, plan: Plan, net: Network, comm, seed: int, timers: Timers, check: bool):
        self.comm, self.net, self.plan, self.timers = comm, net, plan, timers
        self.rank = comm.Get_rank()
        self.strategies = run_strategies(plan)
        self.algorithms = plan.algorithms()
        self.batch = plan.batch
        self.inputs = {spec.name for spec in net.inputs}
        self.comms = GroupComms(comm)
        self.seed = seed
        self.check = check
        self.zero = plan.zero  # the ZeRO stage (executor.zero)
        self._validate()
        full_w = init_weights(net, seed)
        data = make_inputs(net, self.batch, seed)
        self.input_blocks: dict[tuple[str, int], np.ndarray] = {}
        self.out_layouts = {}
        self.runs: list[_LayerRun] = []
        for layer in net.layers:
            self.runs.append(self._build(layer, full_w, data))
        if not net.layers or net.layers[-1].op != LOSS_OP:
            raise DnnplanError(f"network '{net.name}' does not end in a {LOSS_OP} layer",
                               hint="the executor trains against a loss")

    def _validate(self) -> None:
        if self.comm.Get_size() != self.plan.devices:
            raise DnnplanError(f"the plan is for {self.plan.devices} devices but {self.comm.Get_size()} "
                               f"ranks run it", hint=f"run it with --ranks {self.plan.devices}")
        for layer in self.net.layers:
            if layer.name not in self.strategies:
                raise DnnplanError("the plan has no strategy for this layer", layer=layer.name)
            if self.strategies[layer.name].p != self.plan.devices:
                raise DnnplanError("the layer's strategy is for another device count", layer=layer.name)
            require_fits(layer, self.strategies[layer.name], self.plan.batch)
            if layer.op not in OPS:
                raise DnnplanError(f"the executor cannot run op '{layer.op}'", layer=layer.name,
                                   hint="executable ops: " + ", ".join(sorted(OPS)))

    def _build(self, layer: Layer, full_w, data) -> _LayerRun:
        strat, rank, batch = self.strategies[layer.name], self.rank, self.batch
        out_l = output_layout(layer, strat, batch)
        self.out_layouts[layer.name] = out_l
        in_ls = tuple(input_layout(layer, strat, batch, k) for k in range(len(layer.inputs)))
        in_blocks = tuple(block(l, rank) for l in in_ls)
        wl = weight_layouts(layer, strat)
        weights = {name: take(full_w[(layer.name, name)], block(wl[name], rank)) for name, _ in layer.weights}
        for slot, src in enumerate(layer.inputs):
            if src in self.inputs:
                self.input_blocks[(layer.name, slot)] = take(data[src], in_blocks[slot])
        labels = None
        if layer.op == LOSS_OP:
            labels = take(make_labels(layer, batch, self.seed), in_blocks[0][:-1])
        ctx = LayerCtx(layer, strat, rank, batch, self.algorithms.get(layer.name) or DEFAULT_CONV_ALGORITHM, in_ls, out_l,
                       in_blocks, block(out_l, rank), self.comms, self.timers, weights, labels)
        # every communicator this layer can use, created now (collective, same order on all ranks)
        for dims in (("C",), ("F",), ("H", "W"), ("N", "H"), STAT_DIMS):
            self.comms.get(strat, dims)
        fwd, bwd = OPS[layer.op]
        run = _LayerRun(layer, ctx, fwd, bwd)
        if layer.op == "linear" and layer.p.get("tied_to"):  # shares its embedding's token rows
            run.tied_owner = next(r for r in self.runs if r.layer.name == layer.p["tied_to"])
            tie(ctx, run.tied_owner.ctx)
        run.layer_inputs = tuple((k, src) for k, src in enumerate(layer.inputs) if src not in self.inputs)
        run.fwd_moves = any(not reshard_plan(self.out_layouts[src], in_ls[k], False, rank).identity
                            for k, src in run.layer_inputs)
        run.bwd_moves = any(not reshard_plan(in_ls[k], self.out_layouts[src], True, rank).identity
                            for k, src in run.layer_inputs)
        for name, _ in layer.weights:
            run.grad_groups[name] = self.comms.get(strat, _grad_dims(layer, strat, name))
        if self.zero and layer.weights:
            run.zero = LayerZero.build(self.zero, layer.name, ctx.weights,
                                       {n: (_grad_dims(layer, strat, n), run.grad_groups[n]) for n, _ in layer.weights})
        else:
            run.momentum = {name: np.zeros_like(weights[name]) for name, _ in layer.weights}
        return run

    # -- one training step ------------------------------------------------------------------------

    def _gather_inputs(self, run: _LayerRun, acts) -> list[np.ndarray]:
        layer, ctx = run.layer, run.ctx
        xs = []
        if not run.fwd_moves:
            for k, src in enumerate(layer.inputs):
                xs.append(self.input_blocks[(layer.name, k)] if src in self.inputs else acts[src])
            return xs
        wait_for(self.comm, self.timers, layer.name)
        with self.timers.span(layer.name, "fwd_comm"):
            for k, src in enumerate(layer.inputs):
                if src in self.inputs:
                    xs.append(self.input_blocks[(layer.name, k)])
                else:
                    xs.append(reshard(self.comm, acts[src], self.out_layouts[src], ctx.in_layouts[k]))
        return xs

    def _scatter_grads(self, run: _LayerRun, dxs, grads) -> None:
        layer, ctx, srcs = run.layer, run.ctx, run.layer_inputs
        if not srcs:
            return
        if run.bwd_moves:
            wait_for(self.comm, self.timers, layer.name)
            with self.timers.span(layer.name, "bwd_comm"):
                back = [reshard(self.comm, dxs[k], ctx.in_layouts[k], self.out_layouts[src], backward=True)
                        for k, src in srcs]
        else:  # every rank holds exactly the blocks it needs: the gradients stay where they are
            back = [dxs[k] for k, _ in srcs]
        for (_, src), g in zip(srcs, back):
            if src not in grads:
                grads[src] = g
                continue
            # an output several layers read: the producer's gradient sum, priced in its backward
            # (LayerEstimate.grad_sum_s); never in place, as arrays alias
            with self.timers.span(src, "bwd_compute"):
                grads[src] = add_forward(grads[src], g)[0]

    def step(self, index: int, lr: float, momentum: float, keep_grads: bool):
        self.timers.begin_step(index)
        acts, caches = self._forward(index, keep_grads)
        loss = float(acts[self.runs[-1].layer.name])
        wgrads = self._backward(caches)
        self._sync(wgrads)
        kept = {(n, w): g.copy() for n, gs in wgrads.items() for w, g in gs.items()} if keep_grads else None
        for run in self.runs:
            gs = wgrads[run.layer.name]
            if not gs:
                continue
            with self.timers.span(run.layer.name, "update"):
                if run.zero is not None:
                    run.zero.update(run.ctx, gs, lr, momentum)
                    continue
                for w, g in gs.items():
                    sgd_momentum_update(run.ctx.weights[w], run.momentum[w], g, lr, momentum)
        for run in self.runs:
            if run.zero is not None and wgrads[run.layer.name]:
                run.zero.publish(run.ctx)
        self.timers.end_step()
        if kept is not None and self.zero:  # each rank holds its pieces of the sums: make them whole
            kept = self._whole(kept)
        return loss, kept

    def _forward(self, index: int, keep_grads: bool):
        acts, caches = {}, {}
        for run in self.runs:
            if run.layer.op == "dropout":
                run.ctx.dropout_seed = zlib.crc32(f"{self.seed}/{run.layer.name}/{index}/{run.ctx.out_block}".encode())
                # masks are drawn per shard, so only the step the check compares (the one whose
                # gradients are kept) runs dropout as the identity; every other step draws its
                # mask, the work the cost model prices (a step that skipped it would be measured
                # faster than the step it predicts)
                run.ctx.identity_dropout = keep_grads
            xs = self._gather_inputs(run, acts)
            if run.zero is not None:  # ZeRO-3: the layer's whole weights, until its pass is done
                run.zero.gather(run.ctx, "fwd")
            y, caches[run.layer.name] = run.forward(run.ctx, xs)
            if run.zero is not None and run.ctx.tied is None:  # a tied table: until the head's backward
                run.zero.release(run.ctx)
            acts[run.layer.name] = y
        return acts, caches

    def _backward(self, caches) -> dict[str, dict[str, np.ndarray]]:
        grads: dict[str, np.ndarray] = {}
        return {run.layer.name: self._backward_layer(run, caches.pop(run.layer.name), grads)
                for run in reversed(self.runs)}

    def _backward_layer(self, run: _LayerRun, cache, grads: dict) -> dict[str, np.ndarray]:
        """One layer's backward; returns its weight gradients (under ZeRO-2 and 3 this rank's pieces
        of their sums, the whole ones dropped on return)."""
        dy = None
        if run.layer.op != LOSS_OP:
            dy = grads.pop(run.layer.name, None)
            if dy is None:  # an output nothing reads
                dy = np.zeros(region_shape(run.ctx.out_block), dtype=np.float32)
        if run.zero is not None:
            run.zero.gather(run.ctx, "bwd")
        dxs, gs = run.backward(run.ctx, dy, cache)
        if run.zero is not None:
            run.zero.release(run.ctx)
        if run.tied_owner is not None and run.tied_owner.zero is not None:
            run.tied_owner.zero.release(run.tied_owner.ctx)  # the head has read the gathered table
        self._scatter_grads(run, dxs, grads)
        gs = {w: np.ascontiguousarray(g, dtype=run.ctx.weights[w].dtype) for w, g in gs.items()}
        if run.zero is not None and self.zero >= 2 and gs:  # the whole gradient goes now
            return run.zero.reduce(run.ctx, gs)
        return gs

    def _sync(self, wgrads) -> None:
        """Weight-gradient sums over the replica groups after the whole backward: the allreduce,
        or ZeRO-1's reduce-scatter (ZeRO-2 and 3 reduce-scatter in backward)."""
        for run in self.runs:
            gs = wgrads[run.layer.name]
            if not gs:
                continue
            if run.zero is not None:
                if self.zero == 1:
                    wgrads[run.layer.name] = run.zero.reduce(run.ctx, gs)
                continue
            if any(sub is not None for sub in run.grad_groups.values()):
                for sub in {id(g): g for g in run.grad_groups.values() if g is not None}.values():
                    wait_for(sub, self.timers, run.layer.name)
                with self.timers.span(run.layer.name, "grad_sync"):
                    for w, g in gs.items():
                        allreduce_(run.grad_groups[w], g)

    def _whole(self, kept: dict) -> dict:
        """``--check`` under ZeRO: the summed gradients whole (untimed, after the step's clock)."""
        out = dict(kept)
        for run in self.runs:
            if run.zero is None:
                continue
            pieces = {w: kept[(run.layer.name, w)] for w, _ in run.layer.weights}
            for w, g in run.zero.wholes(pieces).items():
                out[(run.layer.name, w)] = g
        return out

    def held(self) -> list[np.ndarray]:
        """The arrays this rank keeps from one step to the next."""
        out = list(self.input_blocks.values())
        for run in self.runs:
            out += list(run.ctx.weights.values()) + list(run.momentum.values())
            out += run.zero.held() if run.zero is not None else []
            if run.ctx.labels is not None:
                out.append(run.ctx.labels)
        return out

    def memory_step(self, index: int, lr: float, momentum: float) -> int:
        """Run step ``index`` once more under ``tracemalloc`` and return this rank's peak bytes
        (executor.memory); its times are dropped, so it never counts as a timed step."""
        self.comm.Barrier()
        extra = traced_peak_bytes(lambda: self.step(index, lr, momentum, keep_grads=False))
        self.timers.forget(index)
        return held_bytes(self.held()) + extra


def run_plan(plan: Plan, net: Network, comm, *, steps: int = 5, warmup: int = 2, check: bool = False,
             seed: int = 0, timers: Timers | None = None, lr: float = 1e-4,
             momentum: float = 0.9, after_step: Callable[[int], None] | None = None,
             measure_memory: bool = True) -> RunResult:
    """Run ``warmup`` + ``steps`` training steps of ``plan`` on the ranks of ``comm`` (collective).

    The learning rate is small on purpose: on random data a learning rate of 0.01 drove AlexNet's
    loss (batch 2) to 1.7e17 by the fourth step and to NaN after, so the timed steps computed on
    infinities; with 1e-4 the losses of alexnet, lenet5 and resnet18 stayed finite over 12 steps,
    and the kernels run the same work.

    ``comm`` is an mpi4py communicator of exactly ``plan.devices`` ranks. Every rank returns the
    same losses and check; ``step_s`` is this rank's own clock. ``after_step(i)`` runs after each
    step ``i`` (negative: a warm-up step), outside its clock (``--fresh-profile``'s in-run timing).
    ``measure_memory``: then one more step runs after the timed ones, untimed, to measure this
    rank's peak memory (executor.memory; ``RunResult.peak_bytes``).
    """
    if steps < 0 or warmup < 0 or steps + warmup < 1:
        raise DnnplanError(f"need at least one step (steps={steps}, warmup={warmup})")
    timers = timers if timers is not None else Timers()
    rt = _Runtime(plan, net, comm, seed, timers, check)
    losses, kept = [], None
    for i in range(-warmup, steps):
        comm.Barrier()
        loss, grads = rt.step(i, lr, momentum, keep_grads=check and not losses)
        losses.append(loss)
        if grads is not None:
            kept = grads
        if after_step is not None:
            after_step(i)
    peak = rt.memory_step(steps, lr, momentum) if measure_memory else None
    result = None
    if check:
        result = run_check(comm, net, plan.batch, rt.strategies, rt.algorithms, seed, losses[0], kept)
        if plan.zero:
            schedule = [(i, i == -warmup) for i in range(-warmup, steps)] + ([(steps, False)] if measure_memory else [])
            result = _check_zero(rt, result, schedule, lr, momentum)
    rt.comms.free()  # collective: only on success (after a failure the launcher aborts the job)
    step_s = [timers.step_wall[i] for i in range(steps)]
    return RunResult(losses[0], losses, step_s, result, peak)


def _check_zero(rt: _Runtime, result: CheckResult, schedule, lr: float, momentum: float) -> CheckResult:
    """``--check`` of a ZeRO plan: the same ``schedule`` of steps (index, whether it is the step
    the check compares) again with ZeRO off, from the same weights; the weight changes must agree
    (executor.zero_check). Collective; outside every clock."""
    sharded = whole_weights(rt.runs)
    plain = _Runtime(replace(rt.plan, zero=0), rt.net, rt.comm, rt.seed, Timers(), False)
    initial = whole_weights(plain.runs)
    for index, compared in schedule:
        plain.step(index, lr, momentum, keep_grads=compared)
    unsharded = whole_weights(plain.runs)
    plain.comms.free()
    return against_unsharded(rt.comm, result, rt.zero, len(schedule), initial, sharded, unsharded,
                             tolerance_for(rt.algorithms))
