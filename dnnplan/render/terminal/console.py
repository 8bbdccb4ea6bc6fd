"""The consoles the command line draws on (rich), which end quietly when the reader leaves, and
print text as it is.

`dnnplan predict gpt2 | head -1`: ``head`` stops reading after its line, and the next write to the
pipe fails. rich's own console then exits 1, as if the command had failed; this one raises
``BrokenPipeError`` instead, which the command's error boundary (dnnplan.cli) turns into the exit a
shell gives a writer whose reader left (128 + SIGPIPE), writing nothing more.

Text is printed as written: rich's emoji codes (``:name:``) are not replaced, so a name or a value
that holds one is printed as it is (and rich's table of emoji, 30 ms of every command's start on
the 2-core VM, is never loaded).

A table's cells are shown whole, however narrow the terminal (the tables of `--help` too): wrapped
onto more lines, never cut with "…" (a layer, machine or network name is what a user copies into the next command; ``dgx-a1…``
could be two machines, ``33.… GiB`` any size). The table is as wide as the terminal allows; where a
word is wider than its column, it goes on on the next line.
"""

from __future__ import annotations

from typing import Iterable

from rich.columns import Columns
from rich.console import Console as RichConsole
from rich.console import Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text


class Console(RichConsole):
    """rich's console, its broken pipe left to the command's error boundary, its emoji codes
    printed as written (module docstring)."""

    def __init__(self, *args, emoji: bool = False, **kwargs):
        super().__init__(*args, emoji=emoji, **kwargs)

    def print(self, *objects, **kwargs) -> None:
        """rich's print, each table's columns folding onto more lines rather than cutting (module
        docstring), the tables inside a panel or group too (typer's --help draws its options so)."""
        _fold(objects)
        super().print(*objects, **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def _fold(objects: Iterable) -> None:
    """Every table among ``objects``, and inside their panels, paddings, groups, columns and cells,
    folding its columns; every text there folding its words wider than their place."""
    for obj in objects:
        if isinstance(obj, Table):
            for column in obj.columns:
                column.overflow = "fold"
                _fold(column.cells)
        elif isinstance(obj, (Panel, Padding)):
            _fold((obj.renderable,))
        elif isinstance(obj, (Group, Columns)):
            _fold(obj.renderables)
        elif isinstance(obj, Text):
            obj.overflow = "fold"
