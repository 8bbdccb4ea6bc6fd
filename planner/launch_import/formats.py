"""Which reader a launch configuration takes (pure): a file's format from its suffix, and each
format's reader (the contract: :mod:`planner.launch_import`)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import PurePath
from typing import Callable

from networks.errors import DnnplanError
from networks.writing import shell_word
from planner.launch_import import deepspeed, megatron, torchtitan
from planner.export.exported_header import written_for
from planner.launch_import.launch_config import LaunchConfig

#: each format's reader: ``read(text, path) -> LaunchConfig``
READERS: dict[str, Callable[[str, str], LaunchConfig]] = {"megatron": megatron.read, "torchtitan": torchtitan.read,
                                                          "deepspeed": deepspeed.read}
#: the formats whose files a suffix tells apart; any other file is Megatron-LM arguments
SUFFIXES = {".toml": "torchtitan", ".json": "deepspeed"}
#: what each format's files hold, for messages
DESCRIPTIONS = {"megatron": "Megatron-LM arguments (a launch script, or the arguments alone)",
                "torchtitan": "a torchtitan job TOML", "deepspeed": "a DeepSpeed JSON config"}
DEFAULT_FORMAT = "megatron"


#: a torchtitan job TOML's section line, for a file whose suffix says nothing (:func:`format_of`)
TOML_SECTION = re.compile(r"^\s*\[(job|model|parallelism|training|activation_checkpoint|compile)\]\s*$", re.M)
#: the DeepSpeed JSON a launch script writes before its launcher (`dnnplan export --to deepspeed`'s)
HERE_DOCUMENT = re.compile(r"^cat > \S+ <<'?(\w+)'?\n(.*?)^\1$", re.M | re.S)
#: a JSON object's opening (``{`` then a key or ``}``), for a file whose suffix says nothing
JSON_OBJECT = re.compile(r"\A\s*\{\s*[\"}]")
#: the key every dnnplan plan file writes (planner.plan.plan_file), in its YAML or JSON
PLAN_KEY = re.compile(r"(^|[{,])\s*\"?network_hash\"?\s*:", re.M)


def format_of(path: str, text: str = "") -> str:
    """The format of the file at ``path``, by its suffix (:data:`SUFFIXES`); a file of another suffix
    holding a torchtitan section line is a torchtitan TOML, a JSON object a DeepSpeed config, one
    launching ``deepspeed`` with its JSON written in the script a DeepSpeed script, the others
    Megatron-LM's arguments."""
    by_suffix = SUFFIXES.get(PurePath(path).suffix.lower())
    if by_suffix is not None:
        return by_suffix
    if TOML_SECTION.search(text):
        return "torchtitan"
    if JSON_OBJECT.match(text):
        return "deepspeed"
    if "--deepspeed_config" in text and HERE_DOCUMENT.search(text):
        return "deepspeed script"
    return DEFAULT_FORMAT


def read_launch(text: str, path: str) -> LaunchConfig:
    """``text``, the file at ``path``, read by its format's reader; one line for a format no reader
    reads yet."""
    if PLAN_KEY.search(text[:4000]):
        raise DnnplanError("a dnnplan plan (`dnnplan plan --out`), not a framework's launch configuration",
                           file=path, hint=f"predict it with `dnnplan predict {shell_word(path)}`")
    name = format_of(path, text)
    if name == "deepspeed script":  # the JSON the script writes, read as the JSON file
        return replace(deepspeed.read(HERE_DOCUMENT.search(text).group(2), path), written_for=written_for(text))
    reader = READERS.get(name)
    if reader is None:
        raise DnnplanError(f"{DESCRIPTIONS.get(name, name)} is not read yet (dnnplan reads "
                           f"{', '.join(DESCRIPTIONS[n] for n in READERS)})", file=path,
                           hint="give Megatron-LM's arguments in a file of another suffix")
    return replace(reader(text, path), written_for=written_for(text))
