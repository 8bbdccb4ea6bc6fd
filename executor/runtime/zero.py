"""ZeRO in the executor: each weight's optimiser state (stage 1), gradients (2) and parameters (3)
sharded over its gradient group, with exactly the collectives ``costmodel.layer.cost.
weight_collectives`` prices (costmodel.choices.optimizer; Rajbhandari et al., SC20, sections 5 and 7).

A layer's weights are grouped as the cost model groups them: by their gradient dimensions (the
splits whose ranks hold replicas of the weight's shard; ``partial_weight_grad``), one group per
distinct set, in the order of the layer's weights. Each group makes ONE collective of all its
weights' bytes, as priced:

=====  =========================================  ================================================
stage  held between steps (per weight, r ranks)   collectives per group (n: the group's bytes)
=====  =========================================  ================================================
1      whole weight, momentum shard               ``grad_sync``: reduce-scatter(n) after the whole
                                                  backward, update of the shard, allgather(n)
2      whole weight, momentum shard               ``bwd_comm``: reduce-scatter(n) right after the
                                                  layer's backward (the whole gradient is freed);
                                                  ``grad_sync``: update of the shard, allgather(n)
3      weight shard, momentum shard               ``fwd_comm``: allgather(n) before forward;
                                                  ``bwd_comm``: allgather(n) before backward and
                                                  reduce-scatter(n) after it
=====  =========================================  ================================================

Shards are uneven, not padded, so what moves and what is updated are what the cost model counts:
weight ``w`` of ``n_w`` elements is cut in ``r`` consecutive pieces of ``ceil(n_w / r)`` (the
last ones shorter, possibly empty), rank ``k`` of the group owning piece ``k``: the straggler
updates and keeps ``ceil(n_w / r)`` elements (``LayerEstimate.update_s``, ``Memory``), and a
collective moves exactly ``sum(n_w)`` elements. The buffers a collective sends or receives are
rank-major (rank ``k``'s pieces of every weight of the group, in weight order, then rank
``k + 1``'s), so rank ``k``'s part is contiguous, as a reduce-scatter and an allgather need.

Weights with no gradient group (every rank holds a different shard) are not sharded and have no
collective, as priced. A tied LM head reads the embedding's token rows: under stage 3 the rows the
embedding gathers before its forward stay whole until the head's backward has run (the head has no
collective of its own to gather them, as priced), then the embedding gathers again for its backward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from executor.backend.device import Array, Communicator
from executor.comm.collectives import displacements, wait_for
from kernels.optimizer import sgd_momentum_update
from kernels.xp import module_of

#: Each collective's (phase, name) in the cost model (``Comm.phase``: fwd, bwd, sync) -> timer phase
TIMER_PHASE = {"fwd": "fwd_comm", "bwd": "bwd_comm", "sync": "grad_sync"}


def shard_bounds(n: int, r: int) -> tuple[tuple[int, int], ...]:
    """The pieces ``[lo, hi)`` of a flat weight of ``n`` elements held by ranks ``0 .. r-1`` of its
    group: consecutive, ``ceil(n / r)`` each, the last ones shorter (possibly empty)."""
    c = -(-n // r) if n else 0
    return tuple((min(k * c, n), min((k + 1) * c, n)) for k in range(r))


def rank_counts(sizes, r: int) -> list[int]:
    """Elements of rank ``k``'s part of a rank-major buffer over weights of ``sizes``."""
    bounds = [shard_bounds(n, r) for n in sizes]
    return [sum(b[k][1] - b[k][0] for b in bounds) for k in range(r)]


def pack(flats, r: int) -> Array:
    """The rank-major buffer of whole flat arrays: rank 0's piece of each, then rank 1's, ..."""
    if len(flats) == 1:
        return flats[0]
    bounds = [shard_bounds(f.size, r) for f in flats]
    return module_of(flats[0]).concatenate([f[b[k][0]:b[k][1]] for k in range(r) for f, b in zip(flats, bounds)])


def unpack(buf: Array, outs, r: int) -> None:
    """Write a rank-major buffer into the whole flat arrays ``outs`` (the inverse of :func:`pack`)."""
    bounds = [shard_bounds(o.size, r) for o in outs]
    pos = 0
    for k in range(r):
        for o, b in zip(outs, bounds):
            lo, hi = b[k]
            o[lo:hi] = buf[pos:pos + hi - lo]
            pos += hi - lo


