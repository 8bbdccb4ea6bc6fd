"""One-line messages on stderr: an error (red) and a warning (yellow).

Square brackets in a message are escaped, so a path or a shape like ``[8, 3]`` is printed as
written rather than read as rich markup.
"""

from __future__ import annotations

from dnnplan.render.terminal.console import Console

err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def _escaped(message: str) -> str:
    return message.replace("[", "\\[")


def fail_line(message: str) -> None:
    err_console.print(f"[bold red]error:[/bold red] {_escaped(message)}", markup=True, emoji=False)


def warn(message: str) -> None:
    err_console.print(f"[bold yellow]warning:[/bold yellow] {_escaped(message)}", markup=True, emoji=False)
