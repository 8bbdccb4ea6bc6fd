"""One converter per ONNX op type: the node -> the spec layer(s) it is (docs/network-spec.md,
"Importing a model").

Each converter reads the node's attributes and weights' shapes, refuses in one line what the
catalogue op cannot say (asymmetric padding, an exact-erf GELU, a layer norm without bias...), and
emits the layer through :meth:`networks.importers.onnx.map.Mapper.emit`, each number with where it
came from. Weights' values are never read, only their shapes.
"""

from __future__ import annotations

from networks.importers.onnx.attrs import attrs, f32, padding, pair
from networks.importers.onnx.linear import matmul_weight
from networks.importers.onnx.map import Mapper
from networks.importers.onnx.pool import CONVERTERS as POOLING
from networks.errors import short
from networks.importers.values import Val
from networks.ops.base import prod
from networks.ops.catalogue import OPS


def conv(m: Mapper, k: int) -> None:
    g, node = m.g, m.g.nodes[k]
    a = attrs(g, k)
    w = g.weight_of(node.input[1])
    if w is None or len(w[1]) != 4 or w[2]:
        raise g.fail(k, "only a 2-D convolution by a weight tensor (F, C/groups, kh, kw) maps")
    name, dims, _ = w
    m.use(name, k=k)
    bias = len(node.input) > 2 and bool(node.input[2])
    if bias:
        b = g.weight_of(node.input[2])
        if b is None or b[1] != (dims[0],):
            raise g.fail(k, "its bias is not a weight of one value per filter")
        m.use(b[0], k=k)
    src = f"{name} {list(dims)}"
    m.emit(k, "conv2d", [node.input[0]], {
        "filters": Val(dims[0], src), "kernel": Val(pair(a.get("kernel_shape", dims[2:]), "kernel_shape", g, k), src),
        "stride": Val(pair(a.get("strides", [1, 1]), "strides", g, k), "strides"),
        "padding": Val(padding(a, g, k), "pads"), "dilation": Val(pair(a.get("dilations", [1, 1]), "dilations", g, k),
                                                               "dilations"),
        "groups": Val(a.get("group", 1), "group"), "bias": Val(bias, "a bias input" if bias else "no bias input")})


def linear(m: Mapper, k: int) -> None:
    """Gemm, or MatMul by a 2-D weight: a linear layer on the last axis (its bias may follow as Add)."""
    g, node = m.g, m.g.nodes[k]
    found = matmul_weight(g, k)
    if found is None:
        raise g.fail(k, _unmapped_product(g, k))
    name, fin, fout = found
    a = attrs(g, k)
    if node.op_type == "Gemm" and (a.get("transA", 0) or f32(a.get("alpha", 1.0)) != 1 or f32(a.get("beta", 1.0)) != 1):
        raise g.fail(k, "Gemm with transA, alpha or beta other than 0, 1, 1 does not map")
    tied = _tied_embedding(m, name, fin, fout)
    if tied is None:
        m.use(name, k=k)
    bias = node.op_type == "Gemm" and len(node.input) > 2 and bool(node.input[2])
    if bias:
        b = g.weight_of(node.input[2])
        if b is None or prod(b[1]) != fout:
            raise g.fail(k, "its bias is not a weight of one value per output feature")
        m.use(b[0], k=k)
    x = m.act(node.input[0], k)
    if x.shape[-1] != fin:
        raise g.fail(k, f"its weight {name} takes {fin} features, its input has {x.shape[-1]}")
    params = {"features": Val(fout, f"{name} {list(g.weights[name])}"),
              "bias": Val(bias, "Gemm's C input" if bias else "no bias")}
    if tied is not None:
        params["tied_to"] = Val(tied, f"{name} is the embedding's table")
    m.emit(k, "linear", [node.input[0]], params)


def _unmapped_product(g, k: int) -> str:
    """Why a Gemm or MatMul maps to no linear layer: a weight of another shape or on the left (a
    linear layer is data times a 2-D weight), else two activations multiplied."""
    node = g.nodes[k]
    weights = [(slot, g.weight_of(v)) for slot, v in enumerate(node.input[:2]) if v and g.weight_of(v) is not None]
    if weights:
        slot, (name, dims, _) = weights[0]
        where = "a 2-D weight" if len(dims) != 2 else "the weight on the right"
        return (f"multiplies by the weight {short(name)} {list(dims)} as input {slot}: a linear layer is the data "
                f"times {where} (x @ W), which this is not")
    return "multiplies two activations outside an attention pattern, which no catalogue op does"


def _tied_embedding(m: Mapper, weight: str, fin: int, fout: int) -> str | None:
    """The embedding layer whose token table ``weight`` is, read as (dim -> vocab): a tied LM head."""
    owner = m.owner.get(weight)
    rec = next((r for r in m.recs if r.name == owner), None)
    if rec is None or rec.op != "embedding" or m.g.weights[weight] != (fout, fin):
        return None
    return rec.name


