"""A layer under a strategy: the layout it needs for each input, the layout it produces, its
weights' shards, and the local shapes the straggler rank computes on.

The op catalogue's :class:`~networks.ops.base.DimSplit` says which axis of which tensor each
dimension cuts; this module turns that into :class:`~costmodel.parallel.layout.Layout` objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from costmodel.parallel.axes import N, E, H, C, F
from costmodel.parallel.layout import AxisSplit, Layout, max_block_extents
from costmodel.parallel.strategy import Strategy
from networks.analysis import layer_splits
from networks.errors import DnnplanError
from networks.ir import DTYPE_BYTES, Layer
from networks.ops.attention import head_shape
from networks.ops.base import DimSplit, prod, units_fit, units_share


@lru_cache(maxsize=None)
def dim_splits(layer: Layer) -> dict[str, DimSplit]:
    """What each splittable dimension of ``layer`` cuts (the op catalogue's ``DimSplit``s), memoised."""
    return layer_splits(layer)


def one_replica(layer: Layer, strategy: Strategy, batch: int, domain: int | None = None,
                copies: tuple[int, ...] = ()) -> tuple[Strategy, int]:
    """``(strategy, batch)`` of one data-parallel replica, where its sample split ``N`` moves nothing of
    its own: the same strategy without ``N`` over ``p / n`` ranks, at ``batch / n`` samples. ``N`` is the
    grid's outermost dimension, so every other dimension's group is the same ranks' in both (rank
    0's group along any other dimension lies in its first ``p / n`` ranks), and the shard is the
    same: the same kernels, collectives, kept bytes and workspace (``costmodel.layer.cost._sharded``
    prices it once; the pipeline pairs of a search price the same replicas at many device counts:
    Llama 3.1 405B on 16,384 H100s, 6,946 shards priced where 17,333 were). Where ``N`` has
    collectives of its own (a batch norm's statistics, ``DimSplit.extra``; the loss's partial sum,
    ``partial_out``), cuts grouped weights, or does not divide the batch, the strategy and batch are
    kept; so too where the ranks span several link domains (``domain``, given) and a replica's
    ``p / n`` ranks and the domain neither divides the other: a replica then lies across the
    domains unlike the first one, and its groups are priced where they lie (costmodel.comm.spans);
    and so too for a pipeline stage's strategy (``copies``: the other stages' first ranks modulo
    ``domain``, ``Machine.copies``) unless every replica of every stage is a block of ``p / n``
    ranks inside one domain, as the first one is."""
    n = strategy.degree(N)
    if n == 1 or batch % n:
        return strategy, batch
    q = strategy.p // n
    if domain is not None and strategy.p > domain and q % domain and domain % q:
        return strategy, batch
    if copies and domain is not None and (domain % q or any(c % q for c in copies)):
        return strategy, batch
    split = dim_splits(layer).get(N)
    if split is None or split.extra or split.weight_units or split.partial_out or split.partial_in_grad:
        return strategy, batch
    return Strategy(strategy.p // n, tuple((d, k) for d, k in strategy.degrees if d != N), strategy.seq_scatter,
                    strategy.expert_seq), batch // n


def windowed(layer: Layer, strategy: Strategy) -> bool:
    """Whether the strategy splits a windowed dimension (H or W of a convolution or pool), whose
    input blocks carry halos."""
    return any(dim_splits(layer)[d].window is not None for d, _ in strategy.degrees)


def sequence_scatter(layer: Layer, strategy: Strategy) -> tuple[str, int, DimSplit] | str:
    """The sequence-parallel variant (``Strategy.seq_scatter``) of a tensor-parallel split:
    ``(dim, degree, sequence split)`` of the one model dimension (C or F) whose reductions it turns
    into a reduce-scatter over the sequence, or why the layer cannot take it.

    Korthikanti et al. 2022, section 4.2.2: a split contraction's partial output (``partial_out``)
    is reduce-scattered into sequence shards over the group instead of all-reduced (its gradient
    all-gathered back); an input whose gradient is a partial sum (``partial_in_grad``) arrives in
    sequence shards, all-gathered forward, and its gradient is reduce-scattered back into them.

    Beside context parallelism (H = c) the shards are of each context rank's ``S / c`` positions,
    as Megatron-Core runs SP inside CP: the sequence axis is then cut by the composite ``H*C`` or
    ``H*F`` (``costmodel.parallel.strategy.composite``) into ``c t`` shards, and the collectives run over
    the tensor group on the local sequence."""
    splits = dim_splits(layer)
    seq = splits.get(H)
    if seq is None or seq.window is not None:
        return f"{layer.op} has no sequence axis to scatter over (SP)"
    dims = [(d, k) for d, k in strategy.degrees if d in (C, F) and d in splits
            and ((splits[d].partial_out and seq.out_axis is not None)
                 or (splits[d].partial_in_grad and seq.in_axes[0] is not None))]
    if len(dims) != 1:
        return "SP needs one tensor-parallel dimension (C or F) whose partial sums it can scatter"
    (dim, k), = dims
    c = strategy.degree(H)
    if seq.size % (c * k):
        return f"SP: {dim}={k} must divide the sequence of {seq.size // c} a context rank holds"
    return dim, k, seq


def _seq_split(dim: str, k: int, strategy: Strategy, extent: int) -> AxisSplit:
    """How the sequence-parallel variant cuts the sequence axis: ``k`` ways by the tensor dimension,
    within each of the ``c`` context shards when H splits it too (``H*dim``, :func:`sequence_scatter`)."""
    c = strategy.degree(H)
    return AxisSplit(f"H*{dim}", c * k, extent) if c > 1 else AxisSplit(dim, k, extent)


def check_fits(layer: Layer, strategy: Strategy, batch: int) -> str | None:
    """Why the strategy cannot be applied to the layer, or None when it can."""
    splits = dim_splits(layer)
    for dim, k in strategy.degrees:
        if dim not in splits:
            can = ",".join(splits) or "none"
            return f"{layer.op} cannot split {dim} (it splits {can})"
        size = batch if dim == N else splits[dim].size
        if k > size:
            return f"{dim}={k} exceeds the {size} {'samples' if dim == 'N' else 'positions'} of {dim}"
        if splits[dim].divides and size % k:
            return f"{dim}={k} must divide {size} for {layer.op}"
        why = units_fit(splits[dim], k) if splits[dim].weight_units else None
        if why:
            return why
        if dim == E and strategy.degree(N) * k // strategy.expert_seq > batch:
            return f"E={k} splits the tokens with N={strategy.degree('N')}: {batch} samples cannot cover them"
        if dim == E and strategy.expert_seq > 1 and (k % strategy.expert_seq or H not in splits or
                                                      splits[H].size % (strategy.degree(H) * strategy.expert_seq)):
            return f"E={k} folded over {strategy.expert_seq} sequence shards must divide E and the sequence"
    got = sequence_scatter(layer, strategy) if strategy.seq_scatter else None
    return got if isinstance(got, str) else None


def require_fits(layer: Layer, strategy: Strategy, batch: int) -> None:
    why = check_fits(layer, strategy, batch)
    if why:
        raise DnnplanError(f"strategy {strategy.label} does not fit: {why}", layer=layer.name,
                           hint="choose degrees the layer can split, or let the planner choose")


def _batched(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    return (batch, *shape)


def _extent(split: DimSplit, batch: int) -> int:
    return batch if split.dim == N else split.size


@lru_cache(maxsize=None)
def output_layout(layer: Layer, strategy: Strategy, batch: int) -> Layout:
    """The layout the layer produces (after its forward partial-sum reduction, if any; under the
    sequence-parallel variant the reduction scatters the sequence over the group). Under an expert
    split the tokens lie as :attr:`Strategy.tokens` holds them (N and E together)."""
    if strategy.degree(E) > 1:
        return output_layout(layer, strategy.tokens, batch)
    shape = _batched(layer.out_shape, batch)
    axes: list[AxisSplit | None] = [None] * len(shape)
    for dim, k in strategy.degrees:
        split = dim_splits(layer)[dim]
        if split.out_axis is not None and split.out_axis < len(shape):
            axes[split.out_axis] = AxisSplit(dim, k, shape[split.out_axis])
    scatter = _scattered(layer, strategy)
    if scatter and dim_splits(layer)[scatter[0]].partial_out:
        dim, k, seq = scatter
        axes[seq.out_axis] = _seq_split(dim, k, strategy, shape[seq.out_axis])
    return Layout(shape, strategy, tuple(axes))


def _scattered(layer: Layer, strategy: Strategy) -> tuple[str, int, DimSplit] | None:
    if not strategy.seq_scatter:
        return None
    got = sequence_scatter(layer, strategy)
    return None if isinstance(got, str) else got


@lru_cache(maxsize=None)
def input_layout(layer: Layer, strategy: Strategy, batch: int, slot: int) -> Layout:
    """The layout the layer needs for input ``slot`` (halos included for split spatial dims; under
    an expert split, the tokens as :attr:`Strategy.tokens` holds them)."""
    if strategy.degree(E) > 1:
        return input_layout(layer, strategy.tokens, batch, slot)
    shape = _batched(layer.in_shapes[slot], batch)
    axes: list[AxisSplit | None] = [None] * len(shape)
    for dim, k in strategy.degrees:
        split = dim_splits(layer)[dim]
        axis = split.in_axes[slot] if slot < len(split.in_axes) else split.in_axes[0]
        if axis is None:
            continue
        if split.window is not None:
            axes[axis] = AxisSplit(dim, k, _extent(split, batch), split.window)
        else:
            axes[axis] = AxisSplit(dim, k, shape[axis])
    scatter = _scattered(layer, strategy)
    if scatter and dim_splits(layer)[scatter[0]].partial_in_grad:
        dim, k, seq = scatter
        axis = seq.in_axes[slot] if slot < len(seq.in_axes) else seq.in_axes[0]
        if axis is not None and (axes[axis] is None or axes[axis].dim == H):
            axes[axis] = _seq_split(dim, k, strategy, shape[axis])
    return Layout(shape, strategy, tuple(axes))


@lru_cache(maxsize=None)
def weight_layouts(layer: Layer, strategy: Strategy) -> dict[str, Layout]:
    """Each weight's shard layout (weights are replicated over every dimension that does not cut them)."""
    out = {}
    for name, shape in layer.weights:
        axes: list[AxisSplit | None] = [None] * len(shape)
        for dim, k in strategy.degrees:
            split = dim_splits(layer)[dim]
            for wname, axis in split.weight_axes:
                if wname == name:
                    axes[axis] = AxisSplit(dim, k, shape[axis], share=units_share(split, name, k))
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
    """Local shapes of the straggler (largest block on every axis). The sequence-parallel variant
    computes on the gathered input and the unscattered output: the plain strategy's shapes."""
    if strategy.seq_scatter:
        return local_layer(layer, strategy.plain, batch)
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
        params |= _local_heads(layer.p, layer.in_shapes[0], wdict)
    elif layer.op == "embedding":
        params["dim"] = out[-1]
    elif layer.op == "moe":
        params |= _local_experts(layer.p, wdict)
    local_batch = out[0] if layer.out_shape != () else ins[0][0]  # the loss is one number
    return LocalLayer(layer, local_batch, tuple(s[1:] for s in ins), tuple(out[1:]),
                      tuple(sorted(params.items())), weights)


def _local_heads(p: dict, in_shape: tuple[int, ...], wdict: dict) -> dict:
    """An attention shard's own query and key/value heads (whole key/value groups, or one replicated
    head when the split exceeds them), its head width, and the sequence every query attends to
    (keys and values are exchanged over a split sequence)."""
    seq, d = in_shape
    heads, kv, dh = head_shape(p, d)
    local = wdict["out_weight"][1] // dh
    kv_local = wdict["kv_weight"][1] // dh if "kv_weight" in wdict else local
    return {"heads_total": heads, "kv_total": kv, "heads": local, "kv_heads": kv_local, "head_dim": dh,
            "seq_total": seq}


def _local_experts(p: dict, wdict: dict) -> dict:
    """A mixture-of-experts shard's own experts and hidden widths (and the layer's: the router
    scores every expert)."""
    return {"experts_total": p["experts"], "experts": wdict["w_in"][0], "hidden_total": p["hidden"],
            "hidden": wdict["w_out"][2], "shared_local": wdict["shared_out"][1] if "shared_out" in wdict else 0}


def local_experts(layer: Layer, strategy: Strategy) -> int:
    """The experts a mixture-of-experts layer's shard holds under ``strategy`` (0: another op)."""
    if layer.op != "moe":
        return 0
    return max_block_extents(weight_layouts(layer, strategy)["w_in"])[0]


def received_block_bytes(local: LocalLayer, slot: int) -> int:
    """Input ``slot``'s block (halos included) that a layer split over a windowed dimension
    (:func:`windowed`) receives and keeps for backward."""
    return local.batch * prod(local.in_shapes[slot]) * DTYPE_BYTES.get(local.layer.dtype, 4)