def split_mine(buf: Array, sizes, k: int, r: int) -> list[Array]:
    """Rank ``k``'s part of a rank-major buffer (``buf``: that part alone) cut into its pieces."""
    out, pos = [], 0
    for n in sizes:
        lo, hi = shard_bounds(n, r)[k]
        out.append(buf[pos:pos + hi - lo])
        pos += hi - lo
    return out


@dataclass
class ZeroGroup:
    """The weights of one layer that share a gradient group, and the group's communicator."""

    sub: Communicator  # the group (more than one rank)
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    record: list | None = None  # (phase, collective, bytes, group) of each collective, when a test asks

    def __post_init__(self):
        self.r, self.k = self.sub.size, self.sub.rank
        self.sizes = tuple(math.prod(s) for s in self.shapes)
        self.counts = rank_counts(self.sizes, self.r)
        self.displs = displacements(self.counts)
        self.mine = tuple(shard_bounds(n, self.r)[self.k] for n in self.sizes)

    def _log(self, phase: str, collective: str, elems: int, itemsize: int) -> None:
        if self.record is not None and phase in TIMER_PHASE:
            self.record.append((phase, collective, elems * itemsize, self.r))

    def reduce_scatter(self, grads: list[Array], phase: str) -> list[Array]:
        """Sum the whole gradients over the group; this rank's pieces of the sum come back."""
        xp = module_of(grads[0])
        send = pack([xp.ascontiguousarray(g).reshape(-1) for g in grads], self.r)
        recv = xp.empty(self.counts[self.k], dtype=send.dtype)
        self.sub.reduce_scatter(send, recv, self.counts)
        self._log(phase, "reduce_scatter", send.size, send.itemsize)
        return split_mine(recv, self.sizes, self.k, self.r)

    def allgather(self, pieces: list[Array], outs: list[Array] | None, phase: str) -> list[Array]:
        """Every rank's pieces, whole: written into the flat arrays ``outs`` (None: new arrays). With
        one weight and ``outs`` given, this rank's piece must already be in place in ``outs[0]``
        (in place: MPI forbids a send buffer inside the receive buffer)."""
        dtype, xp = pieces[0].dtype, module_of(pieces[0])
        if len(self.sizes) == 1:
            recv = outs[0] if outs is not None else xp.empty(self.sizes[0], dtype=dtype)
            send = None if outs is not None else pieces[0]
        else:
            recv = xp.empty(sum(self.sizes), dtype=dtype)
            send = xp.concatenate(pieces)
        self.sub.allgather(send, recv, self.counts, self.displs)
        self._log(phase, "allgather", recv.size, recv.itemsize)
        if len(self.sizes) == 1:
            return [recv]
        outs = outs if outs is not None else [xp.empty(n, dtype=dtype) for n in self.sizes]
        unpack(recv, outs, self.r)
        return outs


