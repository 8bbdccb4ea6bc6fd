"""The consoles the command line draws on (rich), which end quietly when the reader leaves, and
print text as it is.

`dnnplan predict gpt2 | head -1`: ``head`` stops reading after its line, and the next write to the
pipe fails. rich's own console then exits 1, as if the command had failed; this one raises
``BrokenPipeError`` instead, which the command's error boundary (dnnplan.cli) turns into the exit a
shell gives a writer whose reader left (128 + SIGPIPE), writing nothing more.

Text is printed as written: rich's emoji codes (``:name:``) are not replaced, so a name or a value
that holds one is printed as it is (and rich's table of emoji, 30 ms of every command's start on
the 2-core VM, is never loaded).
"""

from __future__ import annotations

from rich.console import Console as RichConsole


class Console(RichConsole):
    """rich's console, its broken pipe left to the command's error boundary, its emoji codes
    printed as written (module docstring)."""

    def __init__(self, *args, emoji: bool = False, **kwargs):
        super().__init__(*args, emoji=emoji, **kwargs)

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError
