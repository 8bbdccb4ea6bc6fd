"""The consoles the command line draws on (rich), which end quietly when the reader leaves.

`dnnplan predict gpt2 | head -1`: ``head`` stops reading after its line, and the next write to the
pipe fails. rich's own console then exits 1, as if the command had failed; this one raises
``BrokenPipeError`` instead, which the command's error boundary (dnnplan.cli) turns into the exit a
shell gives a writer whose reader left (128 + SIGPIPE), writing nothing more.
"""

from __future__ import annotations

from rich.console import Console as RichConsole


class Console(RichConsole):
    """rich's console, its broken pipe left to the command's error boundary (module docstring)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError
