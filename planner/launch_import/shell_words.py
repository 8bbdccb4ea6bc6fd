"""A launch script's training command as words (pure): :func:`launch_command`.

People pass a framework's arguments in a shell script: one command continued over lines by
backslashes, often built from variables and bash arrays (Megatron-LM's own examples,
``examples/gpt3/train_gpt3_175b_distributed.sh``: ``GPT_MODEL_ARGS=( --num-layers 96 ... )`` then
``torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py ${GPT_MODEL_ARGS[@]} ...``, or older ones'
``GPT_ARGS="--num-layers 24 ..."`` then ``torchrun $DISTRIBUTED_ARGS pretrain_gpt.py $GPT_ARGS``).
This reads such a script as bash reads it, as far as a launch needs, without running anything
(bash(1), "QUOTING", "EXPANSION", "REDIRECTION"):

- its tokens are bash's (:mod:`planner.launch_import.shell_tokens`: words split at blanks and at
  operators, which with newlines end a command, so ``... 2>&1 | tee log.txt`` is the training
  command, then ``tee``'s; quotes over several lines; redirections no words);
- the script's own assignments (``NAME=value``, ``export NAME=value``, arrays ``NAME=( ... )``,
  ``+=``) are expanded in ``$NAME``, ``${NAME}``, ``${NAME:-default}``, ``${NAME[@]}`` and ``$((
  ))`` integer arithmetic, except inside single quotes; an expansion outside double quotes is split
  into words at blanks (``$GPT_ARGS`` is its options, ``"$GPT_ARGS"`` one word), and an array's
  ``"${NAME[@]}"`` is a word an element;
- a variable the script does not set (the environment's, a positional ``$1``), a command
  substitution or another ``${...}`` form stays unexpanded, as one word, and is marked
  (:attr:`Word.unresolved`): the reader refuses it only where its value matters.

The training command is the one that runs a Python script (``torchrun ... pretrain_gpt.py ...``,
``python -m torch.distributed.run ...``); a file of arguments alone (every word an option or its
value) is the arguments of no launcher.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from networks.errors import DnnplanError
from planner.launch_import.shell_tokens import Part, Scanner, Token

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: ``$((expr))``, ``${NAME[@]}``, ``${NAME:-default}``, ``${NAME}``, another ``${...}``, ``$NAME``,
#: ``$1``, ``$(cmd)`` or a backquote
REFERENCE = re.compile(rf"\$\(\((?P<arith>[^()]*(?:\([^()]*\)[^()]*)*)\)\)|\$\{{(?P<braced>{NAME})(?P<all>\[[@*]\])?"
                       rf"(?::-(?P<default>[^}}]*))?\}}|(?P<other>\$\{{[^}}]*\}})|\$(?P<plain>{NAME}|[0-9@*#?$!])"
                       rf"|(?P<command>\$\(|`)")
#: the most characters a variable of the script holds (a launch's arguments are a few thousand)
MAX_VALUE = 100_000
#: the most characters all of a script's expansions make together
MAX_EXPANDED = 10 * MAX_VALUE
ASSIGNMENT = re.compile(rf"({NAME})(\+?)=")
#: words before a command that only prepare it (bash's reserved words among them)
PREFIXES = ("exec", "nohup", "time", "if", "elif", "then", "while", "until", "do", "else", "{", "!", "command",
            "builtin")
#: commands that name a script without running it (``if [ ! -f "$PRETRAIN_SCRIPT_PATH" ]``, as
#: Megatron-LM's examples/llama/train_llama3_8b_h100_fp8.sh checks it before launching)
NOT_RUNNING = ("[", "[[", "test", "echo", "printf", "ls", "cat", "cp", "mv", "rm", "mkdir", "touch", "chmod",
               "realpath", "readlink", "dirname", "basename", "cd", "head", "tail", "grep", "sed", "wget", "curl")
#: commands whose arguments are assignments
DECLARATIONS = ("export", "declare", "typeset", "local", "readonly")
#: words that open a compound command whose body runs under a condition, or in a loop, and close it
OPENERS, CLOSERS = ("if", "while", "until", "for", "select", "case"), ("fi", "done", "esac")
#: operators after which a command runs only under the previous one's status
CONDITIONAL_OPS = ("&&", "||")


@dataclass(frozen=True)
class Word:
    """A word of the command as the shell would pass it, the line its first character was written
    on, and the first expansion in it whose value the script does not settle, in words (``$TP, which
    the file does not set``; None: fully expanded)."""

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


@dataclass(frozen=True)
class _Piece:
    """A piece of an expanded word: its text, whether blanks in it split words, its line, and the
    variable it leaves unexpanded (None: none)."""

    text: str
    split: bool
    line: int
    unresolved: str | None = None


#: between two elements of ``"${NAME[@]}"``: a word ends there
_BREAK = _Piece("", False, 0)
#: ``"${NAME[@]}"`` of no element: no word, though quoted
_NOTHING = _Piece("", False, 0)


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


class Variables:
    """The script's variables as it sets them, scalars and arrays (each value as pieces, the line
    each was written on), and their expansion in a word."""

    def __init__(self, path: str):
        self.path = path
        self.values: dict[str, tuple[_Piece, ...] | list[tuple[_Piece, ...]]] = {}
        #: compound commands (if, loops, case) the script is inside, at the command being read
        self.depth = 0
        #: the characters the script's expansions have made so far (at most :data:`MAX_EXPANDED`)
        self.expanded = 0

    def assign(self, name: str, value: tuple[_Piece, ...], line: int, conditional: bool) -> None:
        """``name=value``. Under a condition (inside an if, a loop or a case, or after ``&&`` or
        ``||``) the value is the script's only where the variable had none before, or the same one
        (``if [ -z "$TP" ]; then TP=2; fi``: 2, as ``${TP:-2}`` is 2); one the script sets to one
        value or another by a condition is unsettled (:attr:`Word.unresolved`: the reader refuses it
        where its value matters, as bash's would be the condition's)."""
        old = self.values.get(name)
        if conditional and old is not None and not isinstance(old, list):
            before, now = "".join(p.text for p in old), "".join(p.text for p in value)
            if before != now or any(p.unresolved for p in old):
                why = next((p.unresolved for p in old if p.unresolved), None) or \
                    f"${name}, which the file sets to {before!r} or {now!r} by a condition (line {line})"
                value = (_Piece(f"${name}", False, line, why),)
        self.check_length(name, value, line)
        self.values[name] = value

    def check_length(self, name: str, value, line: int) -> None:
        """One line for a value past :data:`MAX_VALUE` characters (``X=$X$X`` repeated doubles it each
        time: 30 such lines would hold a billion characters), before it is kept."""
        elements = value if isinstance(value, list) else [value]
        if sum(len(p.text) for element in elements for p in element) > MAX_VALUE:
            raise DnnplanError(f"${name} holds more than {MAX_VALUE:,} characters: no launch command's "
                               "arguments are that long", file=self.path, line=line,
                               hint="set it to the value the launch uses")

    def loop_variable(self, name: str, items: list["Word"], line: int) -> None:
        """``for name in items``: the loop's variable, one item's value a pass (unsettled with more than one)."""
        if len(items) == 1 and not items[0].unresolved:
            self.values[name] = (_Piece(items[0].text, False, line),)
        else:
            self.values[name] = (_Piece(f"${name}", False, line,
                                        f"${name}, a for loop's variable (line {line}), one value a pass"),)

    def scalar(self, name: str) -> str | None:
        """The text of ``$name`` (an array's first element), None where the script does not set it."""
        value = self.values.get(name)
        if isinstance(value, list):
            value = value[0] if value else ()
        return None if value is None else "".join(p.text for p in value)

    def pieces(self, parts: tuple[Part, ...]) -> list[_Piece]:
        """A written word's parts expanded: literal pieces, and each expansion's value, split at
        blanks where it stands outside double quotes."""
        out: list[_Piece] = []
        for part in parts:
            if part.quote == "'":
                out.append(_Piece(part.text, False, part.line))
                continue
            at = 0
            for match in REFERENCE.finditer(part.text):
                out.extend(self.literal(part, part.text[at:match.start()]))
                out.extend(self.reference(match, part))
                at = match.end()
            out.extend(self.literal(part, part.text[at:]))
        self.expanded += sum(len(p.text) for p in out)
        if self.expanded > MAX_EXPANDED:
            raise DnnplanError(f"its variables expand to more than {MAX_EXPANDED:,} characters: no launch script's "
                               "are that long", file=self.path, line=parts[0].line if parts else None,
                               hint="give the launch command as it runs")
        return out

    @staticmethod
    def literal(part: Part, text: str) -> list[_Piece]:
        """Written characters: a piece, none for unquoted nothing (a quoted ``""`` is a word)."""
        return [_Piece(text, False, part.line)] if text or part.quote else []

    def reference(self, match: re.Match, part: Part) -> list[_Piece]:
        """One expansion's pieces (``part``: the written part it stands in)."""
        split = part.quote == ""

        def unresolved(why: str) -> list[_Piece]:
            return [_Piece(match.group(0), False, part.line, why)]

        if match.group("command"):
            return unresolved("a command substitution, which dnnplan does not run")
        if match.group("other"):
            return unresolved(f"{match.group('other')}, which dnnplan does not expand")
        if match.group("arith") is not None:
            value, why = self.arithmetic(match.group("arith"))
            return unresolved(why) if why else [_Piece(value, split, part.line)]
        name = match.group("braced") or match.group("plain")
        value = self.values.get(name)
        if isinstance(value, list) and match.group("all"):
            out: list[_Piece] = [] if value or split else [_NOTHING]
            for k, element in enumerate(value):
                if k:
                    out.append(_Piece(" ", True, part.line) if split else _BREAK)
                out.extend(_Piece(p.text, split, p.line, p.unresolved) for p in element)
            return out
        if isinstance(value, list):
            value = value[0] if value else ()
        if value and any(p.text for p in value):
            return [_Piece(p.text, split, p.line, p.unresolved) for p in value]
        if match.group("default") is not None:
            return self.default_word(match.group("default"), part)
        if value is not None:
            return []
        return unresolved(f"${name}, which the file does not set")

    def default_word(self, text: str, part: Part) -> list[_Piece]:
        """``${NAME:-text}``'s ``text`` expanded as bash expands the word: outside double quotes its
        quotes removed (``${NNODES:-"1"}`` is ``1``, as Megatron-LM's example scripts write it), a
        backslash keeping the next character, blanks splitting words, and ``;``, ``>``, ``#`` mere
        characters; inside double quotes, its double quotes removed and a backslash before ``"``,
        ``\\``, ``$`` or a backquote keeping that character (its single quotes are characters there). A
        quote left open (the default cut at a ``}`` of its own: ``${A:-"${B}/x"}``) keeps the rest
        as written."""
        if part.quote:
            parts = [Part(m.group(1), "'", part.line) if m.group(1) else Part(m.group(2), part.quote, part.line)
                     for m in re.finditer(r'\\(["\\$`])|"|([^"\\]+|\\)', text) if m.group(1) or m.group(2)]
            return [_Piece(p.text, False, p.line, p.unresolved) for p in self.pieces(tuple(parts))]
        out: list[_Piece] = []
        word: list[Part] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch in "'\"":
                close = text.find(ch, i + 1)
                if close < 0:  # left open: the rest as written
                    word.append(Part(text[i:], "", part.line))
                    break
                word.append(Part(text[i + 1:close], ch, part.line))
                i = close + 1
            elif ch == "\\" and i + 1 < len(text):
                word.append(Part(text[i + 1], "'", part.line))
                i += 2
            elif ch in " \t\n":
                if word:
                    out.extend(self.pieces(tuple(word)))
                    out.append(_Piece(" ", True, part.line))
                    word = []
                i += 1
            else:
                j = i
                while j < len(text) and text[j] not in "'\"\\ \t\n":
                    j += 1
                word.append(Part(text[i:j], "", part.line))
                i = j
        out.extend(self.pieces(tuple(word)))
        return out

    def arithmetic(self, expr: str) -> tuple[str, str | None]:
        """``$(( expr ))`` on integers and the script's variables: (its value, None), or (the text,
        why not)."""
        missing: list[str] = []

        def value(match: re.Match) -> str:
            got = self.scalar(match.group(1))
            if got is not None and got.strip().lstrip("-").isdigit():
                return got.strip()
            missing.append(f"${match.group(1)}, which the file does not set as an integer")
            return "0"

        plain = re.sub(rf"\$?\{{?({NAME})\}}?", value, expr)
        if missing:
            return "", missing[0]
        try:
            return str(_integer(ast.parse(plain.strip(), mode="eval").body)), None
        except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
            cut = expr if len(expr) <= 60 else expr[:57] + "..."
            return "", f"the arithmetic $(({cut})), which dnnplan cannot evaluate"

    def words(self, parts: tuple[Part, ...]) -> list[Word]:
        """A written word as the words it expands to (bash's word splitting: blanks in an unquoted
        expansion split it; a quoted empty string stays a word, an unquoted empty expansion none)."""
        words: list[Word] = []
        text: str | None = None
        line, why, nothing = parts[0].line, None, False

        def close() -> None:
            nonlocal text, why, nothing
            if text is not None and not (nothing and text == ""):
                words.append(Word(text, line, why))
            text, why, nothing = None, None, False

        for piece in self.pieces(parts):
            if piece is _BREAK:
                close()
                continue
            nothing = nothing or piece is _NOTHING
            for chars in (piece.text if piece.split else [piece.text]):
                if piece.split and chars in " \t\n":
                    close()
                    continue
                if text is None or (text == "" and chars):  # a word's line: its first character's
                    line = piece.line
                text = (text or "") + chars
                why = why or piece.unresolved
        close()
        return words

    def value(self, parts: tuple[Part, ...]) -> tuple[_Piece, ...]:
        """An assignment's value: expanded, not split."""
        return tuple(_Piece(p.text, False, p.line, p.unresolved) for p in self.pieces(parts)
                     if p is not _BREAK and p is not _NOTHING)


def _assignment(token: Token) -> tuple[str, bool, tuple[Part, ...]] | None:
    """(name, ``+=``, the value's parts) where ``token`` is ``NAME=value`` (``NAME`` unquoted)."""
    if token.op or token.parts[0].quote != "":
        return None
    match = ASSIGNMENT.match(token.parts[0].text)
    if match is None:
        return None
    first = token.parts[0]
    rest = Part(first.text[match.end():], "", first.line)
    return match.group(1), bool(match.group(2)), (rest,) + token.parts[1:]


def launch_command(text: str, path: str) -> LaunchCommand:
    """The training command of a launch script (module docstring), its variables expanded; one line
    naming the file when it runs no Python script and is not arguments alone, or runs several."""
    tokens = Scanner(text, path).scan()
    variables = Variables(path)
    commands: list[tuple[int, list[Word]]] = []
    current: list[Token] = []
    after = None  # the operator before the command being read
    i = 0
    while i < len(tokens):
        token = tokens[i]
        assigned = _assignment(token) if not token.op else None
        if assigned and i + 1 < len(tokens) and tokens[i + 1].op == "(" and tokens[i + 1].glued \
                and assigned[2] == (Part("", "", token.line),):
            end = next((k for k in range(i + 2, len(tokens)) if tokens[k].op == ")"), len(tokens))
            elements = [w for t in tokens[i + 2:end] if not t.op for w in variables.words(t.parts)]
            value = [(_Piece(w.text, False, w.line, w.unresolved),) for w in elements]
            old = variables.values.get(assigned[0])
            if assigned[1] and isinstance(old, list):
                value = old + value
            variables.values[assigned[0]] = value
            i = end + 1
            continue
        if token.op:
            _run(current, variables, commands, after)
            current, after = [], token.op
        else:
            current.append(token)
        i += 1
    _run(current, variables, commands, after)
    return _training_command(commands, path)


def _plain(token: Token) -> str | None:
    """The text of an unquoted word of one part (a reserved word can only be such), else None."""
    return token.parts[0].text if not token.op and len(token.parts) == 1 and token.parts[0].quote == "" else None


def _run(tokens: list[Token], variables: Variables, commands: list[tuple[int, list[Word]]],
         after: str | None = None) -> None:
    """One simple command: its assignments made (alone, or after a declaration), else its words;
    the compound commands it opens or closes counted (``if``, loops, ``case``: what runs inside
    them runs under a condition, :meth:`Variables.assign`)."""
    while tokens and _plain(tokens[0]) in CLOSERS:
        variables.depth = max(0, variables.depth - 1)
        tokens = tokens[1:]
    while tokens and _plain(tokens[0]) in PREFIXES:
        variables.depth += _plain(tokens[0]) in OPENERS
        tokens = tokens[1:]
    if tokens and _plain(tokens[0]) in OPENERS:  # for, select, case: their heads set or test, run nothing
        variables.depth += 1
        if _plain(tokens[0]) in ("for", "select") and len(tokens) > 1 and _plain(tokens[1]):
            at = next((k for k in range(2, len(tokens)) if _plain(tokens[k]) == "in"), None)
            items = [] if at is None else [w for t in tokens[at + 1:] for w in variables.words(t.parts)]
            variables.loop_variable(_plain(tokens[1]), items or [Word("", tokens[1].line, "$@")], tokens[1].line)
        return
    conditional = variables.depth > 0 or after in CONDITIONAL_OPS
    declared = bool(tokens) and len(tokens[0].parts) == 1 and tokens[0].parts[0].text in DECLARATIONS
    if declared:
        tokens = [t for t in tokens[1:] if not "".join(p.text for p in t.parts).startswith("-")]
    leading = 0
    while leading < len(tokens) and _assignment(tokens[leading]):
        leading += 1
    if declared or leading == len(tokens):  # NAME=value alone sets it; before a command it is the command's
        for token in tokens[:leading]:
            name, append, parts = _assignment(token)
            value = variables.value(parts)
            old = variables.values.get(name)
            if append and isinstance(old, tuple):
                value = old + value
            variables.assign(name, value, token.line, conditional)
        return
    words = [w for token in tokens[leading:] for w in variables.words(token.parts)]
    if words:
        commands.append((words[0].line, words))


def _training_command(commands: list[tuple[int, list[Word]]], path: str) -> LaunchCommand:
    running = [(line, words) for line, words in commands
               if words[0].text not in NOT_RUNNING and any(_is_script(w.text) for w in words)]
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
