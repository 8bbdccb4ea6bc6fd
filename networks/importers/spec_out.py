"""Writing a network spec as YAML text: one flow mapping a layer, each line commented.

The importers build their specs with these helpers so every number lands on a line whose comment
says where it came from, and every value is written so that :mod:`networks.spec_yaml` reads it
back as the same value (floats with a dot, names quoted where YAML would read them otherwise).
"""

from __future__ import annotations

import json
import re
from typing import Any

from networks.importers.values import Val

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
#: Words YAML 1.1 reads as something other than text.
_SPECIAL = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "none", "~"}
COMMENT_CHARS = 320


def scalar(value: Any) -> str:
    """``value`` as a YAML scalar that reads back as itself."""
    if isinstance(value, Val):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:  # 1e-05 reads as text in YAML 1.1
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"
        return text
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _SPECIAL:
        return text
    return json.dumps(text)


def flow(fields: dict[str, Any]) -> str:
    """``{key: value, ...}`` on one line, keys in the given order."""
    return "{" + ", ".join(f"{k}: {scalar(v)}" for k, v in fields.items()) + "}"


def comment(text: str) -> str:
    """``text`` as a one-line YAML comment body: control characters dropped, cut to a readable length."""
    clean = "".join(ch if ch.isprintable() else " " for ch in text).strip()
    return clean if len(clean) <= COMMENT_CHARS else clean[:COMMENT_CHARS - 3] + "..."


def origins(fields: dict[str, Any], skip: tuple[str, ...] = ("name", "op", "inputs")) -> str:
    """'key, key <- origin; ...' for every :class:`Val` among ``fields`` (the numbers' sources), keys
    of one origin together."""
    grouped: dict[str, list[str]] = {}
    for k, v in fields.items():
        if isinstance(v, Val) and k not in skip:
            grouped.setdefault(v.origin, []).append(k)
    return "; ".join(f"{', '.join(keys)} <- {origin}" for origin, keys in grouped.items())


def item(indent: int, fields: dict[str, Any], note: str = "", note_first: bool = False) -> str:
    """One list entry: ``- {...}`` with its fields' origins (and ``note``) as the comment."""
    parts = (note, origins(fields)) if note_first else (origins(fields), note)
    why = "; ".join(x for x in parts if x)
    line = " " * indent + "- " + flow(fields)
    return f"{line}  # {comment(why)}" if why else line


def header(lines: list[str]) -> list[str]:
    """Free-text comment lines for the top of the file."""
    return [f"# {comment(line)}" if line else "#" for line in lines]
