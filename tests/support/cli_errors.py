"""A user mistake as the command line reports it: exit 2 and one line starting ``error: ``, no traceback."""

from __future__ import annotations


def one_error_line(result) -> str:
    """The one error line of a CliRunner ``result`` that exited 2 (asserted)."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]