def add(m: Mapper, k: int) -> None:
    """A residual add of activations; or a bias after a linear or conv; or learned positions."""
    g, node = m.g, m.g.nodes[k]
    data = m.data_inputs(k)
    if len(data) == len([n for n in node.input if n]):
        m.emit(k, "add", data, {})
        return
    other = next(n for n in node.input if n and not g.is_data(n))
    x = m.act(data[0], k)
    rec = next((r for r in reversed(m.recs) if r.name == x.name), None)
    if rec is not None and _fold_bias(m, k, rec, other, data[0]):
        return
    if rec is not None and rec.op == "embedding" and _fold_positions(m, k, rec, other):
        return
    raise g.fail(k, f"adds the constant '{other}' to an activation (neither a bias after a linear layer or "
                 "convolution nor learned positions after an embedding)")


def _fold_bias(m: Mapper, k: int, rec, other: str, value: str) -> bool:
    g = m.g
    w = g.weight_of(other)
    if w is None or rec.op not in ("linear", "conv2d") or _flag(rec.params.get("bias")):
        return False
    features = rec.shape[0] if rec.op == "conv2d" else rec.shape[-1]
    want = ((features, 1, 1), (1, features, 1, 1)) if rec.op == "conv2d" else ((features,), (1, features))
    if w[1] not in want or len(g.consumers.get(value, [])) != 1:
        return False
    m.use(w[0], k=k)
    m.owner[w[0]] = rec.name
    m.pending.clear()
    rec.params["bias"] = Val(True, f"the Add of {w[0]} after it")
    m.alias(k, value)
    return True


def _flag(v) -> bool:
    return bool(v.value if isinstance(v, Val) else v)


def _fold_positions(m: Mapper, k: int, rec, other: str) -> bool:
    """``Gather(P, arange(S))`` added to the token embedding: learned positions, P's rows of them."""
    import numpy as np  # noqa: PLC0415 - only to read position indices

    g = m.g
    src = g.producer.get(other)
    if src is None or g.nodes[src].op_type != "Gather" or rec.params.get("positions"):
        return False
    w = g.weight_of(g.nodes[src].input[0])
    seq = rec.shape[0]
    if w is None or len(w[1]) != 2 or w[1][1] != rec.shape[1]:
        return False
    idx = np.asarray(g.const(g.nodes[src].input[1], src)).reshape(-1)
    if idx.size != seq or not (idx == np.arange(seq)).all():
        raise g.fail(src, "looks up learned positions at indices other than 0 .. S-1")
    m.use(w[0], k=k)
    m.owner[w[0]] = rec.name
    m.pending.clear()
    rec.params["positions"] = Val(w[1][0], f"{w[0]} {list(w[1])}")
    m.alias(k, next(n for n in g.nodes[k].input if g.is_data(n)))
    return True


def gather(m: Mapper, k: int) -> None:
    """A token table looked up by integer ids: an embedding."""
    g, node = m.g, m.g.nodes[k]
    w = g.weight_of(node.input[0])
    if w is None or len(w[1]) != 2 or attrs(g, k).get("axis", 0) != 0 or g.is_data(node.input[0]):
        raise g.fail(k, "only a lookup of integer ids in a 2-D weight (an embedding) maps")
    m.use(w[0], k=k)
    src = f"{w[0]} {list(w[1])}"
    m.emit(k, "embedding", [node.input[1]], {"vocab": Val(w[1][0], src), "dim": Val(w[1][1], src)})


def batchnorm(m: Mapper, k: int) -> None:
    g, node = m.g, m.g.nodes[k]
    a = attrs(g, k)
    for slot in (1, 2, 3, 4):
        w = g.weight_of(node.input[slot]) if len(node.input) > slot else None
        if w is None:
            raise g.fail(k, f"its input {slot} (scale, bias, mean, variance) is not a weight")
        m.use(w[0], trainable=slot <= 2, k=k)  # the running mean and variance are statistics, not parameters
    momentum = round(1 - f32(a.get("momentum", 0.9)), 6)  # ONNX keeps the old statistics' share
    m.emit(k, "batchnorm2d", [node.input[0]], {"eps": Val(f32(a.get("epsilon", 1e-5)), "epsilon"),
                                               "momentum": Val(momentum, "1 - momentum")})


def layernorm(m: Mapper, k: int) -> None:
    g, node = m.g, m.g.nodes[k]
    a = attrs(g, k)
    x = m.act(node.input[0], k)
    if a.get("axis", -1) not in (-1, len(x.shape)):
        raise g.fail(k, f"axis={a['axis']}: only a norm over the last axis maps")
    rms = node.op_type == "RMSNormalization"
    slots = (1,) if rms else (1, 2)
    for slot in slots:
        w = g.weight_of(node.input[slot]) if len(node.input) > slot and node.input[slot] else None
        if w is None:
            raise g.fail(k, "a layer norm without a scale and bias weight does not map (the catalogue's has both)")
        m.use(w[0], k=k)
    m.emit(k, "rmsnorm" if rms else "layernorm", [node.input[0]], {"eps": Val(f32(a.get("epsilon", 1e-5)), "epsilon")})


