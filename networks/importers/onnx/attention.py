"""Finding self-attention in an ONNX graph: the nodes from the query, key and value projections to the
output projection, which the spec writes as one ``attention`` layer.

Two forms are read. The pattern exporters write for eager attention: ``MatMul(q, k^T)``, a scale
and a mask (``Mul``/``Div``/``Add``/``Where`` by constants), ``Softmax``, ``MatMul(p, v)``, with
``q``, ``k`` and ``v`` reshaped and transposed into heads out of one fused or three separate
projections, and merged back before the output projection. And the fused ``Attention`` op (ONNX
opset 23: projected ``Q``, ``K``, ``V`` in; ``com.microsoft``: the input with the fused projection
weight). The heads come from the shapes ONNX infers; a mask must be computed from constants and
shapes, and is read by evaluating it: a causal mask makes the layer causal, a mask that hides
nothing none; any other mask is refused. The catalogue's attention has one set of q/k/v biases and
one output bias; what it lacks (grouped key/value heads, a head width other than the model's
width over the heads, q/k/v biases without the output's) is refused unless the op has the
parameter (:data:`networks.ops.catalogue.OPS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from networks.importers.onnx.model_graph import Graph
from networks.importers.onnx.linear import Unit, unit_ending_at, unit_reading
from networks.importers.onnx.mask import mask_causal

#: Ops between a projection and the head-shaped q, k or v (and back to the output projection).
HEAD_OPS = ("Reshape", "Transpose", "Split", "Slice", "Squeeze", "Unsqueeze", "Identity", "Cast", "Mul", "Div",
            "Gather", "Expand", "Tile")
#: Ops between the scores and Softmax: the scale and the mask.
SCORE_OPS = ("Mul", "Div", "Add", "Sub", "Where", "Cast")


@dataclass
class Region:
    """One attention layer: the nodes it covers and everything the spec's layer needs."""

    x: str
    out: str
    last: int
    heads: int
    kv_heads: int
    head_dim: int
    width: int
    causal: bool
    qkv_bias: bool
    out_bias: bool
    weights: list[str]
    nodes: set[int] = field(default_factory=set)
    anchor: int = 0
    heads_from: str = "the shapes of q"
    causal_from: str = "its mask"


def _trace_to_unit(g: Graph, value: str, nodes: set[int], what: str) -> Unit | str:
    """Follow ``value`` back through head-shaping ops to the projection that made it (or say where
    that stopped)."""
    while True:
        unit = unit_ending_at(g, value)
        if unit is not None:
            return unit
        k = g.producer.get(value)
        data = [n for n in g.nodes[k].input if n and g.is_data(n)] if k is not None else []
        if k is None or g.nodes[k].op_type not in HEAD_OPS or len(data) != 1:
            where = f"node '{g.label(k)}' ({g.nodes[k].op_type})" if k is not None else "the graph's inputs"
            return (f"its {what} does not come from a linear projection through reshapes and transposes "
                    f"(it stops at {where}; rotary embeddings computed in the graph are not recognised)")
        nodes.add(k)
        value = data[0]


def _scores(g: Graph, k_soft: int, nodes: set[int]) -> tuple[int | None, list[int]]:
    """Back from Softmax to ``MatMul(q, k)``: (its node, the mask nodes)."""
    masks = []
    value = g.nodes[k_soft].input[0]
    while True:
        k = g.producer.get(value)
        if k is None:
            return None, masks
        node = g.nodes[k]
        if node.op_type == "MatMul" and all(g.is_data(n) for n in node.input):
            return k, masks
        if node.op_type not in SCORE_OPS:
            return None, masks
        data = [n for n in node.input if n and g.is_data(n)]
        if node.op_type in ("Add", "Sub", "Where") and len(data) == 2:
            raise g.fail(k, "the attention mask depends on the input data (a padding mask)",
                         hint="export the model without an attention_mask input")
        if len(data) != 1:
            return None, masks
        if node.op_type in ("Add", "Sub", "Where"):
            masks.append(k)
        nodes.add(k)
        value = data[0]


