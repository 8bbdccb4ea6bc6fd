"""A frozen dataclass with some fields changed, made without its ``__init__`` (pure)."""

from __future__ import annotations


def replaced(obj, **changes):
    """``dataclasses.replace(obj, **changes)`` for a frozen dataclass without ``__post_init__`` or
    ``init=False`` fields, made directly: its ``__init__`` sets each field through
    ``object.__setattr__``, which costs more than the planner's arithmetic on the collectives and
    estimates it derives for every candidate (``changes`` must name fields)."""
    new = object.__new__(type(obj))
    fields = new.__dict__
    fields.update(obj.__dict__)
    fields.update(changes)
    return new
