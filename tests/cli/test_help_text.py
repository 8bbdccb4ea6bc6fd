"""Every command's help reads as paragraphs: a docstring's single line breaks are joined, so a
wide terminal shows a sentence on one line, and blank lines still separate paragraphs."""

import re

import pytest
import typer.main
from typer.testing import CliRunner

from dnnplan.cli import app, reflow

runner = CliRunner()
WIDE = {"COLUMNS": "200"}
#: at COLUMNS=200 rich leaves ~196 characters for the text; a shorter opening must not be broken
OPENING_CHARS = 150


def commands() -> dict[str, str]:
    """Command name -> the docstring of the function behind it."""
    group = typer.main.get_command(app)
    return {name: cmd.callback.__doc__ for name, cmd in group.commands.items()}


def paragraphs(doc: str) -> list[str]:
    return reflow(doc).split("\n\n")


def opening(paragraph: str) -> str:
    """The first two sentences, or as many whole words as fit in OPENING_CHARS if that is shorter."""
    two = " ".join(re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph)[:2])
    words, out = two.split(), ""
    for word in words:
        if len(out) + 1 + len(word) > OPENING_CHARS:
            break
        out = f"{out} {word}" if out else word
    return out


def rendered_lines(name: str) -> list[str]:
    result = runner.invoke(app, [name, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return [line.strip() for line in result.output.splitlines()]


@pytest.mark.parametrize("name", list(commands()))
def test_each_paragraph_starts_a_line_and_is_not_broken_mid_sentence(name):
    lines = rendered_lines(name)
    for paragraph in paragraphs(commands()[name]):
        start = opening(paragraph)
        assert any(line.startswith(start) for line in lines), f"{start!r} not on one line in:\n" + "\n".join(lines)


@pytest.mark.parametrize("name", list(commands()))
def test_the_short_help_is_the_first_line(name):
    first = commands()[name].strip().splitlines()[0].strip()
    result = runner.invoke(app, ["--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert any(line.strip(" │").startswith(name) and line.strip(" │").endswith(first)
               for line in result.output.splitlines())


def test_reflow_joins_lines_and_keeps_paragraphs():
    doc = """Summary line.

    First paragraph
    over two lines.

    \b
    kept
      as written
    \f
    dropped
    """
    assert reflow(doc) == "Summary line.\n\nFirst paragraph over two lines.\n\n\b\nkept\n  as written"
    assert reflow(None) == ""
