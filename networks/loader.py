"""Finding and reading network specs: a zoo name, a path to a spec, or a model to import (a
Hugging Face config.json or a folder holding one, an ONNX file: :mod:`networks.importers`).
The one I/O edge of ``networks``."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from networks.errors import DnnplanError, did_you_mean, short
from networks.importers.imported_files import imported_spec, is_importable
from networks.ir import Network
from networks.reading import read_text, refuse_standard_input
from networks.spec import parse_network

ZOO_PACKAGE = "networks.zoo"


def zoo_names() -> list[str]:
    """Names of the shipped networks, sorted."""
    return sorted(p.name[:-5] for p in resources.files(ZOO_PACKAGE).iterdir() if p.name.endswith(".yaml"))


def spec_text(name_or_path: str) -> tuple[str, str]:
    """Return (text, source) for a zoo name or a path to a YAML file."""
    refuse_standard_input(name_or_path, "network spec")
    path = Path(name_or_path)
    try:
        exists = path.exists()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte
        exists = False
    if path.suffix in (".yaml", ".yml") or exists or "/" in name_or_path:
        return read_text(path, "network spec", missing_hint=f"zoo networks: {', '.join(zoo_names())}"), str(path)
    if name_or_path not in zoo_names():
        close = did_you_mean(name_or_path, zoo_names())
        raise DnnplanError(f"{short(name_or_path)} is neither a zoo network nor a spec file",
                           hint=f"did you mean '{close}'? `dnnplan networks` lists the zoo" if close else
                           f"zoo networks: {', '.join(zoo_names())}; or pass a path to a .yaml spec")
    entry = resources.files(ZOO_PACKAGE) / f"{name_or_path}.yaml"
    return entry.read_text(encoding="utf-8"), f"zoo/{name_or_path}.yaml"


def load_network(name_or_path: str, seq: int | None = None) -> Network:
    """Load and validate a network by zoo name or path; a config.json, a folder holding one or an
    ONNX file is imported first. ``seq``: the tokens per sequence (default: an imported config's
    longest, the ONNX graph's, the spec's own); a network without a token sequence is refused."""
    if not str(name_or_path).strip():  # '' is no network (as a path it would read the working folder)
        raise DnnplanError(f"{short(name_or_path)} names no network",
                           hint="give a zoo name (`dnnplan networks`), a spec, a config.json or an ONNX file")
    if not is_importable(name_or_path):
        text, source = spec_text(name_or_path)
        return parse_network(text, source, seq)
    text, source, generated = imported_spec(name_or_path, seq)
    if not generated:
        return parse_network(text, source, seq)
    try:
        return parse_network(text, source)
    except DnnplanError as err:  # its line is the generated spec's: `dnnplan import` shows that text
        raise DnnplanError(err.bare, file=source, layer=err.layer, field=err.field,
                           hint=err.hint or f"`dnnplan import {short(name_or_path)}` shows the spec it makes") from None
