"""Which reader a launch configuration takes (pure): a file's format from its suffix, and each
format's reader (the contract: :mod:`planner.launch_import`)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import PurePath
from typing import Callable

from networks.errors import DnnplanError
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


def format_of(path: str) -> str:
    """The format of the file at ``path``, by its suffix (:data:`SUFFIXES`)."""
    return SUFFIXES.get(PurePath(path).suffix.lower(), DEFAULT_FORMAT)


def read_launch(text: str, path: str) -> LaunchConfig:
    """``text``, the file at ``path``, read by its format's reader; one line for a format no reader
    reads yet."""
    name = format_of(path)
    reader = READERS.get(name)
    if reader is None:
        raise DnnplanError(f"{DESCRIPTIONS.get(name, name)} is not read yet (dnnplan reads "
                           f"{', '.join(DESCRIPTIONS[n] for n in READERS)})", file=path,
                           hint="give Megatron-LM's arguments in a file of another suffix")
    return replace(reader(text, path), written_for=written_for(text))
