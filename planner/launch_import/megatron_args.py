"""Megatron-LM's arguments parsed (pure): :func:`parse` turns a command's words into :class:`Args`,
each option's value converted to its kind and checked, for :mod:`planner.launch_import.megatron` to
read the configuration they describe.

Every option is named as Megatron-LM's parser names it at NVIDIA/Megatron-LM
d98e8a64ddf34856e74b24714e3bedb2f5a39553 (Megatron-Core 0.20.0), the release
:mod:`planner.export.megatron` writes for: ``megatron/training/arguments.py`` (its own
``add_argument`` calls, ``allow_abbrev=False``: no abbreviations) and the dataclass fields it adds
through ``ArgumentGroupFactory`` (``megatron/training/argument_utils.py``; ``TransformerConfig``,
``ModelParallelConfig``, ``TrainingConfig``, ``CheckpointConfig``, ``LoggerConfig``,
``SchedulerConfig``, ...). Each option is read (:data:`planner.launch_import.megatron_options.READ`),
listed as ignored with the reason (``IGNORED`` there: it does not change the step dnnplan prices), or
refused as unknown; an integer option of at least 1 is read with :func:`positive` (Megatron-LM's
size options default to 1).
"""

from __future__ import annotations

import re

from networks.errors import DnnplanError, did_you_mean, short
from networks.ops.base import MAX_INT
from planner.launch_import.megatron_options import CHOICES, FLAG, FLOAT, INT, READ, REASON_OF, WORDS
from planner.launch_import.shell_words import Word

HINT = "see docs/export.md, \"Importing a launch configuration\", for the options dnnplan reads"


class Args:
    """The options a command gives, each value converted and checked, with the word it came from."""

    def __init__(self, path: str):
        self.path = path
        self.values: dict[str, object] = {}
        self.words: dict[str, Word] = {}
        self.ignored: dict[str, str] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str, default=None):
        return self.values.get(name, default)

    def refuse(self, name: str, message: str, hint: str | None = None) -> DnnplanError:
        word = self.words.get(name)
        return DnnplanError(f"{name}: {message}", file=self.path, line=word.line if word else None, hint=hint)


def parse(words: tuple[Word, ...], path: str) -> Args:
    """The options of ``words``: each known option's value converted (one line for an unknown option,
    a missing or bad value, a variable the file does not set where the value matters, or an option
    given twice with different values)."""
    args = Args(path)
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, inline = word.text.partition("=")
        if not name.startswith("--"):
            raise DnnplanError(f"{short(word.text)}: a value without an option before it", file=path, line=word.line,
                               hint="every argument is --option [value ...]")
        i += 1
        if name in REASON_OF:
            while i < len(words) and not words[i].text.startswith("--"):
                i += 1
            args.ignored[name] = REASON_OF[name]
            continue
        kind = READ.get(name)
        if kind is None and any(ch.isspace() for ch in name):
            raise DnnplanError(f"unknown option {short(name)}: one word holding several (a variable expanded "
                               "inside double quotes stays one word)", file=path, line=word.line,
                               hint="leave the variable unquoted ($GPT_ARGS), or write the options as a bash array")
        if kind is None:
            near = did_you_mean(name, list(READ) + list(REASON_OF))
            raise DnnplanError(f"unknown option {short(name)}: not an option dnnplan reads of Megatron-LM's "
                               "pretrain_gpt.py (it may change what runs)", file=path, line=word.line,
                               hint=f"did you mean {near}?" if near else f"remove it to predict without it; {HINT}")
        args.words[name] = word
        values: list[Word]
        if kind == FLAG:
            if eq:
                raise args.refuse(name, "takes no value", hint=f"write {name} alone")
            value: object = True
        else:
            if eq:
                values = [Word(inline, word.line, word.unresolved)]
            else:
                values = []
                while i < len(words) and not words[i].text.startswith("--") and (kind == WORDS or not values):
                    values.append(words[i])
                    i += 1
            if not values or values[0].text == "":
                raise args.refuse(name, f"needs a value ({kind})", hint=f"write {name} VALUE")
            value = convert(args, name, kind, values)
        if name in args.values and args.values[name] != value:
            raise args.refuse(name, f"given twice, as {short(args.values[name])} and {short(value)}",
                              hint="give it once")
        args.values[name] = value
    return args


def convert(args: Args, name: str, kind: str, values: list[Word]) -> object:
    """An option's value as its kind reads it, checked against its choices (one line for a bad one)."""
    for word in values:
        if word.unresolved:
            raise args.refuse(name, f"its value {short(word.text)} uses {word.unresolved}",
                              hint="set it in the file once (NAME=value), or write the value")
    text = values[0].text
    if kind == WORDS:
        return tuple(w.text for w in values)
    if kind == INT:
        if not re.fullmatch(r"[+-]?[0-9]{1,12}", text) or not -MAX_INT <= int(text) <= MAX_INT:
            raise args.refuse(name, f"takes an integer, got {short(text)}", hint=f"write {name} N")
        return int(text)
    if kind == FLOAT:
        try:
            number = float(text)
        except ValueError:
            number = float("nan")
        if not -1e9 < number < 1e9:
            raise args.refuse(name, f"takes a number, got {short(text)}", hint=f"write {name} X")
        return number
    choices = CHOICES.get(name)
    if choices and text not in choices:
        raise args.refuse(name, f"unknown value {short(text)}", hint=f"Megatron-LM takes {', '.join(choices)}")
    return text


def positive(args: Args, name: str, required: bool = False) -> int:
    """An integer option of at least 1 (Megatron-LM's size options default to 1)."""
    if name not in args:
        if required:
            raise DnnplanError(f"{name} is missing: Megatron-LM requires it", file=args.path, hint=f"add {name} N")
        return 1
    value = args.get(name)
    if value < 1:
        raise args.refuse(name, f"must be at least 1, got {value}", hint=f"write {name} N, N >= 1")
    return value


def given(args: Args, name: str) -> int | None:
    """An integer option of at least 1 where it is given, else None."""
    return positive(args, name) if name in args else None
