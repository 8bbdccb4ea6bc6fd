"""Reading a user's YAML (network specs, machine files, plans): safe loading whose mappings
remember their line and refuse a key that appears twice, with anchors and aliases allowed but
bounded (an alias repeats a whole subtree, so a few nested ones can stand for billions of values).
Every YAML mistake is a :class:`DnnplanError` naming the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from networks.errors import DnnplanError, short

#: Why a number with more digits than Python reads into an integer (4,300) is refused
DIGITS = "a number of more than 4,300 digits, more than any value can be"


class LDict(dict):
    """A YAML mapping that remembers the line it started on."""

    line: int | None = None


#: The most values all the aliases of one document may repeat, counted as if written out.
MAX_ALIAS_VALUES = 100_000

#: libyaml's parser when PyYAML was built with it (several times faster), else the pure-Python one.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LDict:
    explicit = sum(1 for key_node, _ in node.value if key_node.tag != "tag:yaml.org,2002:merge")
    loader.flatten_mapping(node)  # merged pairs ('<<: *anchor') come first; explicit keys override them
    merged = len(node.value) - explicit
    out = LDict()
    out.line = node.start_mark.line + 1
    seen: set[str] = set()
    for k, (key_node, value_node) in enumerate(node.value):
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(None, None, f"keys must be text, got {short(key)}",
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
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as err:
            # a value the resolver (or an explicit tag: !!bool x, !!timestamp 1) names but cannot build
            why = DIGITS if "integer string conversion" in str(err) else err
            raise yaml.constructor.ConstructorError(None, None, f"cannot read the value of '{key}': {why}",
                                                    value_node.start_mark) from None
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _repeated_values(node: yaml.Node) -> int:
    """How many values the aliases under ``node`` repeat (each alias is the very node it names, so
    a node met a second time is an alias); ValueError if a node contains itself."""
    sizes: dict[int, int | None] = {}
    repeated = 0

    def size(n: yaml.Node) -> int:
        nonlocal repeated
        key = id(n)
        if key in sizes:
            known = sizes[key]
            if known is None:
                raise ValueError("an alias refers to a node that contains it")
            repeated += known
            if repeated > MAX_ALIAS_VALUES:
                raise ValueError(f"its aliases repeat more than {MAX_ALIAS_VALUES:,} values")
            return known
        sizes[key] = None
        children: list[yaml.Node] = []
        if isinstance(n, yaml.SequenceNode):
            children = list(n.value)
        elif isinstance(n, yaml.MappingNode):
            children = [x for pair in n.value for x in pair]
        total = 1 + sum(size(c) for c in children)
        sizes[key] = total
        return total

    size(node)
    return repeated


def _load(text: str) -> Any:
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _repeated_values(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``, its mappings :class:`LDict`; a DnnplanError if it is not YAML."""
    try:
        return _load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        where = text.splitlines()[mark.line] if mark and mark.line < len(text.splitlines()) else ""
        # a tab in the indentation, or where the reader stopped: not one inside a quoted value
        indent = len(where) - len(where.lstrip(" \t"))
        at = where.find("\t", 0, indent) if "\t" in where[:indent] else \
            (mark.column if mark and mark.column < len(where) and where[mark.column] == "\t" else -1)
        tab = at >= 0
        raise DnnplanError(f"not valid YAML: {err.problem or err.context or err}"
                           + (f" (a tab at column {at + 1})" if tab else ""), file=source,
                           line=line, field=getattr(err, "field", None),
                           hint="YAML indents with spaces, never tabs: replace the tab with spaces" if tab else None) \
            from None
    except yaml.YAMLError as err:  # ReaderError (a control character) has no mark but a multi-line text
        raise DnnplanError(f"not valid YAML: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
                           file=source) from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError) as err:
        # an alias bomb; a value the resolver recognised (or a tag named) but cannot build: 2020-13-01
        raise DnnplanError(f"not valid YAML: {err}", file=source) from None
    except RecursionError:
        raise DnnplanError("not valid YAML: it nests too deeply", file=source) from None
