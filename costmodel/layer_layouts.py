"""A layer under a strategy: the layout it needs for each input, the layout it produces, its
weights' shards, and the local shapes the straggler rank computes on.

The op catalogue's :class:`~networks.ops.base.DimSplit` says which axis of which tensor each
dimension cuts; this module turns that into :class:`~costmodel.layout.Layout` objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from costmodel.layout import AxisSplit, Layout, max_block_extents
from costmodel.strategy import Strategy
from networks.analysis import layer_splits
from networks.errors import DnnplanError
from networks.ir import Layer
from networks.ops.base import DimSplit


@lru_cache(maxsize=None)
def _splits(layer: Layer) -> dict[str, DimSplit]:
    return layer_splits(layer)


def check_fits(layer: Layer, strategy: Strategy, batch: int) -> str | None:
    """Why the strategy cannot be applied to the layer, or None when it can."""
    splits = _splits(layer)
    for dim, k in strategy.degrees:
        if dim not in splits:
            can = ",".join(splits) or "none"
            return f"{layer.op} cannot split {dim} (it splits {can})"
        size = batch if dim == "N" else splits[dim].size
        if k > size:
            return f"{dim}={k} exceeds the {size} {'samples' if dim == 'N' else 'positions'} of {dim}"
        if splits[dim].divides and size % k:
            return f"{dim}={k} must divide {size} for {layer.op}"
    return None


def require_fits(layer: Layer, strategy: Strategy, batch: int) -> None:
    why = check_fits(layer, strategy, batch)
    if why:
        raise DnnplanError(f"strategy {strategy.label} does not fit: {why}", layer=layer.name,
                           hint="choose degrees the layer can split, or let the planner choose")


def _batched(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    return (batch, *shape)


def _extent(split: DimSplit, batch: int) -> int:
    return batch if split.dim == "N" else split.size


@lru_cache(maxsize=None)
def output_layout(layer: Layer, strategy: Strategy, batch: int) -> Layout:
    """The layout the layer produces (after its forward partial-sum reduction, if any)."""
    shape = _batched(layer.out_shape, batch)
    axes: list[AxisSplit | None] = [None] * len(shape)
    for dim, k in strategy.degrees:
        split = _splits(layer)[dim]
        if split.out_axis is not None and split.out_axis < len(shape):
            axes[split.out_axis] = AxisSplit(dim, k, shape[split.out_axis])
    return Layout(shape, strategy, tuple(axes))


@lru_cache(maxsize=None)
def input_layout(layer: Layer, strategy: Strategy, batch: int, slot: int) -> Layout:
    """The layout the layer needs for input ``slot`` (halos included for split spatial dims)."""
    shape = _batched(layer.in_shapes[slot], batch)
    axes: list[AxisSplit | None] = [None] * len(shape)
    for dim, k in strategy.degrees:
        split = _splits(layer)[dim]
        axis = split.in_axes[slot] if slot < len(split.in_axes) else split.in_axes[0]
        if axis is None:
            continue
        if split.window is not None:
            axes[axis] = AxisSplit(dim, k, _extent(split, batch), split.window)
        else:
            axes[axis] = AxisSplit(dim, k, shape[axis])
    return Layout(shape, strategy, tuple(axes))


@lru_cache(maxsize=None)
def weight_layouts(layer: Layer, strategy: Strategy) -> dict[str, Layout]:
    """Each weight's shard layout (weights are replicated over every dimension that does not cut them)."""
    out = {}
    for name, shape in layer.weights:
        axes: list[AxisSplit | None] = [None] * len(shape)
        for dim, k in strategy.degrees:
            for wname, axis in _splits(layer)[dim].weight_axes:
                if wname == name:
                    axes[axis] = AxisSplit(dim, k, shape[axis])
        out[name] = Layout(tuple(shape), strategy, tuple(axes))
    return out


@dataclass(frozen=True)
class LocalLayer:
    """What the slowest rank computes: local batch, local per-sample shapes and op parameters."""

    layer: Layer
    batch: int
    in_shapes: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]
    params: tuple[tuple[str, object], ...]
    weight_shapes: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def p(self) -> dict:
        return dict(self.params)


@lru_cache(maxsize=None)
def local_layer(layer: Layer, strategy: Strategy, batch: int) -> LocalLayer:
    """Local shapes of the straggler (largest block on every axis)."""
    out = max_block_extents(output_layout(layer, strategy, batch))
    ins = tuple(max_block_extents(input_layout(layer, strategy, batch, k)) for k in range(len(layer.in_shapes)))
    wl = weight_layouts(layer, strategy)
    weights = tuple((name, max_block_extents(wl[name])) for name, _ in layer.weights)
    params = dict(layer.params)
    wdict = dict(weights)
    if layer.op == "conv2d":
        params["filters"] = wdict["weight"][0]
    elif layer.op == "linear" and "weight" in wdict:
        params["features"] = wdict["weight"][0]
    elif layer.op == "linear":  # tied: the output feature split
        params["features"] = out[-1]
    elif layer.op == "attention":
        params["heads_total"] = params["heads"]
        params["seq_total"] = layer.in_shapes[0][0]  # keys and values are gathered over a split sequence
        params["heads"] = wdict["qkv_weight"][1] * params["heads"] // layer.in_shapes[0][1]
    elif layer.op == "embedding":
        params["dim"] = out[-1]
    local_batch = out[0] if layer.out_shape != () else ins[0][0]  # the loss is one number
    return LocalLayer(layer, local_batch, tuple(s[1:] for s in ins), tuple(out[1:]),
                      tuple(sorted(params.items())), weights)
