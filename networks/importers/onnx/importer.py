"""An ONNX model -> the equivalent network spec (YAML text). Pure: bytes in, text out.

The graph is read (:class:`networks.importers.onnx.model_graph.Graph`), its attention regions found
(:mod:`networks.importers.onnx.attention`), every data node mapped to a layer
(:mod:`networks.importers.onnx.map`, :mod:`networks.importers.onnx.convert`), and a
``softmax_cross_entropy`` loss put on the graph's output (the logits; a softmax there is the loss's
own). The spec is then read back, and its parameter count must equal the graph's trainable
weights' (batch-norm statistics are not parameters; a tied head's table counts once): a mapping
that lost or invented a weight is refused rather than written.
"""

from __future__ import annotations

from networks.errors import DnnplanError, short
from networks.importers.onnx.attention import Region, find_regions
from networks.importers.onnx.convert import CONVERTERS
from networks.importers.onnx.model_graph import Graph, parse_model
from networks.importers.onnx.map import Act, Mapper, Rec, walk
from networks.importers.spec_out import header, item, scalar
from networks.importers.values import Val
from networks.ops.catalogue import OPS
from networks.spec import parse_network


def _needs(m: Mapper, region: Region, value, what: str, param: str) -> None:
    if OPS["attention"].param(param) is None:
        raise m.g.fail(region.anchor, f"{what} ({value}) needs the attention op's {param}, which this dnnplan's "
                       "op catalogue does not have yet")


def emit_attention(m: Mapper, r: Region) -> None:
    """The attention region ``r`` as one attention layer."""
    for w in r.weights:
        m.use(w, k=r.anchor)
    params = {"heads": Val(r.heads, r.heads_from)}
    if r.kv_heads != r.heads:
        _needs(m, r, r.kv_heads, "grouped-query attention", "kv_heads")
        params["kv_heads"] = Val(r.kv_heads, "the key projection's width / the head width")
    if r.heads * r.head_dim != r.width:
        _needs(m, r, r.head_dim, "a head width other than the model width / heads", "head_dim")
        params["head_dim"] = Val(r.head_dim, r.heads_from)
    params["causal"] = Val(r.causal, r.causal_from)
    params["bias"] = Val(r.out_bias, "the output projection's bias")
    if r.qkv_bias != r.out_bias:
        _needs(m, r, r.qkv_bias, "q/k/v projection biases apart from the output projection's", "qkv_bias")
        params["qkv_bias"] = Val(r.qkv_bias, "the q/k/v projections' biases")
    g = m.g
    rec = m.emit(r.last, "attention", [r.x], params, name=_attention_name(m, r), out=r.out,
                 note=f"{len(r.nodes)} nodes from '{g.label(min(r.nodes))}' to '{g.label(r.last)}' around "
                      f"{g.nodes[r.anchor].op_type} '{g.label(r.anchor)}'")
    rec.node = None


def _attention_name(m: Mapper, r: Region) -> str:
    out_weight = r.weights[-2] if len(r.weights) >= 2 and r.out_bias else r.weights[-1]
    parts = out_weight.rsplit(".", 2)
    return parts[0] if len(parts) == 3 else "attention"


def _inputs(m: Mapper) -> list[str]:
    lines = ["inputs:"]
    for inp in m.g.data_inputs:
        name = m.unique(inp.name)
        m.acts[inp.name] = Act(name, inp.dims[1:], inp.dtype)
        lines.append(f"  {scalar(name)}: {{shape: {scalar(list(inp.dims[1:]))}, dtype: {inp.dtype}}}"
                     f"  # graph input '{inp.name}' {list(inp.dims)}, the batch axis left out")
    return lines


def _loss(m: Mapper) -> None:
    outs = [o for o in m.g.outputs if m.g.is_data(o)]
    if len(outs) != 1:
        raise DnnplanError(f"the graph has {len(outs)} outputs ({short(outs)}); dnnplan trains one output, the "
                           "logits of a classifier or language model", file=m.g.source)
    logits = m.act(outs[0], m.g.producer.get(outs[0], 0))
    if len(logits.shape) not in (1, 2):
        raise DnnplanError(f"the graph's output {short(outs[0])} is {tuple(logits.shape)} per sample; dnnplan trains "
                           "logits shaped (K,) or (S, K)", file=m.g.source)
    note = ("cross-entropy; the softmax at the graph's output is the loss's own" if outs[0] in m.softmax_out
            else "cross-entropy on the graph's output")
    m.emit(None, "softmax_cross_entropy", [outs[0]], {}, note=note, name="loss", out=None)


def _line(m: Mapper, rec: Rec, previous: str | None) -> str:
    fields = {"name": rec.name, "op": rec.op}
    if rec.inputs != [previous]:
        fields["inputs"] = rec.inputs[0] if len(rec.inputs) == 1 else rec.inputs
    fields.update({k: v for k, v in rec.params.items() if v is not None})
    where = f"node '{m.g.label(rec.node)}' ({m.g.nodes[rec.node].op_type})" if rec.node is not None else ""
    return item(2, fields, "; ".join(x for x in (where, rec.note) if x), note_first=True)


def import_onnx(data: bytes, source: str, seq: int | None = None, name: str = "model") -> str:
    """The network spec (YAML text) equivalent to the ONNX model in ``data``."""
    if seq is not None and seq < 1:
        raise DnnplanError(f"--seq must be a positive integer, got {seq}")
    model = parse_model(data, source)
    g = Graph(model, source, seq)
    m = Mapper(g)
    input_lines = _inputs(m)
    regions, m.misses = find_regions(g)
    walk(m, CONVERTERS, {k: r for r in regions for k in r.nodes}, emit_attention)
    _loss(m)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    lines = header([f"Imported by `dnnplan import` from {source} (ONNX, opset {opsets}"
                    + (f", made by {model.producer_name} {model.producer_version}".rstrip() if model.producer_name else "")
                    + ").",
                    "Each layer's comment names the node it came from and where each number came from.",
                    f"{len(g.nodes)} nodes, {len(regions)} attention region{'' if len(regions) == 1 else 's'}, "
                    f"{sum(m.params_used.values()):,} trainable parameters in its weights."])
    lines += [f"name: {scalar(name)}", f"description: {scalar(f'imported from the ONNX graph {name}')}", *input_lines,
              "layers:"]
    previous = m.g.data_inputs[0].name if m.g.data_inputs else None
    previous = m.acts[previous].name if previous in m.acts else None
    for rec in m.recs:
        lines.append(_line(m, rec, previous))
        previous = rec.name
    text = "\n".join(lines) + "\n"
    _check_count(text, source, m)
    return text


def _check_count(text: str, source: str, m: Mapper) -> None:
    net = parse_network(text, source)
    want = sum(m.params_used.values())
    if net.num_params != want:
        raise DnnplanError(f"the spec made from the graph has {net.num_params:,} parameters, the graph's weights "
                           f"{want:,}: some weight is shared or unused in a way the spec cannot say", file=source)
