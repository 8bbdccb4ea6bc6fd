"""The network spec format (YAML) -> the graph IR. Pure: text in, :class:`Network` out.

See docs/network-spec.md for the format. Every mistake raises :class:`DnnplanError` naming the
file, the layer, the field and the YAML line. The steps: :mod:`networks.spec_yaml` reads the YAML,
:mod:`networks.spec_expand` expands templates and blocks into raw layers, :mod:`networks.spec_order`
orders them, and this module checks the top level and builds the layers (shapes, parameters).
"""

from __future__ import annotations

from networks.errors import DnnplanError, short
from networks.ir import DTYPE_BYTES, FLOAT_DTYPES, InputSpec, Layer, Network
from networks.ops.base import MAX_ELEMENTS, MAX_INT, REQUIRED, ShapeError, coerce, prod
from networks.ops.catalogue import OPS
from networks.spec_expand import Parser, Raw
from networks.spec_order import toposort
from networks.spec_yaml import LDict, load_yaml

TOP_KEYS = ("name", "description", "inputs", "blocks", "layers")
INPUT_KEYS = ("shape", "dtype")
BLOCK_KEYS = ("params", "layers", "description")


def _parse_inputs(doc: LDict, p: Parser) -> tuple[InputSpec, ...]:
    raw = doc.get("inputs")
    if not isinstance(raw, LDict) or not raw:
        raise p.fail("'inputs' must map each input's name to its shape, e.g. "
                     "'inputs: {image: {shape: [3, 224, 224]}}'", line=doc.line, field="inputs")
    out = []
    for name, spec in raw.items():
        if isinstance(spec, list):
            spec = LDict(shape=spec)
            spec.line = raw.line
        if not isinstance(spec, LDict):
            raise p.fail(f"input '{name}' must be a mapping with 'shape' (and 'dtype')", line=raw.line,
                         field=f"inputs.{name}")
        p.check_keys(spec, INPUT_KEYS, f"input '{name}'")
        shape = spec.get("shape")
        if (not isinstance(shape, list) or not shape or
                not all(isinstance(s, int) and not isinstance(s, bool) and 0 < s <= MAX_INT for s in shape)):
            raise p.fail(f"input '{name}' needs a 'shape' of positive integers up to 2^31 (per sample, no batch), "
                         f"got {short(shape)}", line=spec.line, field=f"inputs.{name}.shape")
        dtype = spec.get("dtype", "float32")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise p.fail(f"input '{name}' has unknown dtype {short(dtype)}", line=spec.line,
                         field=f"inputs.{name}.dtype", hint=f"one of {', '.join(DTYPE_BYTES)}")
        out.append(InputSpec(str(name), tuple(shape), dtype))
    return tuple(out)


def with_sequence(inputs: tuple[InputSpec, ...], seq: int, name: str, p: Parser, line: int) -> tuple[InputSpec, ...]:
    """``inputs`` with the token sequence ``seq`` long (``--seq``): a language model's one input of
    token ids, shape ``[S]``; any other network is refused in one line (a CNN has no sequence)."""
    if seq < 1 or seq > MAX_INT:
        raise p.fail(f"--seq must be a whole number from 1 to 2^31, got {seq}")
    tokens = [i for i in inputs if len(i.shape) == 1 and i.dtype not in FLOAT_DTYPES]
    if len(inputs) != 1 or not tokens:
        got = ", ".join(f"'{i.name}' {list(i.shape)} {i.dtype}" for i in inputs)
        raise p.fail(f"--seq {seq}: {name} takes no sequence of tokens (its input{'s' * (len(inputs) > 1)}: {got}); "
                     "--seq sets the tokens per sequence of a language model", line=line, field="inputs",
                     hint="leave --seq out")
    return (InputSpec(tokens[0].name, (seq,), tokens[0].dtype),)


def parse_network(text: str, source: str = "<spec>", seq: int | None = None) -> Network:
    """Parse and validate a network spec; raise DnnplanError on any mistake. ``seq``: the tokens per
    sequence of a language model, in place of the spec's (:func:`with_sequence`)."""
    try:
        return _parse(text, source, seq)
    except DnnplanError as err:
        raise err.located(file=err.file or source) from None


