"""The network spec format (YAML) -> the graph IR. Pure: text in, :class:`Network` out.

See docs/network-spec.md for the format. Every mistake raises :class:`DnnplanError` naming the
file, the layer, the field and the YAML line.
"""

from __future__ import annotations

import difflib
import heapq
from dataclasses import dataclass
from typing import Any

import yaml

from networks.errors import DnnplanError
from networks.expr import ExprError, substitute
from networks.ir import DTYPE_BYTES, InputSpec, Layer, Network
from networks.ops.base import REQUIRED, ShapeError, coerce
from networks.ops.catalogue import OPS

TOP_KEYS = ("name", "description", "inputs", "blocks", "layers")
INPUT_KEYS = ("shape", "dtype")
BLOCK_KEYS = ("params", "layers", "description")
LAYER_KEYS = ("name", "op", "inputs", "when")
USE_KEYS = ("use", "name", "args", "repeat", "start", "inputs", "when")
BLOCK_INPUT = "$input"
MAX_NESTING = 8
MAX_ENTRIES = 20_000  # layer and block entries visited while expanding (guards runaway repeats)


class _LDict(dict):
    """A YAML mapping that remembers the line it started on."""

    line: int | None = None


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> _LDict:
    explicit = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)  # merged pairs ('<<: *anchor') come first; explicit keys override them
    merged = len(node.value) - explicit
    out = _LDict()
    out.line = node.start_mark.line + 1
    seen: set[str] = set()
    for k, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(None, None, f"keys must be text, got {key!r}",
                                                    key_node.start_mark)
        if k >= merged and key in seen:
            err = yaml.constructor.ConstructorError(None, None, f"key '{key}' appears twice",
                                                    key_node.start_mark)
            err.field = key
            raise err
        if k >= merged:
            seen.add(key)
        try:
            out[key] = loader.construct_object(value_node, deep=True)
        except ValueError as err:  # a value the resolver recognised but cannot build: 2020-13-45
            raise yaml.constructor.ConstructorError(None, None, f"cannot read the value of '{key}': {err}",
                                                    value_node.start_mark) from None
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _suggest(word: str, options) -> str | None:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else None


@dataclass
class _Raw:
    name: str
    op: str
    inputs: list[str]
    params: dict[str, Any]
    line: int | None


