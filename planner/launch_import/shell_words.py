"""A launch script's training command as words (pure): :func:`launch_command`.

People pass a framework's arguments in a shell script: one command continued over lines by
backslashes, often built from variables and bash arrays (Megatron-LM's own examples,
``examples/gpt3/train_gpt3_175b_distributed.sh``: ``GPT_MODEL_ARGS=( --num-layers 96 ... )`` then
``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...``). This reads such a
script as far as a launch needs, without running anything: comments dropped, continuations joined,
quotes as the shell removes them, and the script's own simple assignments (``NAME=value``,
``export NAME=value``, arrays ``NAME=( ... )``, ``$(( ))`` integer arithmetic on them) expanded in
``$NAME``, ``${NAME}``, ``${NAME:-default}`` and ``${NAME[@]}``. A variable the script does not set
(the environment's, a positional ``$1``) or a command substitution stays unexpanded and is marked
(:attr:`Word.unresolved`): the reader refuses it only where its value matters. The training command
is the line that runs a Python script (``torchrun ... pretrain_gpt.py ...``, ``python -m
torch.distributed.run ...``); a file of arguments alone (every word an option or its value) is the
arguments of no launcher.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass

from networks.errors import DnnplanError

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
ASSIGNMENT = re.compile(rf"^({NAME})=(.*)$", re.S)
ARRAY_OPEN = re.compile(rf"^\s*(?:export\s+|declare\s+-a\s+|local\s+)?({NAME})=\(")
#: ``$((expr))``, ``${NAME[@]}``, ``${NAME:-default}``, ``${NAME}``, ``$NAME``, ``$1``, ``$(cmd)``
REFERENCE = re.compile(rf"\$\(\((?P<arith>[^()]*(?:\([^()]*\)[^()]*)*)\)\)|\$\{{(?P<braced>{NAME})(?P<all>\[[@*]\])?"
                       rf"(?::-(?P<default>[^}}]*))?\}}|\$(?P<plain>{NAME}|[0-9@*#?$!])|(?P<command>\$\(|`)")
#: words before a command that only prepare it
PREFIXES = ("export", "exec", "nohup", "time")


@dataclass(frozen=True)
class Word:
    """A word of the command as the shell would pass it, the line it was written on, and the first
    variable in it the script does not set (None: fully expanded)."""

    text: str
    line: int
    unresolved: str | None = None


@dataclass(frozen=True)
class LaunchCommand:
    """The training command: the launcher's words before the script (``torchrun`` and its
    options; () without a launcher), the script (None: a file of arguments alone), its arguments."""

    launcher: tuple[Word, ...]
    script: str | None
    args: tuple[Word, ...]
    line: int


def logical_lines(text: str) -> list[list[tuple[int, str]]]:
    """Each command as its physical lines, (line number, text) each: backslash continuations joined
    (the backslash dropped), an array's parentheses read to their close."""
    out: list[list[tuple[int, str]]] = []
    pending: list[tuple[int, str]] = []
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        if depth or (not pending and ARRAY_OPEN.match(line)):
            depth += _parens(line)
            pending.append((number, line))
            if depth > 0:
                continue
            depth = 0
        elif line.endswith("\\") and not line.endswith("\\\\"):
            pending.append((number, line[:-1]))
            continue
        else:
            pending.append((number, line))
        out.append(pending)
        pending = []
    if pending:
        out.append(pending)
    return out


def _parens(line: str) -> int:
    """Opening less closing parentheses outside quotes and comments on one line."""
    depth, quote = 0, ""
    for ch in line:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            break
        else:
            depth += (ch == "(") - (ch == ")")
    return depth


class Variables:
    """The script's variables as it sets them, scalars and arrays, and their expansion in a word."""

    def __init__(self, path: str):
        self.path = path
        self.values: dict[str, str | list[Word]] = {}

    def expand(self, word: str, line: int) -> list[Word]:
        """``word`` expanded: one word, or an array's words where it is ``${NAME[@]}`` alone."""
        whole = REFERENCE.fullmatch(word)
        if whole and whole.group("all") and isinstance(self.values.get(whole.group("braced")), list):
            return list(self.values[whole.group("braced")])
        unresolved: list[str] = []

        def one(match: re.Match) -> str:
            if match.group("command"):
                unresolved.append("a command substitution")
                return match.group(0)
            if match.group("arith") is not None:
                return self._arithmetic(match.group("arith"), line, unresolved, match.group(0))
            name = match.group("braced") or match.group("plain")
            value = self.values.get(name)
            if isinstance(value, list):
                return " ".join(w.text for w in value)
            if value is not None:
                return value
            if match.group("default") is not None:
                return match.group("default")
            unresolved.append(f"${name}")
            return match.group(0)

        text = REFERENCE.sub(one, word)
        return [Word(text, line, unresolved[0] if unresolved else None)]

    def _arithmetic(self, expr: str, line: int, unresolved: list[str], original: str) -> str:
        """``$(( expr ))`` on integers and the script's variables, or the text unexpanded (marked)."""
        missing: list[str] = []

        def value(match: re.Match) -> str:
            got = self.values.get(match.group(1))
            if isinstance(got, str) and got.strip().lstrip("-").isdigit():
                return got.strip()
            missing.append(f"${match.group(1)}")
            return "0"

        plain = re.sub(rf"\$?\{{?({NAME})\}}?", value, expr)
        if missing:
            unresolved.append(missing[0])
            return original
        try:
            return str(_integer(ast.parse(plain.strip(), mode="eval").body))
        except (SyntaxError, ValueError, ZeroDivisionError):
            unresolved.append(f"the arithmetic $(({expr}))")
            return original

    def assign(self, name: str, words: list[Word] | str) -> None:
        self.values[name] = words


def _integer(node: ast.AST) -> int:
    """An integer expression of + - * / % and parentheses, as the shell's arithmetic evaluates it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        got = _integer(node.operand)
        return -got if isinstance(node.op, ast.USub) else got
    if isinstance(node, ast.BinOp):
        a, b = _integer(node.left), _integer(node.right)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.Div: lambda: int(a / b), ast.FloorDiv: lambda: int(a / b), ast.Mod: lambda: a % b}
        if type(node.op) in ops:
            return ops[type(node.op)]()
    raise ValueError("not shell arithmetic")


def _split(text: str, line: int, path: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError as err:
        raise DnnplanError(f"cannot read the shell words here: {err}", file=path, line=line,
                           hint="close the quote, or give the arguments alone, one option a line") from None


def _words(lines: list[tuple[int, str]], path: str) -> list[tuple[int, str]]:
    """The shell words of one command's physical lines, each with its line: split line by line, or
    as one text where a quote spans lines."""
    try:
        return [(number, word) for number, text in lines for word in shlex.split(text, comments=True)]
    except ValueError:
        return [(lines[0][0], word) for word in _split(" ".join(text for _, text in lines), lines[0][0], path)]


def launch_command(text: str, path: str) -> LaunchCommand:
    """The training command of a launch script (module docstring), its variables expanded; one line
    naming the file when it runs no Python script and is not arguments alone, or runs several."""
    variables = Variables(path)
    commands: list[tuple[int, list[Word]]] = []
    for lines in logical_lines(text):
        array = ARRAY_OPEN.match(lines[0][1])
        if array:
            body = [(lines[0][0], lines[0][1][array.end():])] + lines[1:]
            number, last = body[-1]
            body[-1] = (number, last[:last.rfind(")")] if ")" in last else last)
            variables.assign(array.group(1), [w for number, raw in _words(body, path)
                                              for w in variables.expand(raw, number)])
            continue
        raw = _words(lines, path)
        while raw and raw[0][1] in PREFIXES:
            raw = raw[1:]
        while raw and ASSIGNMENT.match(raw[0][1]):
            number, word = raw[0]
            name, value = ASSIGNMENT.match(word).groups()
            if len(raw) == 1:  # NAME=value alone sets it; before a command it is that command's
                variables.assign(name, " ".join(w.text for w in variables.expand(value, number)))
            raw = raw[1:]
        if raw:
            commands.append((raw[0][0], [w for number, word in raw for w in variables.expand(word, number)]))
    return _training_command(commands, path)


def _training_command(commands: list[tuple[int, list[Word]]], path: str) -> LaunchCommand:
    running = [(line, words) for line, words in commands if any(_is_script(w.text) for w in words)]
    preferred = [c for c in running if any(re.search(r"(^|/)pretrain_\w*\.py$", w.text) for w in c[1])]
    running = preferred or running
    if len(running) > 1:
        raise DnnplanError(f"runs {len(running)} Python scripts (lines {', '.join(str(c[0]) for c in running)}): "
                           "dnnplan reads one training command", file=path, hint="keep the training command alone")
    if running:
        line, words = running[0]
        at = next(i for i, w in enumerate(words) if _is_script(w.text))
        return LaunchCommand(tuple(words[:at]), words[at].text, tuple(words[at + 1:]), line)
    words = [w for _, ws in commands for w in ws]
    if words and words[0].text.startswith("--"):
        return LaunchCommand((), None, tuple(words), words[0].line)
    raise DnnplanError("no training command: expected a line running the training script (`torchrun ... "
                       "pretrain_gpt.py --flag value ...`) or the arguments alone", file=path,
                       line=commands[0][0] if commands else None,
                       hint="give the launch script that runs pretrain_gpt.py, or its arguments")


def _is_script(word: str) -> bool:
    return word.endswith(".py") and not word.startswith("-")
