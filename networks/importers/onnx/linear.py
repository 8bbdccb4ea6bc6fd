"""Finding the linear layers of an ONNX graph as units: Gemm, or MatMul by a weight, with its bias (an
``Add`` of a vector weight or Gemm's third input) and the reshapes exporters put around them
((B, S, D) -> (B*S, D) before a 2-D Gemm and back after it).

The attention pattern (:mod:`networks.importers.onnx.attention`) uses these to find its query, key,
value and output projections; a reshape counts as part of a unit only when it keeps the last axis
(it regroups the leading ones, which the spec's per-sample shapes do not see).
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.importers.onnx.model_graph import Graph


@dataclass(frozen=True)
class Unit:
    """One linear layer of the graph: ``x`` -> ``out``, weight ``weight`` seen as (in, out)."""

    x: str
    out: str
    weight: str
    in_features: int
    features: int
    bias: str | None
    nodes: frozenset[int]


def keeps_last_axis(g: Graph, k: int) -> bool:
    """Whether node ``k`` (a Reshape, Identity or Cast) keeps the last axis of its data input."""
    node = g.nodes[k]
    if node.op_type in ("Identity", "Cast"):
        return True
    if node.op_type != "Reshape":
        return False
    a, b = g.shape(node.input[0]), g.shape(node.output[0])
    return a is not None and b is not None and len(a) >= 1 and len(b) >= 1 and a[-1] == b[-1]


def _producer(g: Graph, value: str) -> int | None:
    return g.producer.get(value)


def matmul_weight(g: Graph, k: int) -> tuple[str, int, int] | None:
    """(weight, in features, out features) when node ``k`` is Gemm or MatMul of data by a 2-D weight."""
    node = g.nodes[k]
    if node.op_type not in ("Gemm", "MatMul") or len(node.input) < 2 or not g.is_data(node.input[0]):
        return None
    found = g.weight_of(node.input[1])
    if found is None or len(found[1]) != 2:
        return None
    name, (a, b), transposed = found
    if node.op_type == "Gemm":
        attrs = {x.name: x for x in node.attribute}
        if "transB" in attrs and attrs["transB"].i:
            transposed = not transposed
    return (name, b, a) if transposed else (name, a, b)


def _bias(g: Graph, k: int, features: int) -> tuple[str | None, str | None]:
    """(bias weight, the data operand) when node ``k`` is an Add of a vector weight of ``features``."""
    node = g.nodes[k]
    if node.op_type != "Add" or len(node.input) != 2:
        return None, None
    for slot in (0, 1):
        w = g.weight_of(node.input[slot])
        other = node.input[1 - slot]
        if w is not None and g.is_data(other) and w[1] in ((features,), (1, features)):
            return w[0], other
    return None, None


def unit_ending_at(g: Graph, value: str) -> Unit | None:
    """The linear unit whose result is ``value`` (through a trailing reshape and a bias add)."""
    nodes: list[int] = []
    out = value
    k = _producer(g, value)
    bias_k = None
    while k is not None and g.nodes[k].op_type in ("Reshape", "Identity", "Cast", "Add"):
        if g.nodes[k].op_type == "Add":
            if bias_k is not None:
                return None
            bias_k = k
        elif not keeps_last_axis(g, k):
            return None
        nodes.append(k)
        value = _data_input(g, k)
        if value is None:
            return None
        k = _producer(g, value)
    if k is None or matmul_weight(g, k) is None:
        return None
    weight, fin, fout = matmul_weight(g, k)
    bias = None
    if bias_k is not None:
        bias, operand = _bias(g, bias_k, fout)
        if bias is None:
            return None
    node = g.nodes[k]
    if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
        if bias is not None:
            return None
        found = g.weight_of(node.input[2])
        if found is None or found[1] not in ((fout,), (1, fout)):
            return None
        bias = found[0]
    nodes.append(k)
    x, lead = strip_reshapes(g, node.input[0])
    return Unit(x, out, weight, fin, fout, bias, frozenset(nodes + lead))


def _data_input(g: Graph, k: int) -> str | None:
    data = [n for n in g.nodes[k].input if n and g.is_data(n)]
    return data[0] if len(data) == 1 else None


def strip_reshapes(g: Graph, value: str) -> tuple[str, list[int]]:
    """``value`` traced back through reshapes that keep the last axis: (the value before, the nodes)."""
    nodes = []
    k = _producer(g, value)
    while k is not None and keeps_last_axis(g, k) and g.is_data(g.nodes[k].input[0]):
        nodes.append(k)
        value = g.nodes[k].input[0]
        k = _producer(g, value)
    return value, nodes


def unit_reading(g: Graph, value: str) -> Unit | None:
    """The linear unit that reads ``value`` (through reshapes that keep the last axis), when
    ``value`` has one reader."""
    seen = value
    while True:
        readers = g.consumers.get(seen, [])
        if len(readers) != 1:
            return None
        k, slot = readers[0]
        if matmul_weight(g, k) is not None and slot == 0:
            break
        if not keeps_last_axis(g, k):
            return None
        seen = g.nodes[k].output[0]
    end = g.nodes[k].output[0]
    while True:
        readers = g.consumers.get(end, [])
        if len(readers) != 1:
            break
        j, _ = readers[0]
        node = g.nodes[j]
        if node.op_type in ("Reshape", "Identity", "Cast") and keeps_last_axis(g, j):
            end = node.output[0]
        elif node.op_type == "Add" and _bias(g, j, matmul_weight(g, k)[2])[0] is not None:
            end = node.output[0]
        else:
            break
    unit = unit_ending_at(g, end)
    return unit if unit is not None and k in unit.nodes else None
