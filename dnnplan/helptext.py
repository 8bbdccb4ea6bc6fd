"""Command help from docstrings, reflowed into paragraphs for the terminal's width.

typer (rich markup mode) joins the lines of a docstring's first paragraph but keeps the source line
breaks of the others, so `dnnplan plan --help` broke sentences where the source did. :func:`reflow`
makes each paragraph one line (a blank line separates paragraphs) and lets rich wrap it to the
terminal. A paragraph that starts with ``\\b`` (click's "do not rewrap" mark) is kept as written,
and anything after a ``\\f`` line (click's "end of help" mark) is dropped.
"""

from __future__ import annotations

import inspect
import re
import sys

_BLANK_LINES = re.compile(r"\n\s*\n")


def reflow(doc: str | None) -> str:
    """``doc`` dedented, each paragraph joined onto one line, paragraphs separated by one blank line."""
    text = inspect.cleandoc(doc or "").partition("\f")[0]
    paragraphs = [p.strip("\n") for p in _BLANK_LINES.split(text) if p.strip()]
    return "\n\n".join(p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
                       for p in paragraphs)


def command_help(command) -> str:
    """A command's --help: its docstring, then its module's ``EXAMPLES`` where it has them (worked
    examples too long for the function itself), reflowed."""
    examples = getattr(sys.modules.get(command.__module__), "EXAMPLES", "")
    return reflow((command.__doc__ or "") + ("\n\n" + examples if examples else ""))