def _parse(text: str, source: str, seq: int | None = None) -> Network:
    doc = load_yaml(text, source)
    p = Parser(source)
    if not isinstance(doc, LDict):
        raise p.fail("a network spec must be a YAML mapping with 'name', 'inputs' and 'layers'")
    if "network_hash" in doc and "network" in doc:  # a plan file (planner.plan.plan_file) where a spec goes
        net = doc.get("network")
        raise p.fail(f"a dnnplan plan (of {net}), not a network spec", line=doc.line,
                     hint=f"give the network: {net}; or predict the plan with `dnnplan predict {source}`")
    p.check_keys(doc, TOP_KEYS, "the network spec")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise p.fail("the spec needs a 'name'", line=doc.line, field="name")
    inputs = _parse_inputs(doc, p)
    if seq is not None:
        inputs = with_sequence(inputs, seq, name, p, doc.get("inputs").line)
    p.blocks = _parse_blocks(doc, p)
    if "layers" not in doc:
        raise p.fail("the spec needs 'layers'", line=doc.line, field="layers")
    p.expand(doc["layers"], {}, "", inputs[0].name, None, 0, "the network", "layers", doc.line)
    if not p.raws:
        raise p.fail("every layer is left out by its 'when': the network has no layer", line=doc.line,
                     field="layers", hint="make at least one layer's 'when' true")
    order = toposort(p.raws, {i.name for i in inputs}, p)
    return _build(name, inputs, order, p)


def _parse_blocks(doc: LDict, p: Parser) -> dict[str, LDict]:
    """The spec's ``blocks``: name -> {params, layers, description}, each checked."""
    blocks = doc.get("blocks")
    if blocks is None:
        blocks = LDict()
    if not isinstance(blocks, LDict):
        raise p.fail("'blocks' must map block names to {params, layers}", line=doc.line, field="blocks")
    for bname, block in blocks.items():
        if not isinstance(block, LDict) or "layers" not in block:
            raise p.fail(f"block '{bname}' must be a mapping with 'layers' (and 'params')", line=blocks.line,
                         field=f"blocks.{bname}")
        p.check_keys(block, BLOCK_KEYS, f"block '{bname}'")
        params = block.get("params")
        if params is not None and (not isinstance(params, (list, dict)) or
                                   not all(isinstance(k, str) and k for k in params)):
            raise p.fail(f"'params' of block '{bname}' must be a list of names or a mapping of defaults",
                         line=block.line, field=f"blocks.{bname}.params")
    return dict(blocks)


def _build(name: str, inputs: tuple[InputSpec, ...], order: list[Raw], p: Parser) -> Network:
    shapes = {i.name: i.shape for i in inputs}
    dtypes = {i.name: i.dtype for i in inputs}
    layers: list[Layer] = []
    by_name: dict[str, Layer] = {}
    for raw in order:
        op = OPS[raw.op]
        lo, hi = op.arity
        n = len(raw.inputs)
        if n < lo or (hi is not None and n > hi):
            want = f"exactly {lo}" if lo == hi else f"at least {lo}"
            raise p.fail(f"{raw.op} takes {want} input(s), got {n}", line=raw.line, layer=raw.name, field="inputs")
        params = {}
        try:
            for prm in op.params:
                if prm.name in raw.params:
                    params[prm.name] = coerce(prm, raw.params[prm.name])
                elif prm.default is REQUIRED:
                    raise ShapeError(f"{raw.op} needs '{prm.name}' ({prm.doc})", prm.name)
                else:
                    params[prm.name] = coerce(prm, prm.default) if prm.default is not None else None
            in_shapes = tuple(shapes[i] for i in raw.inputs)
            out_shape, dtype = op.infer(params, in_shapes, tuple(dtypes[i] for i in raw.inputs))
            if prod(out_shape) > MAX_ELEMENTS:
                raise ShapeError(f"its output {short(tuple(out_shape))} has more than 2^48 elements per sample")
            if raw.op == "linear" and params.get("tied_to"):
                _check_tied(params, in_shapes, by_name)
            wshapes = op.weights(params, in_shapes)
            if any(prod(w) > MAX_ELEMENTS for w in wshapes.values()):
                raise ShapeError("its weights have more than 2^48 elements")
        except ShapeError as err:
            raise DnnplanError(err.bare, file=p.source, line=raw.line, layer=raw.name, field=err.field,
                               hint=err.hint) from None
        layer = Layer(raw.name, raw.op, tuple(raw.inputs), tuple(sorted(params.items())), in_shapes,
                      tuple(out_shape), dtype, tuple(wshapes.items()), raw.line)
        layers.append(layer)
        by_name[raw.name] = layer
        shapes[raw.name] = layer.out_shape
        dtypes[raw.name] = dtype
    return Network(name, inputs, tuple(layers), p.source)


def _check_tied(params: dict, in_shapes, by_name: dict[str, Layer]) -> None:
    target = by_name.get(params["tied_to"])
    if target is None or target.op != "embedding":
        raise ShapeError(f"'{params['tied_to']}' is not an embedding layer before this one", "tied_to")
    vocab, dim = target.weight_shapes["tokens"]
    if params["features"] != vocab or in_shapes[0][-1] != dim:
        raise ShapeError(f"a layer tied to '{target.name}' must map {dim} features to {vocab}, not "
                         f"{in_shapes[0][-1]} to {params['features']}", "tied_to")
