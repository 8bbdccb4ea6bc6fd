"""The kinds of value a configuration file's key takes (pure), for the readers of files that carry
typed values (:mod:`planner.launch_import.torchtitan`'s TOML, :mod:`planner.launch_import.deepspeed`'s
JSON): each kind as a message names it and the test a value passes, and :func:`typed`, a key's value
checked against its kind, or refused in the one line ``takes KIND, got VALUE``, the format's own
refusal naming the file, the key and its line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from networks.errors import DnnplanError, short


@dataclass(frozen=True)
class Kind:
    """A kind of value: its name as a message says it ("an integer") and the test a value passes."""

    name: str
    test: Callable[[Any], bool]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


INT = Kind("an integer", _integer)
STR = Kind("a string", lambda v: isinstance(v, str))
BOOL = Kind("true or false", lambda v: isinstance(v, bool))
STRS = Kind("a list of strings", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v))
PARTS = Kind("a list of lists of strings",
             lambda v: isinstance(v, list) and all(isinstance(p, list) and all(isinstance(s, str) for s in p)
                                                   for p in v))


def whole_at_least(least: int) -> Kind:
    """A whole number of at least ``least``, written as an integer or as a finite number of integer
    value (JSON's ``8.0``; never ``true``, infinity or NaN)."""
    def test(value: Any) -> bool:
        if _integer(value):
            return value >= least
        return isinstance(value, float) and math.isfinite(value) and value == int(value) and value >= least
    return Kind(f"an integer of at least {least}", test)


def typed(value: Any, kind: Kind, refuse: Callable[[str], DnnplanError]) -> Any:
    """``value`` where it is of ``kind``; else the error ``refuse`` makes of ``takes KIND, got VALUE``
    (the format's refusal: the file, the key and its line, a hint) raised."""
    if not kind.test(value):
        raise refuse(f"takes {kind.name}, got {short(value)}")
    return value
