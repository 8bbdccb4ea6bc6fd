"""A number (or flag) of an imported model together with where it came from.

The importers carry every value they put in a spec as a :class:`Val`, so the spec writer
(:mod:`networks.importers.spec_out`) can comment each number with its origin: a config field, a
default of the family's config class, ``--seq``, or an ONNX node or initializer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Val:
    """``value`` as the spec gets it; ``origin`` says where it came from, in a few words."""

    value: Any
    origin: str
    field: str | None = None  # the config field a refusal of this value names

    def __str__(self) -> str:
        return str(self.value)


def derived(value: Any, how: str, field: str | None = None) -> Val:
    """A value worked out from others: ``how`` names them (``'4 x n_embd'``)."""
    return Val(value, how, field)
