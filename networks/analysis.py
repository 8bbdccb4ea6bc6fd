"""Counts for a whole network at a batch size: per-layer costs and totals (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from networks.ir import DTYPE_BYTES, Layer, Network
from networks.ops.base import DimSplit, LayerCost, prod
from networks.ops.catalogue import OPS


def layer_cost(layer: Layer, batch: int) -> LayerCost:
    """The op catalogue's counts for one layer at this batch size."""
    itemsize = DTYPE_BYTES.get(layer.dtype, 4)
    return OPS[layer.op].costs(layer.p, layer.in_shapes, layer.out_shape, batch, itemsize)


def layer_splits(layer: Layer) -> dict[str, DimSplit]:
    """Dimension letter -> how splitting it maps onto this layer's tensors."""
    return {s.dim: s for s in OPS[layer.op].splits(layer.p, layer.in_shapes, layer.out_shape)}


def block_of(layer: Layer) -> str | None:
    """The repeated-block instance a layer belongs to: the name spec expansion put before its first
    dot (``h3`` for ``h3.attn``, networks.spec_expand), or None for a layer outside every block."""
    return layer.name.split(".", 1)[0] if "." in layer.name else None


def consumers(net: Network) -> dict[str, int]:
    """Layer name -> how many input slots of the network's layers read its output (a layer that
    reads the same tensor twice counts twice; network inputs are not layers and are left out)."""
    out = {layer.name: 0 for layer in net.layers}
    for layer in net.layers:
        for src in layer.inputs:
            if src in out:
                out[src] += 1
    return out


def saved_outputs(net: Network) -> dict[str, bool]:
    """Layer name -> whether its output stays in memory until backward, as frameworks hold it: the
    op's own backward needs it (``OpDef.saves == "output"``: relu) or a layer reading it needs its
    inputs (``"inputs"``: conv, linear, norms, ...). Any other output is a temporary, freed once
    its readers ran (a batch-norm output that an in-place relu overwrites, a residual sum)."""
    saved = {layer.name: OPS[layer.op].saves == "output" for layer in net.layers}
    for layer in net.layers:
        if OPS[layer.op].saves == "inputs":
            for src in layer.inputs:
                if src in saved:
                    saved[src] = True
    return saved


def kept_bytes(layer: Layer, batch: int, output_saved: bool) -> int:
    """Bytes one layer holds from its forward pass to its backward at ``batch``: its output when
    saved (:func:`saved_outputs`, counted once, at the producer) and what its op keeps besides
    (``LayerCost.activation_bytes``: masks, indices, statistics)."""
    out = batch * prod(layer.out_shape) * DTYPE_BYTES.get(layer.dtype, 4) if output_saved else 0
    return out + layer_cost(layer, batch).activation_bytes


@dataclass(frozen=True)
class NetworkSummary:
    network: str
    batch: int
    params: int
    macs_per_sample: int
    flops_fwd: int
    flops_bwd: int
    activation_bytes: int  # kept for backward, the sum of ``kept``
    layers: tuple[tuple[Layer, LayerCost], ...]
    kept: tuple[int, ...]  # per layer, kept_bytes


def summarize(net: Network, batch: int) -> NetworkSummary:
    rows = tuple((layer, layer_cost(layer, batch)) for layer in net.layers)
    saved = saved_outputs(net)
    kept = tuple(kept_bytes(layer, batch, saved[layer.name]) for layer in net.layers)
    per_sample = sum(layer_cost(layer, 1).macs for layer in net.layers)
    return NetworkSummary(
        network=net.name, batch=batch, params=net.num_params, macs_per_sample=per_sample,
        flops_fwd=sum(c.flops_fwd for _, c in rows), flops_bwd=sum(c.flops_bwd for _, c in rows),
        activation_bytes=sum(kept), layers=rows, kept=kept)


def summary_json(s: NetworkSummary) -> dict:
    """The ``dnnplan info --json`` object."""
    return {
        "network": s.network,
        "batch": s.batch,
        "totals": {"params": s.params, "macs_per_sample": s.macs_per_sample, "flops_fwd": s.flops_fwd,
                   "flops_bwd": s.flops_bwd, "activation_bytes": s.activation_bytes},
        "layers": [{"name": layer.name, "op": layer.op, "output_shape": [s.batch, *layer.out_shape],
                    "params": layer.num_params, "flops_fwd": c.flops_fwd, "flops_bwd": c.flops_bwd,
                    "work": c.step_work, "depth": c.step_depth, "activation_bytes": kept}
                   for (layer, c), kept in zip(s.layers, s.kept)],
    }
