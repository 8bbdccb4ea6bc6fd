"""The runtime of one stage: build each rank's shard of every layer from a plan, run training steps, time
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
4. SGD with momentum, ``v = momentum*v + g; w -= lr*v`` (``update``); on a device whose launches
   cost the host time (executor.backend.device.LaunchBound) every weight at once, one multi-tensor
   call whose span is shared among the layers by their parameter counts.

Under a ZeRO plan (stage 1-3, executor.runtime.zero) step 3 is a reduce-scatter instead (stage 1 after
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
from dataclasses import dataclass, field

from costmodel.calls.layer_calls import DEFAULT_CONV_ALGORITHM
from costmodel.parallel.axes import N, E, H, W, C, F
from costmodel.parallel.shard import input_layout, output_layout, require_fits, weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import Strategy
from executor.backend.device import Array, Backend, Communicator, LaunchBound, on_device
from executor.runtime.precision import layer_weights, momentum_for, stored
from executor.comm.collectives import allreduce_, wait_for
from executor.comm.groups import GroupComms
from executor.comm.reshard import reshard, reshard_plan
from executor.runtime.synthetic import init_weights, make_inputs, make_labels, take
from executor.ops import OPS
from executor.ops.base import LayerCtx, region_shape
from executor.ops.embedding import tie
from executor.ops.norm import STAT_DIMS
from executor.runtime.timers import Timers
from executor.runtime.zero import LayerZero
from kernels.activation import add_forward
from kernels.optimizer import sgd_momentum_update, sgd_momentum_update_many
from networks.analysis import layer_splits
from networks.errors import DnnplanError
from networks.ir import Layer, Network
from planner.plan.plan import Plan

LOSS_OP = "softmax_cross_entropy"


@dataclass
class _LayerRun:
    layer: Layer
    ctx: LayerCtx
    forward: object
    backward: object
    grad_groups: dict[str, object] = field(default_factory=dict)  # weight -> communicator or None
    momentum: dict[str, Array] = field(default_factory=dict)
    masters: dict[str, Array] = field(default_factory=dict)  # float32 copies of 16-bit weights (runtime.precision)
    # from the plan alone, worked out once (per-step Python between kernels is time no kernel
    # timing accounts for): does any input reshard move data forward / backward on any rank,
    # and which input slots a layer produces (network inputs get no gradient)
    fwd_moves: bool = False
    bwd_moves: bool = False
    layer_inputs: tuple[tuple[int, str], ...] = ()
    zero: LayerZero | None = None  # the layer's weights under ZeRO (executor.runtime.zero), stage 1 and up
    tied_owner: _LayerRun | None = None  # a tied LM head: its embedding's run


@dataclass
class StageIO:
    """What a pipeline stage's runtime (executor.runtime.pipeline) takes from the whole network: its
    initial weights and inputs at the whole batch, the tensors arriving from earlier stages (each
    in its producer's owned layout over this stage's ranks), and the number of micro-batches (the
    stage's plan is at one micro-batch)."""

    weights: dict
    data: dict
    arrivals: dict
    micro_batches: int


def run_strategies(plan: Plan) -> dict[str, Strategy]:
    """The strategies the executor runs: the plan's, with Megatron's sequence-parallel variant
    (``SP``) as its plain split (the all-reduce, then a slice into the consumer's sequence shard);
    the executor predicts these too (executor.session.execute.predict)."""
    return {name: s.plain for name, s in plan.strategies().items()}


def _grad_dims(layer: Layer, strategy: Strategy, weight: str) -> tuple[str, ...]:
    splits = layer_splits(layer)
    return tuple(d for d, _ in strategy.degrees if weight in splits[d].partial_weight_grad)


class _Runtime:
    """One stage's layers on this rank: ``comm`` is the stage's group (every rank of a plan without
    pipeline), ``backend`` the device its arrays and collectives live on (executor.backend)."""

    def __init__(self, plan: Plan, net: Network, comm: Communicator, backend: Backend, seed: int, timers: Timers,
                 check: bool, io: StageIO | None = None):
        self.comm, self.net, self.plan, self.timers = comm, net, plan, timers
        self.backend, self.xp = backend, backend.xp
        self.rank = comm.rank
        self.strategies = run_strategies(plan)
        self.algorithms = plan.algorithms()
        self.batch = plan.batch
        self.micro_batches = io.micro_batches if io else 1
        self.inputs = {spec.name for spec in net.inputs} - set(io.arrivals if io else ())
        self.comms = GroupComms(comm)
        self.seed = seed
        self.check = check
        self.zero = plan.choices.zero  # the ZeRO stage (executor.runtime.zero)
        #: a device whose launches cost the host time: every weight updated in one multi-tensor call,
        #: and no input gradient made for a layer reading only the network's inputs
        self.fused_update = isinstance(backend, LaunchBound) and backend.fuse_launches()
        self._validate()
        full_w = io.weights if io else init_weights(net, seed)
        data = io.data if io else make_inputs(net, self.batch, seed)
        # each micro-batch's blocks of the network inputs and labels: (layer, slot) -> block
        self.feeds: list[dict[tuple[str, int], Array]] = [{} for _ in range(self.micro_batches)]
        self.label_feeds: list[Array] = []
        self.input_blocks = self.feeds[0]
        self.out_layouts = dict(io.arrivals) if io else {}
        self.runs: list[_LayerRun] = []
        for layer in net.layers:
            self.runs.append(self._build(layer, full_w, data))
        self.last_reader = {src: layer.name for layer in net.layers for src in layer.inputs}
        if io is None and (not net.layers or net.layers[-1].op != LOSS_OP):
            raise DnnplanError(f"network '{net.name}' does not end in a {LOSS_OP} layer",
                               hint="the executor trains against a loss")

    def _validate(self) -> None:
        if self.comm.size != self.plan.devices:
            raise DnnplanError(f"the plan is for {self.plan.devices} devices but {self.comm.size} "
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
        weights, masters = layer_weights(self.backend, {name: take(full_w[(layer.name, name)], block(wl[name], rank))
                                                        for name, _ in layer.weights}, layer.dtype)
        m = self.micro_batches
        for slot, src in enumerate(layer.inputs):
            if src in self.inputs:
                for j, feed in enumerate(self.feeds):
                    part = take(data[src][j * batch:(j + 1) * batch], in_blocks[slot])
                    feed[(layer.name, slot)] = stored(self.backend, part, self._input_dtype(src, part))
        labels = None
        if layer.op == LOSS_OP:
            every = make_labels(layer, batch * m, self.seed)
            self.label_feeds = [self._device(take(every[j * batch:(j + 1) * batch], in_blocks[0][:-1]))
                                for j in range(m)]
            labels = self.label_feeds[0]
        ctx = LayerCtx(layer, strat, rank, batch, self.algorithms.get(layer.name) or DEFAULT_CONV_ALGORITHM, in_ls, out_l,
                       in_blocks, block(out_l, rank), self.comms, self.timers, self.xp, weights, labels,
                       micro_batches=m)
        # every communicator this layer can use, created now (collective, same order on all ranks)
        for dims in ((C,), (F,), (E,), (H, W), (N, H), STAT_DIMS):
            self.comms.get(strat, dims)
        # a layer reading only the network's inputs: nothing reads its input gradient (on the host it
        # is still made, as the cost model prices it)
        ctx.input_grad = not (self.fused_update and all(src in self.inputs for src in layer.inputs))
        fwd, bwd = OPS[layer.op]
        run = _LayerRun(layer, ctx, fwd, bwd)
        if layer.op == "linear" and layer.p.get("tied_to"):  # shares its embedding's token rows
            run.tied_owner = next((r for r in self.runs if r.layer.name == layer.p["tied_to"]), None)
            if run.tied_owner is not None:  # else pipelined: a copy of the table, its weight (executor.runtime.pipeline_tied)
                tie(ctx, run.tied_owner.ctx, None if self.zero else self.comm)
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
            run.masters = masters
            run.momentum = momentum_for(self.xp, weights, masters)
        return run

    def _device(self, arr) -> Array:
        """A host array of the synthetic data (executor.runtime.synthetic) on this rank's device."""
        return on_device(self.backend, arr)

    def _input_dtype(self, name: str, part) -> str:
        """The storage format of a network input (a 16-bit plan stores float inputs in 16 bits)."""
        spec = self.net.input_spec(name)
        return spec.dtype if spec is not None and part.dtype.kind == "f" else part.dtype.name

    # -- one training step ------------------------------------------------------------------------

    def _gather_inputs(self, run: _LayerRun, acts) -> list[Array]:
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
        loss = acts[self.runs[-1].layer.name]  # on the device: the caller reads it after the step
        wgrads = self._backward(caches)
        kept = self.finish(wgrads, lr, momentum, keep_grads)
        self.timers.end_step()
        if kept is not None and self.zero:  # each rank holds its pieces of the sums: make them whole
            kept = self._whole(kept)
        return loss, kept

    def finish(self, wgrads, lr: float, momentum: float, keep_grads: bool):
        """The step's end: the gradient sync and the update; returns copies of the synced gradients
        when ``keep_grads`` (the check's), else None."""
        self._sync(wgrads)
        kept = {(n, w): g.copy() for n, gs in wgrads.items() for w, g in gs.items()} if keep_grads else None
        if self.fused_update:
            self._update_together(wgrads, lr, momentum)
        for run in self.runs:
            gs = wgrads[run.layer.name]
            if not gs or (self.fused_update and run.zero is None):
                continue
            with self.timers.span(run.layer.name, "update"):
                if run.zero is not None:
                    run.zero.update(run.ctx, gs, lr, momentum)
                    continue
                for w, g in gs.items():
                    sgd_momentum_update(run.ctx.weights[w], run.momentum[w], g, lr, momentum,
                                        master=run.masters.get(w))
        for run in self.runs:
            if run.zero is not None and wgrads[run.layer.name]:
                run.zero.publish(run.ctx)
        return kept

    def _update_together(self, wgrads, lr: float, momentum: float) -> None:
        """Every weight's update outside ZeRO in one multi-tensor call (one launch per storage
        format on a GPU), its span shared among the layers by their parameter counts."""
        ws, vs, gs, ms, shares = [], [], [], [], {}
        for run in self.runs:
            if run.zero is not None or not wgrads[run.layer.name]:
                continue
            for w, g in wgrads[run.layer.name].items():
                ws.append(run.ctx.weights[w])
                vs.append(run.momentum[w])
                gs.append(g)
                ms.append(run.masters.get(w))
                shares[run.layer.name] = shares.get(run.layer.name, 0) + int(g.size)
        if ws:
            with self.timers.shared_span("update", shares):
                sgd_momentum_update_many(ws, vs, gs, lr, momentum, ms)

    def _forward(self, index: int, keep_grads: bool, micro: int = 0, acts: dict | None = None,
                 keep: frozenset = frozenset()):
        """Forward of micro-batch ``micro`` (``acts``: tensors that arrived from earlier stages);
        returns the outputs still held (the last layer's and ``keep``'s: each other output is let go
        after its last reader, what backward needs of it being in the caches) and the caches."""
        acts, caches = dict(acts or {}), {}
        self.input_blocks = self.feeds[micro]
        tag = f"{index}/{micro}" if micro else f"{index}"
        for run in self.runs:
            if run.ctx.labels is not None:
                run.ctx.labels = self.label_feeds[micro]
            if run.layer.op == "dropout":
                run.ctx.dropout_seed = zlib.crc32(f"{self.seed}/{run.layer.name}/{tag}/{run.ctx.out_block}".encode())
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
            for src in run.layer.inputs:
                if self.last_reader.get(src) == run.layer.name and src not in keep:
                    acts.pop(src, None)
        return acts, caches

    def _backward(self, caches, grads: dict | None = None,
                  into: dict | None = None) -> dict[str, dict[str, Array]]:
        """Backward over every layer; ``grads``: output gradients arrived from later stages (the
        gradients of tensors from earlier stages are left in it). ``into``: weight gradients of
        earlier micro-batches, each layer's added in place as soon as its backward is done (so no
        micro-batch's whole set is held beside them); returned."""
        grads = {} if grads is None else grads
        out = {} if into is None else into
        for run in reversed(self.runs):
            name = run.layer.name
            gs = self._backward_layer(run, caches.pop(name), grads)
            acc = out.setdefault(name, {})
            for w, g in gs.items():
                if w in acc:
                    with self.timers.span(name, "bwd_compute"):  # summing the micro-batches' gradients
                        self.xp.add(acc[w], g, out=acc[w])
                else:
                    acc[w] = g
        return out

    def _backward_layer(self, run: _LayerRun, cache, grads: dict) -> dict[str, Array]:
        """One layer's backward; returns its weight gradients (under ZeRO-2 and 3 this rank's pieces
        of their sums, the whole ones dropped on return)."""
        dy = None
        if run.layer.op != LOSS_OP:
            dy = grads.pop(run.layer.name, None)
            if dy is None:  # an output nothing reads
                dy = self.xp.zeros(region_shape(run.ctx.out_block), dtype=self.xp.float32)
        if run.zero is not None:
            run.zero.gather(run.ctx, "bwd")
        dxs, gs = run.backward(run.ctx, dy, cache)
        if run.zero is not None:
            run.zero.release(run.ctx)
        if run.tied_owner is not None and run.tied_owner.zero is not None:
            run.tied_owner.zero.release(run.tied_owner.ctx)  # the head has read the gathered table
        self._scatter_grads(run, dxs, grads)
        gs = {w: self.xp.ascontiguousarray(g, dtype=run.ctx.weights[w].dtype) for w, g in gs.items()}
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

    def held(self) -> list[Array]:
        """The arrays this rank keeps from one step to the next."""
        out = [b for feed in self.feeds for b in feed.values()] + list(self.label_feeds)
        for run in self.runs:
            out += list(run.ctx.weights.values()) + list(run.momentum.values()) + list(run.masters.values())
            out += run.zero.held() if run.zero is not None else []
        return out