def _weighted_sum(g: Graph, k_soft: int, nodes: set[int]) -> int | None:
    """Forward from Softmax to ``MatMul(p, v)``."""
    value = g.nodes[k_soft].output[0]
    while True:
        readers = g.consumers.get(value, [])
        if len(readers) != 1:
            return None
        k, slot = readers[0]
        node = g.nodes[k]
        if node.op_type == "MatMul" and slot == 0:
            return k
        if node.op_type not in ("Dropout", "Cast", "Identity"):
            return None
        nodes.add(k)
        value = node.output[0]


def _out_projection(g: Graph, value: str, nodes: set[int]) -> Unit | None:
    """Forward from the per-head output through the head merge to the output projection."""
    while True:
        unit = unit_reading(g, value)
        if unit is not None:
            return unit
        readers = g.consumers.get(value, [])
        if len(readers) != 1:
            return None
        k, _ = readers[0]
        if g.nodes[k].op_type not in ("Transpose", "Reshape", "Identity", "Cast"):
            return None
        nodes.add(k)
        value = g.nodes[k].output[0]


def _softmax_region(g: Graph, k_soft: int) -> Region | str:
    nodes = {k_soft}
    k_qk, masks = _scores(g, k_soft, nodes)
    if k_qk is None:
        return "its scores are not a MatMul of two activations (through a scale and a mask)"
    k_pv = _weighted_sum(g, k_soft, nodes)
    if k_pv is None:
        return "its probabilities do not go on to a MatMul with the values"
    nodes.update((k_qk, k_pv))
    q_in, k_in = g.nodes[k_qk].input[:2]
    units = [_trace_to_unit(g, v, nodes, what) for v, what in
             ((q_in, "query"), (k_in, "key"), (g.nodes[k_pv].input[1], "value"))]
    missing = next((u for u in units if isinstance(u, str)), None)
    if missing:
        return missing
    out = _out_projection(g, g.nodes[k_pv].output[0], nodes)
    if out is None:
        return "its heads do not go on, merged, to an output projection"
    q_shape = g.shape(q_in)
    if q_shape is None or len(q_shape) != 4:
        return "ONNX's shape inference gives its queries no (batch, heads, sequence, head width) shape"
    causal = mask_causal(g, masks, q_shape[2])
    region = _build(g, units, out, nodes, heads=q_shape[1], head_dim=q_shape[3], causal=causal)
    if not isinstance(region, str):
        region.anchor = k_soft
        region.heads_from = f"q's shape {list(q_shape)} at node '{g.label(k_qk)}'"
        region.causal_from = "its mask, evaluated: causal" if causal else ("its mask, evaluated: hides nothing"
                                                                          if masks else "no mask")
    return region


def _build(g: Graph, units: list[Unit], out: Unit, nodes: set[int], heads: int, head_dim: int,
           causal: bool) -> Region | str:
    """The region from its q, k, v units, output unit and head count (None if they do not fit)."""
    q, k, v = units
    if len({q.x, k.x, v.x}) != 1:
        return "its query, key and value projections read different inputs (cross-attention)"
    distinct = {u.out: u for u in units}.values()
    proj = sum(u.features for u in distinct)
    if (proj - heads * head_dim) % (2 * head_dim):
        return f"its projections' {proj} outputs are not {heads} query heads and as many key as value heads"
    kv_heads = (proj - heads * head_dim) // (2 * head_dim)
    biases = {u.bias is not None for u in distinct}
    if len(biases) != 1:
        return "some of its query, key and value projections have biases and some not"
    if out.features != q.in_features or out.in_features != heads * head_dim:
        return "its output projection does not map the heads back to the model's width"
    for u in (*distinct, out):
        nodes.update(u.nodes)
    weights = [w for u in (*distinct, out) for w in (u.weight, u.bias) if w]
    last = max(out.nodes | {g.producer[out.out]})
    return Region(q.x, out.out, last, heads, kv_heads, head_dim, q.in_features, causal, biases.pop(),
                  out.bias is not None, weights, nodes)


