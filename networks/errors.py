"""The one error type a user can cause.

Every mistake a user can make (a bad spec, an impossible strategy, infeasible memory, a missing
profile, a wrong rank count) raises :class:`DnnplanError` with a message that names the file, the
layer and the fix. The CLI turns it into one red line and exit code 2; nothing else may reach a user
as a traceback.
"""

from __future__ import annotations

import difflib

#: The longest a value quoted from a user's input, or a message, may run in an error line.
VALUE_CHARS = 60
MESSAGE_CHARS = 400
HINT_CHARS = 300
NAME_CHARS = 60
PATH_CHARS = 120
LINE_CHARS = 720


def short(value: object, limit: int = VALUE_CHARS) -> str:
    """``repr(value)`` cut to ``limit`` characters: a user's value quoted in a message stays short
    however large it is (a list a YAML alias expanded, a 5,000-digit number)."""
    text = _bounded_repr(value, limit)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _bounded_repr(value: object, limit: int) -> str:
    """A repr that stops early: containers are walked only until ``limit`` characters are written."""
    if isinstance(value, (list, tuple)):
        parts, used = [], 0
        for item in value:
            if used > limit:
                parts.append("...")
                break
            parts.append(_bounded_repr(item, limit - used))
            used += len(parts[-1]) + 2
        inner = ", ".join(parts)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + _bounded_repr([_Pair(k, v) for k, v in value.items()], limit)[1:-1] + "}"
    if isinstance(value, _Pair):
        return f"{_bounded_repr(value.key, limit)}: {_bounded_repr(value.value, limit)}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, str) and len(value) > limit:
        value = value[:limit]
    return repr(value)


class _Pair:
    def __init__(self, key: object, value: object):
        self.key, self.value = key, value


def _escaped(text: object) -> str:
    """``text`` on one line: line breaks and other control characters written as escapes."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in str(text))


def _cut(text: object, limit: int) -> str:
    """``text`` escaped (:func:`_escaped`) and cut to at most ``limit`` characters, at a word's end
    where one lies in the last third (a message is never cut mid-word when it can be helped)."""
    out = _escaped(text)
    if len(out) <= limit:
        return out
    head = out[:limit - 4]
    space = head.rfind(" ")
    if space >= (2 * limit) // 3:
        head = head[:space].rstrip(",;:")
    return head + " ..."


def _cut_front(path: object, limit: int) -> str:
    """A path escaped and cut from the front, so the file's own name stays."""
    out = _escaped(path)
    return out if len(out) <= limit else "..." + out[-(limit - 3):]


def _folded(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def did_you_mean(word: object, options) -> str | None:
    """The option a mistyped name most likely meant: one equal to it but for case and punctuation
    (``Resnet50``, ``resnet-50`` -> ``resnet50``), else the only one it begins (``gpt3`` ->
    ``gpt3-175b``), else the closest by difflib; None when none is close."""
    options = list(options)
    folded = {_folded(str(o)): o for o in options}
    key = _folded(str(word))
    if key in folded:
        return folded[key]
    starting = [o for k, o in folded.items() if key and k.startswith(key)]
    if len(starting) == 1:  # gpt3 -> gpt3-175b
        return starting[0]
    close = difflib.get_close_matches(str(word), options, n=1, cutoff=0.6) or \
        difflib.get_close_matches(_folded(str(word)), list(folded), n=1, cutoff=0.6)
    if not close:
        return None
    return close[0] if close[0] in options else folded[close[0]]


class DnnplanError(Exception):
    """A mistake the user can fix. ``str(err)`` is the one line shown to them."""

    def __init__(self, message: str, *, file: str | None = None, layer: str | None = None,
                 field: str | None = None, line: int | None = None, hint: str | None = None):
        self.file = None if file is None else _cut_front(file, PATH_CHARS)
        self.layer = None if layer is None else _cut(layer, NAME_CHARS)
        self.field = None if field is None else _cut(field, NAME_CHARS)
        self.line = line
        self.hint = None if hint is None else _cut(hint, HINT_CHARS)
        self.bare = _cut(message, MESSAGE_CHARS)
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file:
            where.append(f"{self.file}:{self.line}" if self.line else self.file)
        if self.layer:
            where.append(f"layer '{self.layer}'")
        if self.field:
            where.append(f"field '{self.field}'")
        text = (", ".join(where) + ": " if where else "") + self.bare
        if self.hint:
            text += f" ({self.hint})"
        return _cut(text, LINE_CHARS)

    def located(self, *, file: str | None = None, line: int | None = None,
                field: str | None = None) -> "DnnplanError":
        """Return a copy that also names the file (and line, and field where it names none) the
        mistake came from."""
        return DnnplanError(self.bare, file=file or self.file, layer=self.layer, field=self.field or field,
                            line=line or self.line, hint=self.hint)
