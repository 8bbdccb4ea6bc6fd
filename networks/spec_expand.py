"""Expanding a network spec's ``layers`` into a flat list of raw layers: templates substituted,
``when`` applied, block uses instantiated (``repeat``, ``start``, ``args``) and names prefixed
(docs/network-spec.md, "Layers", "Block templates" and "Templates"). Every mistake is a
:class:`DnnplanError` naming the file, the layer, the field and the YAML line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from networks.errors import DnnplanError, did_you_mean, short
from networks.expr import ExprError, substitute
from networks.ops.base import REQUIRED
from networks.ops.catalogue import OPS
from networks.spec_yaml import LDict

LAYER_KEYS = ("name", "op", "inputs", "when")
USE_KEYS = ("use", "name", "args", "repeat", "start", "inputs", "when")
BLOCK_INPUT = "$input"
MAX_NESTING = 8
MAX_ENTRIES = 20_000  # layer and block entries visited while expanding (guards runaway repeats)


def suggest(word: str, options) -> str | None:
    """A "did you mean" hint: the closest of ``options`` to ``word``, or None."""
    close = did_you_mean(word, options)
    return f"did you mean '{close}'?" if close else None


@dataclass
class Raw:
    """A layer as the spec names it: full name, op, input references, unchecked parameters."""

    name: str
    op: str
    inputs: list[str]
    params: dict[str, Any]
    line: int | None


class Parser:
    """The state of one spec's expansion: its blocks, the raw layers so far, and the aliases a block
    instance's name stands for (its last layer)."""

    def __init__(self, source: str):
        self.source = source
        self.blocks: dict[str, LDict] = {}
        self.aliases: dict[str, str] = {}
        self.raws: list[Raw] = []
        self.entries = 0
        self.uses = 0  # 'use' entries expanded (blocks, repeated or not)

    def fail(self, message: str, *, line=None, layer=None, field=None, hint=None) -> DnnplanError:
        return DnnplanError(message, file=self.source, line=line, layer=layer, field=field, hint=hint)

    def check_keys(self, entry: dict, allowed, what: str, layer=None) -> None:
        for key in entry:
            if key not in allowed:
                raise self.fail(f"unknown key '{key}' in {what}", line=entry.line if isinstance(entry, LDict) else None,
                                layer=layer, field=key,
                                hint=suggest(key, allowed) or f"allowed: {', '.join(allowed)}")

    def sub(self, value, env, *, line, layer, field):
        try:
            return substitute(value, env)
        except ExprError as err:
            raise self.fail(str(err), line=line, layer=layer, field=field) from None
        except (TypeError, ValueError, ArithmeticError) as err:
            raise self.fail(f"template expression failed: {err}", line=line, layer=layer, field=field) from None

    def expand(self, entries, env: dict, prefix: str, prev: str | None, block_input: str | None,
               depth: int, where: str, field: str = "layers", line: int | None = None) -> str | None:
        """Expand a ``layers`` list; returns the name of its last layer (the list's output)."""
        if not isinstance(entries, list) or not entries:
            raise self.fail(f"'layers' of {where} must be a non-empty list, got {short(entries)}", line=line,
                            layer=prefix or None, field=field)
        local = self._ahead(entries, env, prefix)
        for entry in entries:
            if not isinstance(entry, LDict):
                raise self.fail(f"each entry of 'layers' in {where} must be a mapping, got {short(entry)}",
                                line=line, layer=prefix or None, field=field)
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                if self.uses:  # blocks repeated past the bound: their counts
                    raise self.fail(f"the spec expands to more than {MAX_ENTRIES} layers", line=entry.line,
                                    layer=prefix or None, field="repeat", hint="check the 'repeat' counts")
                raise self.fail(f"the spec lists more than {MAX_ENTRIES} layers, more than dnnplan plans",
                                line=entry.line, layer=prefix or None, field="layers",
                                hint="write a repeated block once under 'blocks' and 'use' it with 'repeat' "
                                     "(docs/network-spec.md), or plan a smaller network")
            line = entry.line
            if "use" in entry:
                prev = self.expand_use(entry, env, prefix, prev, block_input, local, depth)
            else:
                prev = self.expand_layer(entry, env, prefix, prev, block_input, local)
        return prev

    def _ahead(self, entries: list, env: dict, prefix: str) -> dict[str, str]:
        """The list's layers by name, each its full name, before any is expanded: a layer may read one
        of its own list written later (as at the top level), which resolves to this instance's first.
        A block used in the list takes its name as it is expanded (its output); a name that fails
        here fails where its entry is expanded, in order."""
        out: dict[str, str] = {}
        if not prefix:
            return out  # the top level's names are the layers' own
        for entry in entries:
            if isinstance(entry, LDict) and "use" not in entry and "name" in entry:
                try:
                    name = self._layer_name(entry, env)
                except DnnplanError:
                    continue
                out.setdefault(name, f"{prefix}.{name}")
        return out

    def resolve(self, ref: str, local: dict, block_input: str | None, line, layer) -> str:
        if ref == BLOCK_INPUT:
            if block_input is None:
                raise self.fail(f"'{BLOCK_INPUT}' only means something inside a block", line=line,
                                layer=layer, field="inputs")
            return block_input
        return local.get(ref, ref)

    def condition(self, entry: LDict, env, label: str) -> bool:
        """An entry's ``when`` (true without one)."""
        if "when" not in entry:
            return True
        cond = self.sub(entry["when"], env, line=entry.line, layer=label, field="when")
        if not isinstance(cond, bool):
            raise self.fail(f"'when' must be true or false, got {short(cond)}", line=entry.line, layer=label,
                            field="when")
        return cond

    # --- one layer ---------------------------------------------------------------------------------

    def expand_layer(self, entry: LDict, env, prefix, prev, block_input, local) -> str | None:
        """One layer entry; returns the new previous layer (unchanged when ``when`` skips it). Its
        name, op and keys are checked even where ``when`` skips the layer."""
        line = entry.line
        name = self._layer_name(entry, env)
        full = f"{prefix}.{name}" if prefix else name
        op = self._layer_op(entry, full)
        if not self.condition(entry, env, full):
            return prev
        params = {k: self.sub(v, env, line=line, layer=full, field=k)
                  for k, v in entry.items() if k not in LAYER_KEYS}
        refs = self._layer_refs(entry, env, prev, full)
        resolved = [self.resolve(r, local, block_input, line, full) for r in refs]
        self.raws.append(Raw(full, op, resolved, params, line))
        local[name] = full
        return full

    def _layer_name(self, entry: LDict, env) -> str:
        line = entry.line
        name = entry.get("name")
        if name is None:
            raise self.fail("a layer needs a 'name'", line=line, field="name")
        name = self.sub(name, env, line=line, layer=str(name), field="name")
        if isinstance(name, int) and not isinstance(name, bool):  # name: "{i}", as block uses allow
            name = str(name)
        if not isinstance(name, str) or not name:
            raise self.fail(f"a layer name must be text, got {short(name)}", line=line, field="name")
        return name

    def _layer_op(self, entry: LDict, full: str) -> str:
        line = entry.line
        op = entry.get("op")
        if op is None:
            raise self.fail("a layer needs an 'op'", line=line, layer=full, field="op")
        if not isinstance(op, str):
            raise self.fail(f"'op' must be an op name, got {short(op)}", line=line, layer=full, field="op",
                            hint=f"known ops: {', '.join(sorted(OPS))}")
        if op not in OPS:
            raise self.fail(f"unknown op '{op}'", line=line, layer=full, field="op",
                            hint=suggest(op, OPS) or f"known ops: {', '.join(sorted(OPS))}")
        allowed = LAYER_KEYS + tuple(prm.name for prm in OPS[op].params)
        self.check_keys(entry, allowed, f"{op} layer", full)
        return op

    def _layer_refs(self, entry: LDict, env, prev, full: str) -> list[str]:
        """The layer's ``inputs`` as a list of references (the previous layer when absent)."""
        line = entry.line
        refs = self.sub(entry.get("inputs"), env, line=line, layer=full, field="inputs")
        if refs is None:
            if prev is None:
                raise self.fail("the first layer needs 'inputs' naming a network input",
                                line=line, layer=full, field="inputs")
            refs = [prev]
        elif isinstance(refs, str):
            refs = [refs]
        if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
            raise self.fail(f"'inputs' must be a layer name or a list of names, got {short(refs)}",
                            line=line, layer=full, field="inputs")
        return refs

    # --- one block use -----------------------------------------------------------------------------

    def expand_use(self, entry: LDict, env, prefix, prev, block_input, local, depth) -> str | None:
        """One block use: the block's layers once per repeat, each instance reading the previous
        one's output; returns the last instance's output (``prev`` when ``when`` skips the use)."""
        self.uses += 1
        label = str(entry.get("name", entry["use"]))
        use, block = self._used_block(entry, label, depth)
        if not self.condition(entry, env, label):
            return prev
        repeat, start = self._repeat(entry, env, label)
        name_t = self._use_name(entry, label, repeat)
        args_t, defaults = self._use_args(entry, use, block, label)
        inp = self._use_input(entry, env, prev, block_input, local, label)
        for i in range(start, start + repeat):
            name, benv = self._instance_env(entry, env, i, label, use, block, name_t, args_t, defaults)
            full = f"{prefix}.{name}" if prefix else str(name)
            out = self.expand(block["layers"], benv, full, inp, inp, depth + 1, f"block '{use}'",
                              f"blocks.{use}.layers", block.line)
            self.aliases[full] = out
            local[str(name)] = out
            inp = out
        return inp

    def _used_block(self, entry: LDict, label: str, depth: int) -> tuple[str, LDict]:
        line = entry.line
        self.check_keys(entry, USE_KEYS, f"block use '{label}'", label)
        if depth >= MAX_NESTING:
            raise self.fail(f"blocks nest deeper than {MAX_NESTING} levels (a block that uses itself?)",
                            line=line, layer=label, field="use")
        use = entry["use"]
        if not isinstance(use, str) or use not in self.blocks:
            raise self.fail(f"unknown block '{use}'", line=line, layer=label, field="use",
                            hint=suggest(use, self.blocks) or
                            f"defined blocks: {', '.join(self.blocks) or 'none'}")
        return use, self.blocks[use]

    def _repeat(self, entry: LDict, env, label: str) -> tuple[int, int]:
        """``repeat`` (a positive integer, at most MAX_ENTRIES) and ``start`` (non-negative)."""
        line = entry.line
        repeat = self.sub(entry.get("repeat", 1), env, line=line, layer=label, field="repeat")
        start = self.sub(entry.get("start", 0), env, line=line, layer=label, field="start")
        for key, val in (("repeat", repeat), ("start", start)):
            if isinstance(val, bool) or not isinstance(val, int) or val < (1 if key == "repeat" else 0):
                raise self.fail(f"'{key}' must be a {'positive' if key == 'repeat' else 'non-negative'} "
                                f"integer, got {short(val)}", line=line, layer=label, field=key)
        if repeat > MAX_ENTRIES:
            raise self.fail(f"'repeat' must be at most {MAX_ENTRIES}, got {repeat}", line=line, layer=label,
                            field="repeat")
        return repeat, start

    def _use_name(self, entry: LDict, label: str, repeat: int) -> str:
        """The use's name template (a repeated use's must contain a template)."""
        line = entry.line
        name_t = entry.get("name")
        if not isinstance(name_t, str) or not name_t:
            raise self.fail("a block use needs a 'name' (the prefix of its layers' names)", line=line,
                            layer=label, field="name")
        if repeat > 1 and "{" not in name_t:
            raise self.fail(f"a repeated block's name must contain a template such as '{{i}}', got '{name_t}'",
                            line=line, layer=label, field="name", hint=f"for example '{name_t}{{i}}'")
        return name_t

    def _use_args(self, entry: LDict, use: str, block: LDict, label: str) -> tuple[dict, dict]:
        """The use's ``args`` templates and the block's parameters with their defaults (REQUIRED
        where none); an argument the block has no parameter for is an error."""
        line = entry.line
        args_t = entry.get("args", {}) or {}
        if not isinstance(args_t, dict):
            raise self.fail("'args' must be a mapping", line=line, layer=label, field="args")
        params = block.get("params") or {}  # checked in parse_network: names or a mapping
        defaults = dict(params) if isinstance(params, dict) else {p: REQUIRED for p in params}
        for key in args_t:
            if key not in defaults:
                raise self.fail(f"block '{use}' has no parameter '{key}'", line=line, layer=label, field=key,
                                hint=suggest(key, defaults) or f"its parameters: {', '.join(defaults) or 'none'}")
        return args_t, defaults

    def _use_input(self, entry: LDict, env, prev, block_input, local, label: str) -> str:
        """The one layer the first instance reads (the previous layer when ``inputs`` is absent)."""
        line = entry.line
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
        return inp

    def _instance_env(self, entry: LDict, env, i: int, label: str, use: str, block: LDict, name_t: str,
                      args_t: dict, defaults: dict) -> tuple[Any, dict]:
        """Instance ``i``'s name and template environment: its arguments, the defaults of those not
        given (a default may be a template over the block's own parameters), and ``i``."""
        line = entry.line
        ienv = dict(env, i=i)
        name = self.sub(name_t, ienv, line=line, layer=label, field="name")
        benv = {k: self.sub(v, ienv, line=line, layer=str(name), field=k) for k, v in args_t.items()}
        for k, v in defaults.items():
            if k not in benv and v is not REQUIRED:
                benv[k] = self.sub(v, dict(benv, i=i), line=block.line, layer=str(name), field=k)
        missing = [k for k, v in defaults.items() if v is REQUIRED and k not in benv]
        if missing:
            raise self.fail(f"block '{use}' needs argument(s) {', '.join(missing)}", line=line,
                            layer=str(name), field="args")
        benv["i"] = i
        return name, benv
