"""Mapping an ONNX graph node by node to the spec's layers: the walk, the layers it emits and the
activations each ONNX value stands for.

Every node that reads the input data is mapped by its op type's converter
(:data:`networks.importers.onnx.convert.CONVERTERS`); nodes that compute only from constants and
shapes are left out (their values are read where a converter needs them); the nodes of an attention
region (:mod:`networks.importers.onnx.attention`) become one ``attention`` layer. Each layer's
output shape is worked out by the op catalogue's own shape rule and checked against the shape ONNX
infers for the node, so a mapping that would change the model is refused at the node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from networks.errors import DnnplanError, short
from networks.importers.onnx.model_graph import Graph
from networks.importers.values import Val
from networks.ops.base import REQUIRED, ShapeError, coerce, prod
from networks.ops.catalogue import OPS

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass(frozen=True)
class Act:
    """What an ONNX value is in the spec: layer (or input) ``name``'s output, per-sample ``shape``."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass
class Rec:
    """One layer of the spec being written."""

    name: str
    op: str
    inputs: list[str]
    params: dict[str, Any]
    note: str
    shape: tuple[int, ...]
    dtype: str
    node: int | None = None


@dataclass
class Mapper:
    """The walk's state: the graph, the layers so far, and what each ONNX value stands for."""

    g: Graph
    recs: list[Rec] = field(default_factory=list)
    acts: dict[str, Act] = field(default_factory=dict)
    params_used: dict[str, int] = field(default_factory=dict)  # trainable weight -> elements
    names: set[str] = field(default_factory=set)
    softmax_out: set[str] = field(default_factory=set)  # values that are a softmax of the logits
    owner: dict[str, str] = field(default_factory=dict)  # weight -> the layer that holds it
    pending: list[str] = field(default_factory=list)  # weights used by the layer being emitted
    misses: dict[int, str] = field(default_factory=dict)  # Softmax/Attention node -> why it is no attention

    def act(self, value: str, k: int) -> Act:
        if value not in self.acts:
            raise self.g.fail(k, f"reads {short(value)}, which no mapped layer makes")
        return self.acts[value]

    def data_inputs(self, k: int) -> list[str]:
        return [n for n in self.g.nodes[k].input if n and self.g.is_data(n)]

    def alias(self, k: int, value: str | None = None) -> None:
        """The node's output is its (only) data input: Identity, a regrouping of leading axes."""
        (src,) = self.data_inputs(k) if value is None else [value]
        self.acts[self.g.nodes[k].output[0]] = self.act(src, k)

    def use(self, weight: str, trainable: bool = True, k: int | None = None) -> tuple[int, ...]:
        """Count ``weight`` as a parameter of the layer being emitted (``trainable``: not a running
        statistic); a weight already held by another layer is refused (only a tied LM head shares one,
        and :func:`networks.importers.onnx.convert.linear` says so itself)."""
        if weight in self.owner and k is not None:
            raise self.g.fail(k, f"uses the weight {short(weight)} of layer '{self.owner[weight]}' again; "
                              "layers sharing weights (other than a tied LM head) are not expressible")
        dims = self.g.weights[weight]
        if trainable:
            self.params_used[weight] = prod(dims)
        self.pending.append(weight)
        return dims

    def unique(self, base: str) -> str:
        name = _UNSAFE.sub("_", base).strip("._-") or "layer"
        if name[0].isdigit():
            name = "n" + name
        got, n = name, 1
        while got in self.names:
            n += 1
            got = f"{name}_{n}"
        self.names.add(got)
        return got

    def emit(self, k: int | None, op: str, inputs: list[str], params: dict[str, Any], note: str = "",
             name: str | None = None, out: str | None = None) -> Rec:
        """Add a layer of ``op`` reading ``inputs`` (ONNX values); its output stands for ``out``
        (default: node ``k``'s first output)."""
        acts = [self.act(v, k) for v in inputs]
        shape, dtype = self._infer(k, op, params, acts)
        rec = Rec(self.unique(name or self._name(k, op)), op, [a.name for a in acts], params, note, shape, dtype, k)
        self.recs.append(rec)
        for w in self.pending:
            self.owner.setdefault(w, rec.name)
        self.pending.clear()
        value = out if out is not None else (self.g.nodes[k].output[0] if k is not None else None)
        if value is not None:
            self._check_shape(k, value, shape)
            self.acts[value] = Act(rec.name, shape, dtype)
        return rec

    def _name(self, k: int | None, op: str) -> str:
        if k is None:
            return op
        node = self.g.nodes[k]
        weights = [self.g.weight_of(n) for n in node.input[1:] if n]
        named = [w[0] for w in weights if w is not None and len(w[1]) >= 2]
        if named:
            return re.sub(r"\.(weight|kernel|w)$", "", named[0])
        parts = [p for p in (node.name or op).split("/") if p]
        if len(parts) > 1 and parts[-1] == node.op_type:
            parts.pop()
        parts = [p for i, p in enumerate(parts) if not (i + 1 < len(parts) and parts[i + 1].startswith(p))]
        return re.sub(r"^node_", "", ".".join(parts)) or op

    def _infer(self, k: int | None, op: str, params: dict[str, Any], acts: list[Act]):
        opdef = OPS[op]
        full = {}
        try:
            for prm in opdef.params:
                raw = params.get(prm.name)
                raw = raw.value if isinstance(raw, Val) else raw
                if raw is None and prm.default is REQUIRED:
                    raise ShapeError(f"{op} needs '{prm.name}'", prm.name)
                raw = prm.default if raw is None else raw
                full[prm.name] = None if raw is None else coerce(prm, raw)
            return opdef.infer(full, tuple(a.shape for a in acts), tuple(a.dtype for a in acts))
        except ShapeError as err:
            raise self._fail(k, f"maps to a {op} layer that cannot take it: {err.bare}") from None

    def _check_shape(self, k: int | None, value: str, shape: tuple[int, ...]) -> None:
        got = self.g.shape(value)
        if got is None or k is None:
            return
        if prod(got) != self.g.batch * prod(shape) or (got and shape and got[-1] != shape[-1]):
            raise self._fail(k, f"the {short(tuple(shape))} per sample it maps to differs from the graph's "
                             f"{short(tuple(got))}")

    def _fail(self, k: int | None, message: str) -> DnnplanError:
        return self.g.fail(k, message) if k is not None else DnnplanError(message, file=self.g.source)