def _fused_region(g: Graph, k_att: int) -> Region | str:
    """ONNX's Attention op (opset 23): projected Q, K, V with the head counts as attributes."""
    node = g.nodes[k_att]
    attrs = {a.name: a for a in node.attribute}
    if len([n for n in node.input if n]) != 3 or "q_num_heads" not in attrs:
        return "only an Attention of 3-D q, k and v (q_num_heads given) without a mask or cache maps"
    nodes = {k_att}
    units = [_trace_to_unit(g, v, nodes, what) for v, what in zip(node.input[:3], ("query", "key", "value"))]
    missing = next((u for u in units if isinstance(u, str)), None)
    if missing:
        return missing
    out = _out_projection(g, node.output[0], nodes)
    if out is None:
        return "its output does not go on to an output projection"
    heads = attrs["q_num_heads"].i
    head_dim = units[0].features // heads
    causal = bool(attrs["is_causal"].i) if "is_causal" in attrs else False
    region = _build(g, units, out, nodes, heads, head_dim, causal)
    if not isinstance(region, str):
        region.anchor = k_att
        region.heads_from, region.causal_from = "q_num_heads", "is_causal"
    return region


def _contrib_region(g: Graph, k_att: int) -> Region | str:
    """com.microsoft's Attention: the input, the fused q/k/v weight (D, 3D) and bias (3D) in one node."""
    node = g.nodes[k_att]
    attrs = {a.name: a for a in node.attribute}
    w = g.weight_of(node.input[1]) if len(node.input) > 1 else None
    b = g.weight_of(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if w is None or len(w[1]) != 2 or "num_heads" not in attrs or any(node.input[3:]):
        return "only an Attention of the input, a 2-D weight and a bias (num_heads given) without a mask maps"
    nodes = {k_att}
    out = _out_projection(g, node.output[0], nodes)
    if out is None:
        return "its output does not go on to an output projection"
    width, heads = w[1][0], attrs["num_heads"].i
    nodes.update(out.nodes)
    causal = bool(attrs["unidirectional"].i) if "unidirectional" in attrs else False
    weights = [x for x in (w[0], b[0] if b else None, out.weight, out.bias) if x]
    return Region(node.input[0], out.out, max(out.nodes | {g.producer[out.out]}), heads, heads, width // heads,
                  width, causal, b is not None, out.bias is not None, weights, nodes, k_att, "num_heads",
                  "unidirectional")


def find_regions(g: Graph) -> tuple[list[Region], dict[int, str]]:
    """Every attention region of the graph, in graph order, and why each Softmax or Attention node
    that is not one is not (node -> reason)."""
    found, misses = [], {}
    for k, node in enumerate(g.nodes):
        if node.op_type == "Softmax" and g.is_data(node.input[0]):
            region = _softmax_region(g, k)
        elif node.op_type == "Attention" and node.domain in ("", "ai.onnx"):
            region = _fused_region(g, k)
        elif node.op_type == "Attention" and node.domain == "com.microsoft":
            region = _contrib_region(g, k)
        else:
            continue
        if isinstance(region, str):
            misses[k] = region
        elif not _closed(g, region):
            misses[k] = "a value inside the pattern is also read outside it"
        else:
            found.append(region)
    return found, misses


def _closed(g: Graph, region: Region) -> bool:
    """Whether nothing outside the region reads a value made inside it (but its output)."""
    for k in region.nodes:
        for value in g.nodes[k].output:
            if value and value != region.out and g.is_data(value):
                if any(j not in region.nodes for j, _ in g.consumers.get(value, [])):
                    return False
    return True
