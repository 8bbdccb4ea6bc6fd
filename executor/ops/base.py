"""What a distributed op sees of its layer on this rank: :class:`LayerCtx`.

Each op family (one file per family) provides ``forward(ctx, xs) -> (y, cache)`` and
``backward(ctx, dy, cache) -> (dxs, wgrads)``. Inputs arrive already resharded to this rank's
needed blocks (halos included); the output is this rank's owned block of the layer's output
layout; ``dxs`` are gradients of the needed blocks (the runtime reshards them back, summing halos);
``wgrads`` are this rank's contributions to the gradients of its weight shards (the runtime
all-reduces them over the replica group). Ops run their own collectives (partial sums over C,
input-gradient sums over F, batch-norm statistics) and wrap every piece of work in
``ctx.span(phase)``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import ModuleType

from costmodel.parallel.axes import C, F
from costmodel.parallel.layout import Layout, Region
from costmodel.parallel.strategy import Strategy
from executor.backend.device import Array
from executor.comm.collectives import allreduce_, wait_for
from executor.comm.groups import GroupComms
from executor.runtime.timers import Timers
from networks.errors import DnnplanError
from networks.ir import Layer
from networks.ops.base import Window


@dataclass
class LayerCtx:
    layer: Layer
    strategy: Strategy
    rank: int
    batch: int
    algo: str
    in_layouts: tuple[Layout, ...]
    out_layout: Layout
    in_blocks: tuple[Region, ...]
    out_block: Region
    comms: GroupComms
    timers: Timers
    xp: ModuleType  # the backend's array module (executor.backend.device.Backend.xp)
    weights: dict[str, Array] = field(default_factory=dict)  # local shards
    labels: Array | None = None  # loss layers: the labels of this rank's logits block
    dropout_seed: int = 0
    identity_dropout: bool = False
    #: an embedding and its tied LM head: the token rows they share (executor.ops.embedding.TiedTable)
    tied: object | None = None
    #: micro-batches a step's loss is spread over (a pipelined plan): each one's loss and gradient
    #: count its samples out of the whole batch's
    micro_batches: int = 1
    #: what an op derives from the plan alone (window geometry, sub-communicators), computed on
    #: its first call: the per-layer Python between kernels is time no kernel timing accounts for
    memo: dict = field(default_factory=dict)
    #: whether backward makes the gradient of the layer's input: False for a layer reading only the
    #: network's inputs (an image) on a device whose launches cost the host time, which skips it
    #: as frameworks do (no one reads it); the host computes it, as the cost model prices it
    input_grad: bool = True

    @property
    def p(self) -> dict:
        return self.layer.p

    def coord(self, dim: str) -> int:
        return self.strategy.coord(self.rank, dim)

    def split(self, dim: str) -> bool:
        return self.strategy.degree(dim) > 1

    def span(self, phase: str) -> AbstractContextManager:
        return self.timers.span(self.layer.name, phase)

    def allreduce(self, arr: Array, dims, phase: str, op: str = "sum") -> Array:
        """Sum (or ``op="max"``) ``arr`` in place over the ranks differing from this one only along ``dims``."""
        key = ("comm", tuple(dims))
        if key not in self.memo:
            self.memo[key] = self.comms.get(self.strategy, dims)
        sub = self.memo[key]
        if sub is None:
            return arr
        wait_for(sub, self.timers, self.layer.name)
        with self.span(phase):
            return allreduce_(sub, arr, op)


def memo(ctx: LayerCtx, derive):
    """``derive(ctx)``, computed once per layer (it must depend on the plan only, not on data)."""
    got = ctx.memo.get(derive)
    if got is None:
        got = ctx.memo[derive] = derive(ctx)
    return got


def owns_bias(ctx: LayerCtx) -> bool:
    """Whether this rank adds the layer's bias: under a channel (C) split the output is a partial
    sum, so only the rank with C-coordinate 0 adds the bias and contributes its gradient."""
    return "bias" in ctx.weights and ctx.coord(C) == 0


def finish_contraction_backward(ctx: LayerCtx, dx, dw, db):
    """The common end of conv2d's and linear's backward: the input gradient is a partial sum over
    a filter (F) split and is all-reduced (None: not made, ``ctx.input_grad``); the bias gradient
    counts on the rank that owns the bias."""
    if dx is not None:
        dx = ctx.xp.ascontiguousarray(dx)
        ctx.allreduce(dx, (F,), "bwd_comm")
    grads = {"weight": dw}
    if "bias" in ctx.weights:
        grads["bias"] = db if owns_bias(ctx) else ctx.xp.zeros_like(db)
    return [dx], grads


def unsupported(layer: Layer, what: str, any_strategy: bool = False) -> DnnplanError:
    """``any_strategy``: no strategy of the layer runs (an op feature the executor lacks), so the
    hint is not to choose another."""
    hint = ("plan and predict price it; the executor runs no strategy of it yet" if any_strategy
            else "choose another strategy for this layer")
    return DnnplanError(f"the executor cannot run {what}", layer=layer.name, hint=hint)


def local_pads(win: Window, out_iv: tuple[int, int], need_iv: tuple[int, int], pad_hi: int):
    """Padding (lo, hi) and ceil flag for a window op on a shard, so the local output is exactly
    the rank's output rows ``out_iv`` computed from its needed input rows ``need_iv``.

    Output row ``i`` reads input rows from ``i*stride - pad_lo``; the shard's first output row
    ``a`` starts at ``a*stride - pad_lo``, so the local low padding is ``lo_needed - (a*stride -
    pad_lo)`` (nonzero only at the global top border). The high padding is what the last window
    still lacks. When that exceeds the layer's own ``pad_hi`` (a ceil-mode pool whose last window
    hangs past the padding) it is capped at ``pad_hi`` and ceil mode is used, so clipped windows
    keep the global divisor.
    """
    a, b = out_iv
    lo, hi = need_iv
    s, d, k = win.stride, win.dilation, win.kernel
    pt = lo - (a * s - win.pad_lo)
    span = (b - 1 - a) * s + d * (k - 1) + 1
    pb = span - (hi - lo) - pt
    ceil = False
    if pb > pad_hi:
        pb, ceil = pad_hi, True
    return pt, max(pb, 0), ceil


def region_shape(region: Region) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in region)


def check_shape(ctx: LayerCtx, y: Array) -> Array:
    want = region_shape(ctx.out_block)
    if tuple(y.shape) != want:
        raise unsupported(ctx.layer, f"{ctx.layer.op} under {ctx.strategy.label}: the local output is "
                                     f"{tuple(y.shape)}, the owned block {want}")
    return y
