"""The consoles the command line draws on (rich), which end quietly when the reader leaves, and
print text as it is.

`dnnplan predict gpt2 | head -1`: ``head`` stops reading after its line, and the next write to the
pipe fails. rich's own console then exits 1, as if the command had failed; this one raises
``BrokenPipeError`` instead, which the command's error boundary (dnnplan.cli) turns into the exit a
shell gives a writer whose reader left (128 + SIGPIPE), writing nothing more.

Text is printed as written: rich's emoji codes (``:name:``) are not replaced, so a name or a value
that holds one is printed as it is (and rich's table of emoji, 30 ms of every command's start on
the 2-core VM, is never loaded).

A table's cells are shown whole, however narrow the terminal: wrapped onto more lines, never cut
with "…" (a layer, machine or network name is what a user copies into the next command; ``dgx-a1…``
could be two machines, ``33.… GiB`` any size). The table is as wide as the terminal allows; where a
word is wider than its column, it goes on on the next line.
"""

from __future__ import annotations

from rich.console import Console as RichConsole
from rich.table import Table


class Console(RichConsole):
    """rich's console, its broken pipe left to the command's error boundary, its emoji codes
    printed as written (module docstring)."""

    def __init__(self, *args, emoji: bool = False, **kwargs):
        super().__init__(*args, emoji=emoji, **kwargs)

    def print(self, *objects, **kwargs) -> None:
        """rich's print, each table's columns folding onto more lines rather than cutting (module docstring)."""
        for table in objects:
            if isinstance(table, Table):
                for column in table.columns:
                    column.overflow = "fold"
        super().print(*objects, **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError
