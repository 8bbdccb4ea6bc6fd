"""A launch script's tokens as bash's parser splits them (pure; bash(1), "QUOTING", "REDIRECTION"),
before any expansion (:mod:`planner.launch_import.shell_words` expands them and finds the training
command):

- words are split at blanks and at the operators ``;`` ``&`` ``&&`` ``|`` ``||`` ``|&`` ``(`` ``)``
  and newlines; comments are dropped, ``\\`` and a newline joins lines (also inside double quotes);
  quotes may span lines;
- each word is kept as runs of characters quoted one way (:class:`Part`: unquoted, double-quoted,
  literal), so the expansion knows what it may split;
- redirections (``> log``, ``2>&1``, ``&> log``, ``< in``, a here-document's body) are no words.
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.errors import DnnplanError, short

#: operators that end a command (``(`` and ``)`` also open and close an array's elements)
OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|", "(", ")")
#: redirection operators, longest first (a ``N`` before one is its file descriptor, no word)
REDIRECTIONS = ("&>>", "&>", "<<<", "<<-", "<<", ">>", ">&", "<&", ">|", "<>", ">", "<")
BLANKS = " \t\r"


@dataclass(frozen=True)
class Part:
    """A run of a written word's characters quoted one way on one line: ``""`` unquoted (expanded,
    then split at blanks), ``'"'`` double-quoted (expanded, not split), ``"'"`` literal (single
    quotes, or a backslash's character)."""

    text: str
    quote: str
    line: int


@dataclass(frozen=True)
class Token:
    """A written word (``parts``) or an operator (``op``: one of :data:`OPERATORS` or ``"\\n"``);
    ``glued``: no blank before it (an array's ``(`` right after ``NAME=``)."""

    line: int
    parts: tuple[Part, ...] = ()
    op: str = ""
    glued: bool = False


class Scanner:
    """The script's tokens, as bash's parser splits them (module docstring)."""

    def __init__(self, text: str, path: str):
        self.text, self.path = text.replace("\r\n", "\n").removeprefix("\ufeff"), path
        self.i, self.line = 0, 1
        self.tokens: list[Token] = []
        self.parts: list[Part] = []
        self.redirect = ""  # a redirection waiting for its target word
        self.here: list[tuple[str, bool]] = []  # here-documents' delimiters (and <<-'s tab stripping) to skip

    def fail(self, message: str, line: int, hint: str) -> DnnplanError:
        return DnnplanError(message, file=self.path, line=line, hint=hint)

    def add(self, text: str, quote: str, line: int | None = None) -> None:
        """Characters of the current word, a part a line (``line``: where they start)."""
        line = self.line if line is None else line
        for k, piece in enumerate(text.split("\n")):
            piece += "\n" if k < text.count("\n") else ""
            last = self.parts[-1] if self.parts else None
            if last and last.quote == quote and last.line == line + k:
                self.parts[-1] = Part(last.text + piece, quote, last.line)
            elif piece or k == 0:
                self.parts.append(Part(piece, quote, line + k))

    def end_word(self) -> None:
        if not self.parts:
            return
        parts, self.parts = tuple(self.parts), []
        if self.redirect:  # the redirection's file (or a here-document's delimiter): no word
            if self.redirect in ("<<", "<<-"):
                self.here.append(("".join(p.text for p in parts), self.redirect == "<<-"))
            self.redirect = ""
            return
        self.tokens.append(Token(parts[0].line, parts))

    def operator(self, op: str, glued: bool) -> None:
        self.end_word()
        self.redirect = ""
        self.tokens.append(Token(self.line, op=op, glued=glued))

    def closing(self, start: int, opening: str, closing: str) -> int:
        """The index after the ``closing`` that balances the ``opening`` at ``start``, quotes skipped."""
        depth, quote, j = 0, "", start
        while j < len(self.text):
            ch = self.text[j]
            if quote:
                quote = "" if ch == quote else quote
                j += ch == "\\" and quote == '"'
            elif ch == "\\":
                j += 1
            elif ch in "'\"`":
                quote = ch
            elif ch == opening:
                depth += 1
            elif ch == closing:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise self.fail(f"{short(self.text[start - 1:start + 20])}: not closed", self.line,
                        hint=f"close it with {closing}")

    def substitution(self, quote: str) -> None:
        """``$(...)``, ``$((...))``, ``${...}`` or a backquoted command, kept whole for expansion."""
        ch = self.text[self.i]
        if ch == "`":
            end = self.text.find("`", self.i + 1)
            if end < 0:
                raise self.fail("a backquote is not closed", self.line, hint="close it with `")
            end += 1
        else:
            opening = self.text[self.i + 1]
            end = self.closing(self.i + 1, opening, ")" if opening == "(" else "}")
        raw = self.text[self.i:end]
        self.add(raw, quote)
        self.line += raw.count("\n")
        self.i = end

    def single_quoted(self) -> None:
        end = self.text.find("'", self.i + 1)
        if end < 0:
            raise self.fail("a quote (') opened here is not closed", self.line, hint="close the quote")
        raw = self.text[self.i + 1:end]
        self.add(raw, "'")
        self.line += raw.count("\n")
        self.i = end + 1

    def double_quoted(self) -> None:
        opened, self.i = self.line, self.i + 1
        self.add("", '"')
        while True:
            if self.i >= len(self.text):
                raise self.fail('a quote (") opened here is not closed', opened, hint="close the quote")
            ch, nxt = self.text[self.i], self.text[self.i + 1:self.i + 2]
            if ch == '"':
                self.i += 1
                return
            if ch == "\\" and nxt in ("$", "`", '"', "\\", "\n"):
                if nxt == "\n":  # a continuation inside double quotes: both characters removed
                    self.line += 1
                else:
                    self.add(nxt, "'")
                self.i += 2
            elif (ch == "$" and nxt in ("(", "{")) or ch == "`":
                self.substitution('"')
            else:
                self.add(ch, '"')
                self.line += ch == "\n"
                self.i += 1

    def skip_here_documents(self) -> None:
        """After a newline, the bodies of the here-documents its line opened."""
        for delimiter, tabs in self.here:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                body, self.i = self.text[self.i:end], end + 1
                self.line += 1
                if (body.lstrip("\t") if tabs else body) == delimiter:
                    break
        self.here = []

    def scan(self) -> list[Token]:
        text = self.text
        while self.i < len(text):
            ch, nxt = text[self.i], text[self.i + 1:self.i + 2]
            if ch == "\\":
                if nxt == "\n":
                    self.line += 1
                elif nxt:
                    self.add(nxt, "'")
                self.i += 2
            elif ch == "'":
                self.single_quoted()
            elif ch == '"':
                self.double_quoted()
            elif (ch == "$" and nxt in ("(", "{")) or ch == "`":
                self.substitution("")
            elif ch == "#" and not self.parts:
                end = text.find("\n", self.i)
                self.i = len(text) if end < 0 else end
            elif ch in BLANKS:
                self.end_word()
                self.i += 1
            elif ch == "\n":
                self.operator("\n", False)
                self.i += 1
                self.line += 1
                self.skip_here_documents()
            elif ch in "<>" or (ch == "&" and nxt == ">"):
                if all(p.quote == "" and p.text.isdigit() for p in self.parts):
                    self.parts = []  # a file descriptor: 2>&1
                self.end_word()
                op = next(o for o in REDIRECTIONS if text.startswith(o, self.i))
                self.redirect = op
                self.i += len(op)
            elif ch in "|&;()":
                glued = bool(self.parts)
                op = next(o for o in OPERATORS if text.startswith(o, self.i))
                self.operator(op, glued)
                self.i += len(op)
            else:
                self.add(ch, "")
                self.i += 1
        self.end_word()
        return self.tokens
