"""The one error type a user can cause.

Every mistake a user can make (a bad spec, an impossible strategy, infeasible memory, a missing
profile, a wrong rank count) raises :class:`DnnplanError` with a message that names the file, the
layer and the fix. The CLI turns it into one red line and exit code 2; nothing else may reach a user
as a traceback.
"""

from __future__ import annotations


class DnnplanError(Exception):
    """A mistake the user can fix. ``str(err)`` is the one line shown to them."""

    def __init__(self, message: str, *, file: str | None = None, layer: str | None = None,
                 field: str | None = None, line: int | None = None, hint: str | None = None):
        self.file = file
        self.layer = layer
        self.field = field
        self.line = line
        self.hint = hint
        self.bare = message
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
        return text

    def located(self, *, file: str | None = None, line: int | None = None) -> "DnnplanError":
        """Return a copy that also names the file (and line) the mistake came from."""
        return DnnplanError(self.bare, file=file or self.file, layer=self.layer, field=self.field,
                            line=line or self.line, hint=self.hint)
