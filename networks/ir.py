"""The graph IR: frozen dataclasses for a network, its inputs and its layers.

Shapes are *per sample* (the batch dimension is left out and given when a network is analysed);
batched tensors put the batch first, so a per-sample image ``(C, H, W)`` is ``(N, C, H, W)`` once
batched. Layers are stored in topological order and every input a layer names exists before it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

Shape = tuple[int, ...]

DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4}
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")


@dataclass(frozen=True)
class InputSpec:
    """A network input: its name, per-sample shape and element type."""

    name: str
    shape: Shape
    dtype: str = "float32"


#: what a Layer keeps once asked (never compared, copied or pickled): its unnamed twin and its hash
_UNNAMED, _HASH = "_unnamed", "_hash"
_ASKED = (_UNNAMED, _HASH)


@dataclass(frozen=True)
class Layer:
    """One node of the network graph, with everything shape inference found out about it."""

    name: str
    op: str
    inputs: tuple[str, ...]
    params: tuple[tuple[str, Any], ...]
    in_shapes: tuple[Shape, ...]
    out_shape: Shape
    dtype: str = "float32"
    weights: tuple[tuple[str, Shape], ...] = ()
    line: int | None = field(default=None, compare=False)

    @property
    def p(self) -> dict[str, Any]:
        """The op parameters (defaults filled in) as a plain dict."""
        return dict(self.params)

    @property
    def weight_shapes(self) -> dict[str, Shape]:
        return dict(self.weights)

    @property
    def has_weight_grad(self) -> bool:
        """Whether backward computes a weight gradient here: the layer's own weights, or those it
        borrows (``tied_to``: a tied LM head's gradient of the embedding table)."""
        return bool(self.weights) or bool(dict(self.params).get("tied_to"))

    def unnamed(self) -> "Layer":
        """The layer without its name, inputs and source line: equal for layers that cost the same
        (a transformer's blocks repeat one block's layers). Made once a layer, field by field
        rather than through ``replace`` (a fifth of its time), and kept on it: the planner asks it
        of every layer it prices, and the same object each time is found in its memos by identity."""
        got = self.__dict__.get(_UNNAMED)
        if got is None:
            got = object.__new__(Layer)
            got.__dict__.update({k: v for k, v in self.__dict__.items() if k not in _ASKED},
                                name="", inputs=(), line=None)
            object.__setattr__(self, _UNNAMED, got)
        return got

    def __hash__(self) -> int:
        """The hash of the fields that compare (the dataclass's own), kept on the layer after the
        first ask: the planner's memos hash each priced layer hundreds of times."""
        got = self.__dict__.get(_HASH)
        if got is None:
            got = hash((self.name, self.op, self.inputs, self.params, self.in_shapes, self.out_shape, self.dtype,
                        self.weights))
            object.__setattr__(self, _HASH, got)
        return got

    def __getstate__(self) -> dict:
        """The fields alone: what is kept (a string's hash differs from one process to the next) is
        made again where the layer is unpickled."""
        return {k: v for k, v in self.__dict__.items() if k not in _ASKED}

    @property
    def num_params(self) -> int:
        total = 0
        for _, shape in self.weights:
            n = 1
            for s in shape:
                n *= s
            total += n
        return total


#: op parameters added after plan files were written, with their defaults: left out of a network's
#: hash (:meth:`Network.content_hash`) at that default, so the plans written before them still load
LATER_PARAMS: dict[tuple[str, str], Any] = {("attention", "yarn"): False, ("moe", "act_clamp"): None}
#: parameters that change no cost nor memory, only the model a framework's launch file trains: never in
#: the hash, so a plan made before one was set (Llama 3's rotary base, Llama 3.1's rotary scaling) still names
#: the same network
UNPRICED_PARAMS = frozenset({("attention", "rotary_base"), ("attention", "rope_scaling")})
_KEPT = object()  # no default to leave out


@dataclass(frozen=True)
class Network:
    """A DAG of layers in topological order. The last layer is the network's output (its loss)."""

    name: str
    inputs: tuple[InputSpec, ...]
    layers: tuple[Layer, ...]
    source: str = ""

    def layer(self, name: str) -> Layer:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def index(self) -> dict[str, int]:
        """Layer name -> position in topological order."""
        return {layer.name: i for i, layer in enumerate(self.layers)}

    def input_spec(self, name: str) -> InputSpec | None:
        for spec in self.inputs:
            if spec.name == name:
                return spec
        return None

    def consumers(self) -> dict[str, tuple[str, ...]]:
        """Tensor name (a layer or an input) -> names of the layers that read it, in order."""
        out: dict[str, list[str]] = {spec.name: [] for spec in self.inputs}
        for layer in self.layers:
            out.setdefault(layer.name, [])
            for src in layer.inputs:
                out[src].append(layer.name)
        return {k: tuple(v) for k, v in out.items()}

    def edges(self) -> tuple[tuple[str, str, int], ...]:
        """Every (producer layer, consumer layer, input slot) between two layers (inputs excluded)."""
        names = {layer.name for layer in self.layers}
        return tuple((src, layer.name, slot) for layer in self.layers
                     for slot, src in enumerate(layer.inputs) if src in names)

    @property
    def num_params(self) -> int:
        return sum(layer.num_params for layer in self.layers)

    def with_param(self, op: str, key: str, value: Any) -> Network:
        """This network with parameter ``key`` set to ``value`` on every layer of ``op`` (a
        framework's choice the cost model reads off the layers: costmodel.choices.batch_norm,
        costmodel.choices.moe_dispatch)."""
        def mark(layer: Layer) -> Layer:
            if layer.op != op:
                return layer
            return replace(layer, params=tuple((k, v) for k, v in layer.params if k != key) + ((key, value),))

        return replace(self, layers=tuple(mark(layer) for layer in self.layers))

    def content_hash(self) -> str:
        """A short hash of everything that defines the network (not its file or comments); a
        parameter of :data:`LATER_PARAMS` at its default is left out, so a plan file written before
        the parameter existed still names the same network, and one of :data:`UNPRICED_PARAMS` always.
        Computed once a network (a plan search names it in every plan it makes: 11 ms each for Llama
        3.1 405B's layers)."""
        return self._content_hash

    @cached_property
    def _content_hash(self) -> str:
        canon = {"inputs": [[i.name, list(i.shape), i.dtype] for i in self.inputs],
                 "layers": [[l.name, l.op, list(l.inputs), [[k, repr(v)] for k, v in l.params
                                                            if LATER_PARAMS.get((l.op, k), _KEPT) != v
                                                            and (l.op, k) not in UNPRICED_PARAMS]]
                            for l in self.layers]}
        return hashlib.sha256(json.dumps(canon, sort_keys=True).encode()).hexdigest()[:16]