class _Parser:
    def __init__(self, source: str):
        self.source = source
        self.blocks: dict[str, _LDict] = {}
        self.aliases: dict[str, str] = {}
        self.raws: list[_Raw] = []
        self.entries = 0

    def fail(self, message: str, *, line=None, layer=None, field=None, hint=None) -> DnnplanError:
        return DnnplanError(message, file=self.source, line=line, layer=layer, field=field, hint=hint)

    def check_keys(self, entry: dict, allowed, what: str, layer=None) -> None:
        for key in entry:
            if key not in allowed:
                raise self.fail(f"unknown key '{key}' in {what}", line=entry.line if isinstance(entry, _LDict) else None,
                                layer=layer, field=key,
                                hint=_suggest(key, allowed) or f"allowed: {', '.join(allowed)}")

    def sub(self, value, env, *, line, layer, field):
        try:
            return substitute(value, env)
        except ExprError as err:
            raise self.fail(str(err), line=line, layer=layer, field=field) from None
        except (TypeError, ValueError, ArithmeticError) as err:
            raise self.fail(f"template expression failed: {err}", line=line, layer=layer, field=field) from None

    def expand(self, entries, env: dict, prefix: str, prev: str | None, block_input: str | None,
               depth: int, where: str, field: str = "layers", line: int | None = None) -> str | None:
        if not isinstance(entries, list) or not entries:
            raise self.fail(f"'layers' of {where} must be a non-empty list, got {entries!r}", line=line,
                            layer=prefix or None, field=field)
        local: dict[str, str] = {}
        for entry in entries:
            if not isinstance(entry, _LDict):
                raise self.fail(f"each entry of 'layers' in {where} must be a mapping, got {entry!r}",
                                line=line, layer=prefix or None, field=field)
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                raise self.fail(f"the spec expands to more than {MAX_ENTRIES} layers", line=entry.line,
                                layer=prefix or None, field="repeat", hint="check the 'repeat' counts")
            line = entry.line
            if "use" in entry:
                prev = self.expand_use(entry, env, prefix, prev, block_input, local, depth)
                continue
            name = entry.get("name")
            if name is None:
                raise self.fail("a layer needs a 'name'", line=line, field="name")
            name = self.sub(name, env, line=line, layer=str(name), field="name")
            if isinstance(name, int) and not isinstance(name, bool):  # name: "{i}", as block uses allow
                name = str(name)
            if not isinstance(name, str) or not name:
                raise self.fail(f"a layer name must be text, got {name!r}", line=line, field="name")
            full = f"{prefix}.{name}" if prefix else name
            # the op and the keys are checked even where 'when' skips the layer
            op = entry.get("op")
            if op is None:
                raise self.fail("a layer needs an 'op'", line=line, layer=full, field="op")
            if not isinstance(op, str):
                raise self.fail(f"'op' must be an op name, got {op!r}", line=line, layer=full, field="op",
                                hint=f"known ops: {', '.join(sorted(OPS))}")
            if op not in OPS:
                raise self.fail(f"unknown op '{op}'", line=line, layer=full, field="op",
                                hint=_suggest(op, OPS) or f"known ops: {', '.join(sorted(OPS))}")
            allowed = LAYER_KEYS + tuple(prm.name for prm in OPS[op].params)
            self.check_keys(entry, allowed, f"{op} layer", full)
            if "when" in entry:
                cond = self.sub(entry["when"], env, line=line, layer=full, field="when")
                if not isinstance(cond, bool):
                    raise self.fail(f"'when' must be true or false, got {cond!r}", line=line, layer=full, field="when")
                if not cond:
                    continue
            params = {k: self.sub(v, env, line=line, layer=full, field=k)
                      for k, v in entry.items() if k not in LAYER_KEYS}
            refs = self.sub(entry.get("inputs"), env, line=line, layer=full, field="inputs")
            if refs is None:
                if prev is None:
                    raise self.fail("the first layer needs 'inputs' naming a network input",
                                    line=line, layer=full, field="inputs")
                refs = [prev]
            elif isinstance(refs, str):
                refs = [refs]
            if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
                raise self.fail(f"'inputs' must be a layer name or a list of names, got {refs!r}",
                                line=line, layer=full, field="inputs")
            resolved = [self.resolve(r, local, block_input, line, full) for r in refs]
            self.raws.append(_Raw(full, op, resolved, params, line))
            local[name] = full
            prev = full
        return prev

    def resolve(self, ref: str, local: dict, block_input: str | None, line, layer) -> str:
        if ref == BLOCK_INPUT:
            if block_input is None:
                raise self.fail(f"'{BLOCK_INPUT}' only means something inside a block", line=line,
                                layer=layer, field="inputs")
            return block_input
        return local.get(ref, ref)

    def expand_use(self, entry: _LDict, env, prefix, prev, block_input, local, depth) -> str | None:
        line = entry.line
        label = str(entry.get("name", entry["use"]))
        self.check_keys(entry, USE_KEYS, f"block use '{label}'", label)
        if depth >= MAX_NESTING:
            raise self.fail(f"blocks nest deeper than {MAX_NESTING} levels (a block that uses itself?)",
                            line=line, layer=label, field="use")
        use = entry["use"]
        if not isinstance(use, str) or use not in self.blocks:
            raise self.fail(f"unknown block '{use}'", line=line, layer=label, field="use",
                            hint=_suggest(use, self.blocks) or
                            f"defined blocks: {', '.join(self.blocks) or 'none'}")
        block = self.blocks[use]
        if "when" in entry:
            cond = self.sub(entry["when"], env, line=line, layer=label, field="when")
            if cond is not True and cond is not False:
                raise self.fail(f"'when' must be true or false, got {cond!r}", line=line, layer=label, field="when")
            if not cond:
                return prev
        repeat = self.sub(entry.get("repeat", 1), env, line=line, layer=label, field="repeat")
        start = self.sub(entry.get("start", 0), env, line=line, layer=label, field="start")
        for key, val in (("repeat", repeat), ("start", start)):
            if isinstance(val, bool) or not isinstance(val, int) or val < (1 if key == "repeat" else 0):
                raise self.fail(f"'{key}' must be a {'positive' if key == 'repeat' else 'non-negative'} "
                                f"integer, got {val!r}", line=line, layer=label, field=key)
        if repeat > MAX_ENTRIES:
            raise self.fail(f"'repeat' must be at most {MAX_ENTRIES}, got {repeat}", line=line, layer=label,
                            field="repeat")
        name_t = entry.get("name")
        if not isinstance(name_t, str) or not name_t:
            raise self.fail("a block use needs a 'name' (the prefix of its layers' names)", line=line,
                            layer=label, field="name")
        if repeat > 1 and "{" not in name_t:
            raise self.fail(f"a repeated block's name must contain a template such as '{{i}}', got '{name_t}'",
                            line=line, layer=label, field="name", hint=f"for example '{name_t}{{i}}'")
        args_t = entry.get("args", {}) or {}
        if not isinstance(args_t, dict):
            raise self.fail("'args' must be a mapping", line=line, layer=label, field="args")
        params = block.get("params") or {}  # checked in parse_network: names or a mapping
        defaults = dict(params) if isinstance(params, dict) else {p: REQUIRED for p in params}
        for key in args_t:
            if key not in defaults:
                raise self.fail(f"block '{use}' has no parameter '{key}'", line=line, layer=label, field=key,
                                hint=_suggest(key, defaults) or f"its parameters: {', '.join(defaults) or 'none'}")
        if entry.get("inputs") is not None:
            ref = self.sub(entry["inputs"], env, line=line, layer=label, field="inputs")
            if isinstance(ref, list) and len(ref) == 1:
                ref = ref[0]
            if not isinstance(ref, str):
                raise self.fail("a block takes one input: 'inputs' must name one layer", line=line,
                                layer=label, field="inputs")
            inp = self.resolve(ref, local, block_input, line, label)
        else:
            inp = prev
        if inp is None:
            raise self.fail("the first block needs 'inputs' naming a network input", line=line,
                            layer=label, field="inputs")
        for i in range(start, start + repeat):
            ienv = dict(env, i=i)
            name = self.sub(name_t, ienv, line=line, layer=label, field="name")
            benv = {k: self.sub(v, ienv, line=line, layer=str(name), field=k) for k, v in args_t.items()}
            for k, v in defaults.items():  # a default may be a template over the block's own parameters
                if k not in benv and v is not REQUIRED:
                    benv[k] = self.sub(v, dict(benv, i=i), line=block.line, layer=str(name), field=k)
            missing = [k for k, v in defaults.items() if v is REQUIRED and k not in benv]
            if missing:
                raise self.fail(f"block '{use}' needs argument(s) {', '.join(missing)}", line=line,
                                layer=str(name), field="args")
            benv["i"] = i
            full = f"{prefix}.{name}" if prefix else str(name)
            out = self.expand(block["layers"], benv, full, inp, inp, depth + 1, f"block '{use}'",
                              f"blocks.{use}.layers", block.line)
            self.aliases[full] = out
            local[str(name)] = out
            inp = out
        return inp