@dataclass
class LayerZero:
    """One layer's weights under ZeRO ``stage`` on this rank: its groups, the momentum of each
    weight (the rank's shard where sharded), and under stage 3 its parameter shards."""

    stage: int
    layer: str
    groups: list[ZeroGroup]
    momentum: dict[str, Array] = field(default_factory=dict)
    params: dict[str, Array] = field(default_factory=dict)  # stage 3: this rank's flat pieces
    gathered: bool = False

    @classmethod
    def build(cls, stage: int, layer: str, weights: dict, grad_comms: dict[str, tuple]) -> LayerZero:
        """``weights``: the layer's local weights (whole; under stage 3 each is replaced by an empty
        placeholder in that dict, its piece kept here); ``grad_comms``: weight -> (gradient dims,
        communicator or None)."""
        by_dims: dict[tuple, list[str]] = {}
        for name, (dims, sub) in grad_comms.items():
            if sub is not None:
                by_dims.setdefault(dims, []).append(name)
        groups = [ZeroGroup(grad_comms[names[0]][1], tuple(names), tuple(weights[n].shape for n in names))
                  for names in by_dims.values()]
        out = cls(stage, layer, groups)
        for g in groups:
            for name, (lo, hi) in zip(g.names, g.mine):
                flat = weights[name].reshape(-1)
                xp = module_of(flat)
                out.momentum[name] = xp.zeros(hi - lo, dtype=flat.dtype)
                if stage >= 3:
                    out.params[name] = flat[lo:hi].copy()
                    weights[name] = xp.empty(0, dtype=flat.dtype)
        for name, w in weights.items():
            if name not in out.momentum:  # no group: whole, as the cost model counts it
                out.momentum[name] = module_of(w).zeros_like(w)
        return out

    def held(self) -> list[Array]:
        return list(self.momentum.values()) + list(self.params.values())

    def set_record(self, record: list | None) -> None:
        for g in self.groups:
            g.record = record

    def _span(self, ctx, phase: str):
        for sub in {id(g.sub): g.sub for g in self.groups}.values():
            wait_for(sub, ctx.timers, self.layer)
        return ctx.timers.span(self.layer, phase)

    # -- stage 3: the whole weights while the layer's passes run ----------------------------------

    def gather(self, ctx, pass_: str) -> None:
        """Stage 3, before the layer's forward (``pass_="fwd"``) or backward (``"bwd"``): allgather
        its weights into ``ctx.weights`` (and a tied table the head reads)."""
        if self.stage < 3 or not self.groups or self.gathered:
            return
        with self._span(ctx, TIMER_PHASE[pass_]):
            for g in self.groups:
                whole = g.allgather([self.params[n] for n in g.names], None, pass_)
                for name, shape, flat in zip(g.names, g.shapes, whole):
                    ctx.weights[name] = flat.reshape(shape)
        if ctx.tied is not None and "tokens" in self.params:
            ctx.tied.weight = ctx.weights["tokens"]
        self.gathered = True

    def release(self, ctx) -> None:
        """Stage 3: drop the whole weights (the pieces stay)."""
        if self.stage < 3 or not self.gathered:
            return
        for g in self.groups:
            for name in g.names:
                ctx.weights[name] = ctx.xp.empty(0, dtype=self.params[name].dtype)
        if ctx.tied is not None and "tokens" in self.params:
            ctx.tied.weight = ctx.weights["tokens"]
        self.gathered = False

    # -- gradients and the update -----------------------------------------------------------------

    def reduce(self, ctx, grads: dict[str, Array]) -> dict[str, Array]:
        """Reduce-scatter each group's gradients (``grad_sync``): this rank's summed pieces replace
        the whole gradients in the returned dict; ungrouped weights keep theirs. Stages 2 and 3 do
        it in the layer's backward (timed there, as priced: ``Optimizer.reduces_each_micro``),
        stage 1 after the whole backward."""
        if not self.groups:
            return grads
        out = dict(grads)
        phase = "bwd" if self.stage >= 2 else "sync"
        with self._span(ctx, TIMER_PHASE[phase]):
            for g in self.groups:
                for name, piece in zip(g.names, g.reduce_scatter([grads[n] for n in g.names], phase)):
                    out[name] = piece
        return out

    def update(self, ctx, grads: dict[str, Array], lr: float, momentum: float) -> None:
        """SGD with momentum on this rank's piece of each sharded weight, on the whole of the others
        (the caller times it as ``update``)."""
        sharded = set()
        for g in self.groups:
            for name, (lo, hi) in zip(g.names, g.mine):
                w = self.params[name] if self.stage >= 3 else ctx.weights[name].reshape(-1)[lo:hi]
                sgd_momentum_update(w, self.momentum[name], grads[name], lr, momentum)
                sharded.add(name)
        for name, grad in grads.items():
            if name not in sharded:
                sgd_momentum_update(ctx.weights[name], self.momentum[name], grad, lr, momentum)

    def publish(self, ctx) -> None:
        """Stages 1 and 2, after the update: allgather the updated pieces into the whole weights
        (``grad_sync``), in place (a tied head reads the same array)."""
        if self.stage >= 3 or not self.groups:
            return
        with self._span(ctx, "grad_sync"):
            for g in self.groups:
                flats = [ctx.weights[n].reshape(-1) for n in g.names]
                g.allgather([f[lo:hi] for f, (lo, hi) in zip(flats, g.mine)], flats, "sync")

    def wholes(self, pieces: dict[str, Array]) -> dict[str, Array]:
        """Whole tensors from every rank's pieces of each sharded weight (summed gradients, or under
        stage 3 the parameters), the others as given (``--check``; untimed, collective)."""
        out = dict(pieces)
        for g in self.groups:
            for name, shape, flat in zip(g.names, g.shapes, g.allgather([pieces[n] for n in g.names], None, "check")):
                out[name] = flat.reshape(shape)
        return out