def pointwise(op: str, why: str = ""):
    def convert(m: Mapper, k: int) -> None:
        if op not in OPS:
            raise m.g.fail(k, f"the op catalogue has no '{op}' op{why}")
        m.emit(k, op, [m.g.nodes[k].input[0]], {})
    return convert


def gelu(m: Mapper, k: int) -> None:
    how = attrs(m.g, k).get("approximate", b"none")
    how = how.decode() if isinstance(how, bytes) else how
    if how != "tanh":
        raise m.g.fail(k, f"approximate={how}: the catalogue's gelu is the tanh approximation (GPT-2's gelu_new)",
                       hint="export GELU with approximate='tanh' if the model uses it")
    m.emit(k, "gelu", [m.g.nodes[k].input[0]], {})


def dropout(m: Mapper, k: int) -> None:
    g, node = m.g, m.g.nodes[k]
    rate, origin = attrs(g, k).get("ratio", 0.5), "ratio"
    if len(node.input) > 1 and node.input[1]:
        rate, origin = float(g.const(node.input[1], k)), f"ratio input '{node.input[1]}'"
    m.emit(k, "dropout", [node.input[0]], {"rate": Val(f32(rate), origin)})


def concat(m: Mapper, k: int) -> None:
    g, node = m.g, m.g.nodes[k]
    data = m.data_inputs(k)
    if len(data) != len([n for n in node.input if n]):
        raise g.fail(k, "concatenates a constant with activations")
    rank = len(m.act(data[0], k).shape) + 1
    axis = attrs(g, k)["axis"] % rank
    if axis == 0:
        raise g.fail(k, "concatenates along the batch axis")
    m.emit(k, "concat", data, {"axis": Val(axis - 1, f"axis {attrs(g, k)['axis']} less the batch")})


def reshape(m: Mapper, k: int) -> None:
    """A flatten of (C, H, W), or a regrouping of leading axes the per-sample shapes do not see."""
    g, node = m.g, m.g.nodes[k]
    x = m.act(node.input[0], k)
    out = g.shape(node.output[0])
    if node.op_type == "Flatten":
        if attrs(g, k).get("axis", 1) != 1:
            raise g.fail(k, f"axis={attrs(g, k)['axis']}: only a flatten after the batch axis maps")
        out = (g.batch, prod(x.shape))
    if out is None:
        raise g.fail(k, "its output shape cannot be worked out from the graph")
    if len(x.shape) == 3 and tuple(out) == (g.batch, prod(x.shape)):
        m.emit(k, "flatten", [node.input[0]], {})
    elif len(x.shape) in (1, 2) and out and out[-1] == x.shape[-1]:
        m.alias(k, node.input[0])
    else:
        raise g.fail(k, f"reshapes {tuple(x.shape)} per sample to {tuple(out)}, neither a flatten nor a regrouping "
                     "of the leading axes")


def identity(m: Mapper, k: int) -> None:
    m.alias(k, m.g.nodes[k].input[0])


def softmax(m: Mapper, k: int) -> None:
    """Softmax of the logits at the graph's end: the loss's own (the spec ends in softmax_cross_entropy)."""
    g, node = m.g, m.g.nodes[k]
    if node.output[0] not in g.outputs:
        why = f" ({m.misses[k]})" if k in m.misses else ""
        raise g.fail(k, f"a softmax that is neither part of an attention pattern{why} nor the graph's output")
    m.alias(k, node.input[0])
    m.softmax_out.add(node.output[0])


def attention(m: Mapper, k: int) -> None:
    """An Attention node that is not an attention region: say why."""
    raise m.g.fail(k, f"an attention op that does not map: {m.misses.get(k, 'its form is not one dnnplan reads')}")


CONVERTERS = {
    "Attention": attention,
    "Conv": conv, "Gemm": linear, "MatMul": linear, "Add": add, "Gather": gather, "BatchNormalization": batchnorm,
    "LayerNormalization": layernorm, "RMSNormalization": layernorm, "Relu": pointwise("relu"), "Gelu": gelu,
    "Sigmoid": pointwise("sigmoid", " (a sigmoid activation)"), "Tanh": pointwise("tanh", " (a tanh activation)"),
    "Dropout": dropout, "Concat": concat, "Reshape": reshape, "Flatten": reshape, "Identity": identity,
    "Cast": identity, "Softmax": softmax, "LogSoftmax": softmax, **POOLING,
}
