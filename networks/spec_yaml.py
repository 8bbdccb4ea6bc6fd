"""Reading a network spec's YAML: safe loading whose mappings remember their line and refuse a key
that appears twice. Every YAML mistake is a :class:`DnnplanError` naming the file and line.
"""

from __future__ import annotations

from typing import Any

import yaml

from networks.errors import DnnplanError


class LDict(dict):
    """A YAML mapping that remembers the line it started on."""

    line: int | None = None


class _Loader(yaml.SafeLoader):
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


def load_yaml(text: str, source: str) -> Any:
    """The YAML document in ``text``, its mappings :class:`LDict`; a DnnplanError if it is not YAML."""
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