Converter = Callable[[Mapper, int], None]


def walk(m: Mapper, converters: dict[str, Converter], regions: dict[int, Any],
         attention: Callable[[Mapper, Any], None]) -> None:
    """Map every data node in graph order; ``regions`` maps each attention region's nodes to it."""
    for k, node in enumerate(m.g.nodes):
        region = regions.get(k)
        if region is not None:
            if k == region.last:
                attention(m, region)
            continue
        if not any(m.g.is_data(n) for n in node.output if n):
            continue  # computes constants or shapes: read where a converter needs them
        convert = converters.get(node.op_type)
        if convert is None:
            raise m.g.fail(k, f"op {node.op_type}{'' if node.domain in ('', 'ai.onnx') else ' (' + node.domain + ')'} "
                           "has no counterpart in the op catalogue", hint=_hint(m, k))
        convert(m, k)


def _hint(m: Mapper, k: int) -> str:
    """Why the first attention after node ``k`` that did not map did not, else where the mapped ops are listed."""
    later = sorted(j for j in m.misses if j > k)
    if later:
        j = later[0]
        return f"{m.g.nodes[j].op_type} {short(m.g.label(j), 40)} after it is not read as attention: {m.misses[j]}"
    return "docs/network-spec.md, 'Importing a model', lists the ops that map"