def _load_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader derives from SafeLoader
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        raise DnnplanError(f"not valid YAML: {err.problem or err.context or err}", file=source,
                           line=line, field=getattr(err, "field", None)) from None
    except yaml.YAMLError as err:  # ReaderError (a control character) has no mark but a multi-line text
        raise DnnplanError(f"not valid YAML: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
                           file=source) from None
    except ValueError as err:  # a value the YAML resolver recognised but cannot build: 2020-13-01, a 5000-digit int
        raise DnnplanError(f"not valid YAML: {err}", file=source) from None
    except RecursionError:
        raise DnnplanError("not valid YAML: it nests too deeply", file=source) from None


def _parse_inputs(doc: _LDict, p: _Parser) -> tuple[InputSpec, ...]:
    raw = doc.get("inputs")
    if not isinstance(raw, _LDict) or not raw:
        raise p.fail("'inputs' must map each input's name to its shape, e.g. "
                     "'inputs: {image: {shape: [3, 224, 224]}}'", line=doc.line, field="inputs")
    out = []
    for name, spec in raw.items():
        if isinstance(spec, list):
            spec = _LDict(shape=spec)
            spec.line = raw.line
        if not isinstance(spec, _LDict):
            raise p.fail(f"input '{name}' must be a mapping with 'shape' (and 'dtype')", line=raw.line,
                         field=f"inputs.{name}")
        p.check_keys(spec, INPUT_KEYS, f"input '{name}'")
        shape = spec.get("shape")
        if (not isinstance(shape, list) or not shape or
                not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape)):
            raise p.fail(f"input '{name}' needs a 'shape' of positive integers (per sample, no batch), "
                         f"got {shape!r}", line=spec.line, field=f"inputs.{name}.shape")
        dtype = spec.get("dtype", "float32")
        if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
            raise p.fail(f"input '{name}' has unknown dtype {dtype!r}", line=spec.line,
                         field=f"inputs.{name}.dtype", hint=f"one of {', '.join(DTYPE_BYTES)}")
        out.append(InputSpec(str(name), tuple(shape), dtype))
    return tuple(out)


