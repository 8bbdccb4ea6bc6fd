"""A table's cells shown whole, however narrow the terminal: wrapped onto more lines, never cut
with "…" (a layer, machine or network name is what a user copies into the next command; ``dgx-a1…``
could be two machines, ``33.… GiB`` any size). A table as wide as the terminal allows; where a word
is wider than its column, it goes on on the next line."""

from __future__ import annotations

from rich.table import Table


def whole(table: Table) -> Table:
    """``table`` with every column wrapping its cells between words and folding a word onto the next
    line only where the terminal leaves no room for it, never cutting one ("…"); the table itself."""
    for column in table.columns:
        column.overflow = "fold"
    return table
