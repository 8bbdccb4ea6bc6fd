"""Reading a Hugging Face ``config.json``: typed fields, each failure one line naming the field.

A :class:`Config` hands out the fields a family reader asks for as :class:`Val` (the value and the
field it came from); a field the file leaves out takes the default of the family's configuration
class in ``transformers`` when one is given (the comment then says so), and is refused as missing
otherwise. It remembers which fields were read, so the spec can list the ones that were not.
"""

from __future__ import annotations

import json
import math
from typing import Any

from networks.errors import DnnplanError, short
from networks.importers.values import Val
from networks.ops.base import MAX_INT
from networks.spec_yaml import DIGITS

_ABSENT = object()


def parse_config(text: str, source: str) -> dict:
    """The JSON object in ``text``; a DnnplanError at the line of a JSON mistake."""
    if not text.strip():
        raise DnnplanError("the file is empty", file=source, hint="give the model's config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DnnplanError(f"not valid JSON: {err.msg} (column {err.colno})", file=source, line=err.lineno) from None
    except RecursionError:
        raise DnnplanError("not valid JSON: it nests too deeply", file=source) from None
    except ValueError:  # a number past Python's 4,300-digit limit on reading an integer
        raise DnnplanError(f"not valid JSON: {DIGITS}", file=source, hint="correct the number") from None
    if not isinstance(data, dict):
        raise DnnplanError(f"a Hugging Face config is a JSON object, got a {type(data).__name__}", file=source,
                           hint="give the model's config.json")
    return data


class Config:
    """The fields of one config, read by name; ``family`` names the model type in messages."""

    def __init__(self, data: dict, source: str, family: str):
        self.data, self.source, self.family = data, source, family
        self.read: set[str] = set()

    def fail(self, field: str, message: str, hint: str | None = None) -> DnnplanError:
        return DnnplanError(message, file=self.source, field=field, hint=hint)

    def has(self, field: str) -> bool:
        return self.data.get(field) is not None

    def raw(self, field: str) -> Any:
        """The field's value as written (None when absent or null), marked as read."""
        self.read.add(field)
        return self.data.get(field)

    def _get(self, field: str, default: Any, aliases: tuple[str, ...] = ()) -> tuple[str, Any]:
        for name in (field, *aliases):
            if self.data.get(name) is not None:
                self.read.add(name)
                return name, self.data[name]
        self.read.add(field)
        if default is _ABSENT:
            null = next((name for name in (field, *aliases) if name in self.data), None)
            if null is not None:  # written, as null: not the same mistake as a field left out
                raise self.fail(null, f"'{null}' is null, and a {self.family} model needs it",
                                hint=f"give '{null}' its value")
            raise self.fail(field, f"the config has no '{field}', which a {self.family} model needs",
                            hint="is this the model's config.json?")
        return "", default

    def _val(self, field: str, name: str, value: Any) -> Val:
        if name:
            return Val(value, name, name)
        return Val(value, f"{field} absent: {self.family} default {_text(value)}", field)

    def whole(self, field: str, default: Any = _ABSENT, aliases: tuple[str, ...] = (), low: int = 1) -> Val:
        """A whole number >= ``low`` (a size, a count)."""
        name, value = self._get(field, default, aliases)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT:
            raise self.fail(name or field, f"must be a whole number from {low} to 2^31, got {short(value)}")
        return self._val(field, name, value)

    def number(self, field: str, default: Any = _ABSENT, aliases: tuple[str, ...] = (), positive: bool = False) -> Val:
        """A finite number >= 0 (a rate, a factor), or > 0 where ``positive`` (a norm's epsilon, which
        the network's layers refuse at 0)."""
        name, value = self._get(field, default, aliases)
        low = "> 0" if positive else ">= 0"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf \
                or (positive and value == 0):
            raise self.fail(name or field, f"must be a number {low}, got {short(value)}")
        return self._val(field, name, float(value))

    def flag(self, field: str, default: Any = _ABSENT, aliases: tuple[str, ...] = ()) -> Val:
        name, value = self._get(field, default, aliases)
        if not isinstance(value, bool):
            raise self.fail(name or field, f"must be true or false, got {short(value)}")
        return self._val(field, name, value)

    def text(self, field: str, default: Any = _ABSENT, aliases: tuple[str, ...] = ()) -> Val:
        name, value = self._get(field, default, aliases)
        if not isinstance(value, str):
            raise self.fail(name or field, f"must be text, got {short(value)}")
        return self._val(field, name, value)

    def unread(self) -> list[str]:
        """Fields of the file no reader asked for, in file order."""
        return [k for k in self.data if k not in self.read]


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