def _toposort(raws: list[_Raw], inputs: set[str], p: _Parser) -> list[_Raw]:
    by_name: dict[str, _Raw] = {}
    for raw in raws:
        if raw.name in by_name or raw.name in inputs:
            raise p.fail(f"the name '{raw.name}' is used twice", line=raw.line, layer=raw.name, field="name",
                         hint="layer names must be unique")
        by_name[raw.name] = raw
    for alias in p.aliases:
        if alias in by_name or alias in inputs:
            raw = by_name.get(alias)
            raise p.fail(f"the name '{alias}' is used twice (a block instance and a layer or input)",
                         line=raw.line if raw else None, layer=alias, field="name",
                         hint="layer names must be unique")

    def unalias(ref: str) -> str:
        seen = set()
        while ref not in by_name and ref in p.aliases and ref not in seen:  # an alias may name an alias
            seen.add(ref)
            ref = p.aliases[ref]
        return ref

    for raw in raws:
        raw.inputs = [unalias(r) for r in raw.inputs]
        for ref in raw.inputs:
            if ref not in by_name and ref not in inputs:
                raise p.fail(f"input '{ref}' is not a layer or network input", line=raw.line, layer=raw.name,
                             field="inputs", hint=_suggest(ref, list(by_name) + list(inputs)))
            if ref == raw.name:
                raise p.fail("a layer cannot read its own output", line=raw.line, layer=raw.name, field="inputs")
    # stable topological order: always take the earliest ready layer in file order
    position = {raw.name: k for k, raw in enumerate(raws)}
    waiting = {raw.name: sum(1 for i in raw.inputs if i in by_name) for raw in raws}
    readers: dict[str, list[str]] = {}
    for raw in raws:
        for ref in raw.inputs:
            if ref in by_name:
                readers.setdefault(ref, []).append(raw.name)
    heap = [position[n] for n, count in waiting.items() if count == 0]
    heapq.heapify(heap)
    order: list[_Raw] = []
    while heap:
        raw = raws[heapq.heappop(heap)]
        order.append(raw)
        for reader in readers.get(raw.name, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(heap, position[reader])
    if len(order) < len(raws):
        done = {raw.name for raw in order} | set(inputs)
        stuck = next(raw for raw in raws if raw.name not in done)
        cycle = _find_cycle(stuck, by_name, done)
        raise p.fail(f"the layers form a cycle: {' -> '.join(cycle)}", line=stuck.line, layer=stuck.name,
                     field="inputs", hint="a network must be a DAG")
    return order


def _find_cycle(start: _Raw, by_name: dict[str, _Raw], done: set[str]) -> list[str]:
    path, seen, node = [], {}, start
    while node.name not in seen:
        seen[node.name] = len(path)
        path.append(node.name)
        nxt = next(i for i in node.inputs if i not in done)
        node = by_name[nxt]
    return path[seen[node.name]:] + [node.name]


def _one_line(text: str | None) -> str | None:
    """Escape line breaks and other control characters so an error stays on one line."""
    if text is None:
        return None
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in str(text))


def parse_network(text: str, source: str = "<spec>") -> Network:
    """Parse and validate a network spec; raise DnnplanError on any mistake."""
    try:
        return _parse(text, source)
    except DnnplanError as err:
        raise DnnplanError(_one_line(err.bare), file=_one_line(err.file or source), layer=_one_line(err.layer),
                           field=_one_line(err.field), line=err.line, hint=_one_line(err.hint)) from None


def _parse(text: str, source: str) -> Network:
    doc = _load_yaml(text, source)
    p = _Parser(source)
    if not isinstance(doc, _LDict):
        raise p.fail("a network spec must be a YAML mapping with 'name', 'inputs' and 'layers'")
    p.check_keys(doc, TOP_KEYS, "the network spec")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise p.fail("the spec needs a 'name'", line=doc.line, field="name")
    inputs = _parse_inputs(doc, p)
    blocks = doc.get("blocks")
    if blocks is None:
        blocks = _LDict()
    if not isinstance(blocks, _LDict):
        raise p.fail("'blocks' must map block names to {params, layers}", line=doc.line, field="blocks")
    for bname, block in blocks.items():
        if not isinstance(block, _LDict) or "layers" not in block:
            raise p.fail(f"block '{bname}' must be a mapping with 'layers' (and 'params')", line=blocks.line,
                         field=f"blocks.{bname}")
        p.check_keys(block, BLOCK_KEYS, f"block '{bname}'")
        params = block.get("params")
        if params is not None and (not isinstance(params, (list, dict)) or
                                   not all(isinstance(k, str) and k for k in params)):
            raise p.fail(f"'params' of block '{bname}' must be a list of names or a mapping of defaults",
                         line=block.line, field=f"blocks.{bname}.params")
    p.blocks = dict(blocks)
    if "layers" not in doc:
        raise p.fail("the spec needs 'layers'", line=doc.line, field="layers")
    p.expand(doc["layers"], {}, "", inputs[0].name, None, 0, "the network", "layers", doc.line)
    order = _toposort(p.raws, {i.name for i in inputs}, p)
    return _build(name, inputs, order, p)


def _build(name: str, inputs: tuple[InputSpec, ...], order: list[_Raw], p: _Parser) -> Network:
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
            if raw.op == "linear" and params.get("tied_to"):
                _check_tied(params, in_shapes, by_name)
            wshapes = op.weights(params, in_shapes)
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
