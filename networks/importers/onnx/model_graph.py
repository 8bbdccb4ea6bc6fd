"""An ONNX graph read for import: its data inputs, its weights' shapes, every value's shape, and which
values depend on the input data (the rest are constants and shapes the graph computes with).

The model is parsed from bytes (read through :mod:`networks.reading`); weights kept in external
files are never loaded, and of the weights inside the file only the shapes are read. A graph
exported without weights (weights as graph inputs with declared shapes) reads the same. A dynamic
batch dimension is fixed to 1 and a dynamic sequence to ``--seq`` for ONNX's shape inference; the
per-sample shapes the spec needs are what is left once the batch is taken away.
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.errors import DnnplanError, short

#: ONNX element types -> the spec's dtypes.
DTYPES = {1: "float32", 10: "float16", 16: "bfloat16", 11: "float64", 7: "int64", 6: "int32"}
#: Constants up to this many elements are computed (a mask, a shape); a larger one, or one kept
#: in an external file, is never read.
SMALL_ELEMENTS = 1 << 20
#: Float initializers up to this many elements (a scale, an epsilon) keep their values in the model
#: given to shape inference; larger ones (weights) go as declared shapes, integer ones (shapes,
#: indices) always keep theirs.
SCALAR_ELEMENTS = 16
_FLOAT_TYPES = (1, 10, 11, 16)
#: (op type, input index) where a value is a weight, not data.
WEIGHT_SLOTS = {("Conv", 1), ("Conv", 2), ("Gemm", 1), ("Gemm", 2), ("MatMul", 1), ("Gather", 0),
                ("BatchNormalization", 1), ("BatchNormalization", 2), ("BatchNormalization", 3),
                ("BatchNormalization", 4), ("LayerNormalization", 1), ("LayerNormalization", 2),
                ("RMSNormalization", 1), ("Add", 1), ("Attention", 1), ("Attention", 2)}
#: Ops that only move or rename a tensor: a weight seen through them is still that weight.
LAYOUT_OPS = ("Identity", "Transpose", "Cast", "Reshape", "Unsqueeze", "Squeeze")
#: Ops whose output depends on their input's shape only, not on its values.
SHAPE_OPS = ("Shape", "Size")


def _sequence(rank: int, dtype: str) -> bool:
    """Whether an input's axis 1 is a sequence: token ids (batch, tokens), or (batch, tokens,
    features); a float input of (batch, features) has none (an MLP's 784 pixels)."""
    return rank == 3 or (rank == 2 and dtype.startswith("int"))


@dataclass(frozen=True)
class DataInput:
    name: str
    dims: tuple[int, ...]  # with the batch first, dynamic dimensions fixed
    dtype: str


def _onnx():
    import onnx  # noqa: PLC0415 - heavy (0.2 s): loaded only when an ONNX file is imported

    return onnx


def parse_model(data: bytes, source: str):
    """The ModelProto in ``data``; one line if it is not an ONNX model."""
    onnx = _onnx()
    try:
        model = onnx.ModelProto.FromString(data)
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError and friends: the file is not a model
        raise DnnplanError(f"not an ONNX model: {type(err).__name__}: {str(err)[:120] or 'cannot be parsed'}",
                           file=source, hint="give a .onnx file saved by torch.onnx.export or onnx.save") from None
    if not model.HasField("graph") or not model.graph.node:
        raise DnnplanError("not an ONNX model: it holds no graph (no nodes)", file=source,
                           hint="give a .onnx file saved by torch.onnx.export or onnx.save")
    return model


class Graph:
    """The graph's nodes, values, inputs, weights and shapes; ``where`` names a node for messages."""

    def __init__(self, model, source: str, seq: int | None):
        self.model, self.source = model, source
        g = model.graph
        self.nodes = list(g.node)
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = {}
        for k, node in enumerate(self.nodes):
            for out in node.output:
                if out:
                    self.producer[out] = k
            for slot, name in enumerate(node.input):
                if name:
                    self.consumers.setdefault(name, []).append((k, slot))
        self.initializers = {t.name: t for t in g.initializer}
        self.declared = {v.name: v for v in g.input if v.name not in self.initializers}
        self.weights: dict[str, tuple[int, ...]] = {n: tuple(t.dims) for n, t in self.initializers.items()}
        self.data_inputs = self._data_inputs(seq)
        self.outputs = [v.name for v in g.output]
        self.data = self._data_values()
        self.weighty = self._weight_values()
        self._const_cache: dict[str, object] = {}
        self.light = self._light_model({})
        self.shapes = self._infer_shapes(self._fold_constants())

    # --- naming nodes in messages ---------------------------------------------------------------

    def label(self, k: int) -> str:
        node = self.nodes[k]
        return node.name or f"#{k}"

    def where(self, k: int) -> str:
        """'node NAME (OP, node K of N, reading V from node M)' for messages."""
        node = self.nodes[k]
        first = next((n for n in node.input if n), None)
        came = ""
        if first is not None:
            src = self.producer.get(first)
            came = f", reading {short(first, 50)} from " + (f"node {short(self.label(src), 50)}" if src is not None
                                                            else "the graph's inputs")
        return f"node {short(self.label(k), 60)} ({node.op_type}, node {k + 1} of {len(self.nodes)}{came})"

    def fail(self, k: int, message: str, hint: str | None = None) -> DnnplanError:
        return DnnplanError(f"{self.where(k)}: {message}", file=self.source, hint=hint)

    # --- inputs ---------------------------------------------------------------------------------

    def _is_weight_input(self, name: str) -> bool:
        """A graph input every consumer reads as a weight (directly or through layout ops)."""
        seen, todo, slots = set(), [name], 0
        while todo:
            value = todo.pop()
            for k, slot in self.consumers.get(value, []):
                op = self.nodes[k].op_type
                if op in SHAPE_OPS:
                    continue
                if op in LAYOUT_OPS and slot == 0:
                    todo.extend(o for o in self.nodes[k].output if o not in seen)
                    seen.update(self.nodes[k].output)
                elif (op, slot) in WEIGHT_SLOTS:
                    slots += 1
                else:
                    return False
        return slots > 0

    def _data_inputs(self, seq: int | None) -> list[DataInput]:
        out = []
        for name, info in self.declared.items():
            dims = _dims(info) or []
            fixed = all(isinstance(d, int) and d > 0 for d in dims)
            if fixed and self._is_weight_input(name):  # a weight's shape is fixed; data has a batch axis
                self.weights[name] = tuple(dims)
                continue
            if name not in self.consumers:
                continue
            dtype = DTYPES.get(info.type.tensor_type.elem_type, f"type {info.type.tensor_type.elem_type}")
            shape = self._fixed(name, dims, seq, _sequence(len(dims), dtype))
            if len(shape) == 1 and dtype.startswith("float"):  # the batch alone: a sample of no features
                raise DnnplanError(f"input {short(name)} {list(dims)} has one axis, which dnnplan reads as the batch: "
                                   "its samples have no features", file=self.source,
                                   hint="export the model with a batch axis first (torch.onnx.export of an input "
                                   "shaped [N, features] does)")
            out.append(DataInput(name, shape, dtype))
        if not out:
            raise DnnplanError("the graph has no data input (every input is a weight)", file=self.source)
        if seq is not None and not any(_sequence(len(i.dims), i.dtype) for i in out):
            got = ", ".join(f"{short(i.name)} {list(i.dims)}" for i in out)
            raise DnnplanError(f"--seq {seq}: the graph takes no sequence (its inputs, batch first: {got}); --seq "
                               "sets the tokens per sequence of a language model", file=self.source,
                               hint="leave --seq out")
        return out

    def _fixed(self, name: str, dims: list, seq: int | None, sequence: bool) -> tuple[int, ...]:
        """``dims`` with the batch and (``sequence``: axis 1 is one) a dynamic sequence fixed."""
        fixed = []
        for axis, d in enumerate(dims):
            if isinstance(d, int) and d <= 0 and axis > 0:  # the batch (axis 0) is given when planned
                raise DnnplanError(f"input {short(name)} {list(dims)} has an axis of size {d} (axis {axis})",
                                   file=self.source, hint="export the model with its input's real shape")
            if isinstance(d, int) and d > 0:
                if axis == 1 and seq is not None and d != seq and sequence:
                    raise DnnplanError(f"--seq {seq} differs from input {short(name)} (its fixed sequence is {d})",
                                       file=self.source, hint="export the model with a dynamic sequence axis, or leave --seq out")
                fixed.append(d)
            elif axis == 0:
                fixed.append(1)  # the batch: given when the network is planned
            elif axis == 1 and seq is not None:
                fixed.append(seq)
            else:
                raise DnnplanError(f"input {short(name)} {list(dims)} has a dynamic dimension {axis} ({short(d)})",
                                   file=self.source, hint="dnnplan reads axis 0 as the batch and axis 1 as a "
                                   "dynamic sequence (--seq); other sizes must be fixed in the export")
        if not fixed:
            raise DnnplanError(f"input {short(name)} declares no axes (a scalar, or no shape at all); dnnplan needs a "
                               "batch axis first", file=self.source,
                               hint="export the model with its input's shape, batch first (torch.onnx.export does)")
        return tuple(fixed)

    @property
    def batch(self) -> int:
        return self.data_inputs[0].dims[0]

    # --- which values depend on the data ----------------------------------------------------------

    def _data_values(self) -> set[str]:
        data = {i.name for i in self.data_inputs}
        for node in self.nodes:
            if node.op_type in SHAPE_OPS:
                continue
            read = node.input[:1] if node.op_type == "CastLike" else node.input  # CastLike's second: its type only
            if any(n in data for n in read if n):
                data.update(o for o in node.output if o)
        return data

    def _weight_values(self) -> set[str]:
        """Values computed from weights that have no values here (weights given as graph inputs,
        large or external initializers): a transposed table, learned positions looked up."""
        onnx = _onnx()
        weighty = {n for n in self.weights if n not in self.initializers}
        weighty.update(n for n, t in self.initializers.items()
                       if _count(t.dims) > SMALL_ELEMENTS or t.data_location == onnx.TensorProto.EXTERNAL)
        for node in self.nodes:
            if any(n in weighty for n in node.input if n):
                weighty.update(o for o in node.output if o and o not in self.data)
        return weighty

    def is_data(self, value: str) -> bool:
        return value in self.data

    def _fold_constants(self) -> dict:
        """The constants the data nodes read (masks, shapes, scales), computed once, so that shape
        inference can see through them; each no larger than :data:`SMALL_ELEMENTS`."""
        wanted = sorted({v for node in self.nodes if any(o in self.data for o in node.output)
                         for v in node.input if v and v not in self.data and v not in self.weighty
                         and v not in self.initializers})
        if not wanted:
            return {}
        try:
            values = self._run(wanted, None)
        except DnnplanError:
            return {}  # left unknown: a converter that needs one says so at its node
        folded = {name: v for name, v in zip(wanted, values) if getattr(v, "size", SMALL_ELEMENTS + 1) <= SMALL_ELEMENTS}
        self._const_cache.update(folded)
        return folded

    def weight_of(self, value: str) -> tuple[str, tuple[int, ...], bool] | None:
        """(weight name, its dims, transposed) when ``value`` is a weight seen through layout ops."""
        transposed = False
        while value not in self.weights:
            k = self.producer.get(value)
            if k is None or self.nodes[k].op_type not in ("Identity", "Transpose", "Cast"):
                return None
            if self.nodes[k].op_type == "Transpose":
                transposed = not transposed
            value = self.nodes[k].input[0]
        return value, self.weights[value], transposed

    # --- shapes and constants ---------------------------------------------------------------------

    def _light_model(self, folded: dict):
        """The model with fixed input dims, big initializers replaced by declared inputs, and the
        ``folded`` constants as initializers in place of the nodes that computed them."""
        onnx = _onnx()
        g = self.model.graph
        helper = onnx.helper
        inputs = [helper.make_tensor_value_info(i.name, _elem(self.declared[i.name]), list(i.dims))
                  for i in self.data_inputs]
        inputs += [v for n, v in self.declared.items() if n in self.weights]
        small = []
        for name, t in self.initializers.items():
            keep = t.data_type not in _FLOAT_TYPES or _count(t.dims) <= SCALAR_ELEMENTS
            if keep and _count(t.dims) <= SMALL_ELEMENTS and t.data_location != onnx.TensorProto.EXTERNAL:
                small.append(t)
            else:
                inputs.append(helper.make_tensor_value_info(name, t.data_type, list(t.dims)))
        small += [onnx.numpy_helper.from_array(v, name) for name, v in folded.items()]
        nodes = [n for n in self.nodes if not all(o in folded for o in n.output if o)]
        graph = helper.make_graph(nodes, g.name or "graph", inputs, list(g.output), small)
        light = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        light.ir_version = self.model.ir_version
        return light

    def _infer_shapes(self, folded: dict) -> dict[str, tuple | None]:
        onnx = _onnx()
        if folded:
            self.light = self._light_model(folded)
        try:
            inferred = onnx.shape_inference.infer_shapes(self.light, strict_mode=False, data_prop=True)
        except Exception as err:  # noqa: BLE001 - onnx's InferenceError and friends
            raise DnnplanError(f"ONNX shape inference failed: {str(err).splitlines()[0][:200]}",
                               file=self.source, hint="check the model with onnx.checker.check_model") from None
        out = {}
        for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            dims = _dims(v)
            out[v.name] = tuple(dims) if dims is not None and all(isinstance(d, int) and d >= 0 for d in dims) else None
        return out

    def shape(self, value: str) -> tuple[int, ...] | None:
        return self.shapes.get(value)

    def const(self, value: str, k: int):
        """The value of a constant ``value`` (computed from constants and shapes), as a numpy array;
        node ``k`` (its reader) is named if it cannot be computed."""
        if value in self._const_cache:
            return self._const_cache[value]
        if self.is_data(value):
            raise self.fail(k, f"{short(value)} depends on the input data where a constant is needed")
        onnx = _onnx()
        if value in self.initializers:
            t = self.initializers[value]
            if _count(t.dims) > SMALL_ELEMENTS or t.data_location == onnx.TensorProto.EXTERNAL:
                raise self.fail(k, f"needs the value of {short(value)}, a large or external tensor")
            got = onnx.numpy_helper.to_array(t)
        else:
            got = self._evaluate(value, k)
        self._const_cache[value] = got
        return got

    def _readable(self, t) -> bool:
        return _count(t.dims) <= SMALL_ELEMENTS and t.data_location != _onnx().TensorProto.EXTERNAL

    def _evaluate(self, value: str, k: int):
        return self._run([value], k)[0]

    def _run(self, values: list[str], k: int | None) -> list:
        """``values`` computed by ONNX's reference evaluator from constants and the inputs' shapes."""
        import numpy as np  # noqa: PLC0415 - only for constant folding in an ONNX import
        from onnx.reference import ReferenceEvaluator  # noqa: PLC0415 - heavy: only when a constant must be computed

        sub, needed = self._subgraph(values, k)
        feeds = {i.name: np.zeros(i.dims, dtype=_np_dtype(i.dtype)) for i in self.data_inputs if i.name in needed}
        try:
            got = ReferenceEvaluator(sub).run(values, feeds)
        except Exception as err:  # noqa: BLE001 - any failure of the reference evaluator
            raise self._failure(k, f"cannot compute the constant {short(values[0])} it needs "
                                   f"({type(err).__name__})") from None
        return [np.asarray(x) for x in got]

    def _failure(self, k: int | None, message: str) -> DnnplanError:
        return self.fail(k, message) if k is not None else DnnplanError(message, file=self.source)

    def _subgraph(self, values: list[str], k: int | None):
        """The nodes computing ``values`` from constants and the inputs' shapes, as a model, and the
        names it reads."""
        onnx = _onnx()
        helper = onnx.helper
        value = values[0]
        todo, needed, picked = list(values), set(), set()
        while todo:
            name = todo.pop()
            if name in needed or not name:
                continue
            needed.add(name)
            src = self.producer.get(name)
            if src is not None:
                picked.add(src)
                todo.extend(self.nodes[src].input)
            elif name in self.weights and name not in self.initializers:
                raise self._failure(k, f"computing {short(value)} needs the weight {short(name)}, which has no values")
        light = {t.name: t for t in self.light.graph.initializer}
        inits = [light[n] if n in light else self.initializers[n] for n in needed
                 if n in light or (n in self.initializers and self._readable(self.initializers[n]))]
        big = [n for n in needed if n in self.initializers and not self._readable(self.initializers[n])]
        if big:
            raise self._failure(k, f"computing {short(value)} needs the large tensor {short(big[0])}")
        inputs = [helper.make_tensor_value_info(i.name, _elem(self.declared[i.name]), list(i.dims))
                  for i in self.data_inputs if i.name in needed]
        outs = [helper.make_tensor_value_info(v, 0, None) for v in values]
        graph = helper.make_graph([self.nodes[j] for j in sorted(picked)], "constant", inputs, outs, inits)
        sub = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        sub.ir_version = self.model.ir_version
        return sub, needed


def _dims(info) -> list | None:
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]


def _elem(info) -> int:
    return info.type.tensor_type.elem_type


def _count(dims) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _np_dtype(dtype: str) -> str:
    return {"bfloat16": "float32"}.get(dtype, dtype if not dtype.startswith("type") else "float32")
