"""Which files are imported rather than read as specs, and reading them (the importers' one I/O edge).

A network argument is imported when it is a ``.onnx`` file, a folder (holding a Hugging Face
``config.json``) or a ``.json`` file holding a Hugging Face config (an object with ``model_type``);
a ``.json`` file without one is a network spec written as JSON, which YAML reads as it is. Every
file is read through :mod:`networks.reading` (bounded, each failure one line). The importers
themselves are imported when a file is imported: a zoo name or a spec never loads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from networks.errors import DnnplanError, short
from networks.ir import Network
from networks.reading import MAX_ONNX_BYTES, read_bytes, read_text, refuse_standard_input
from networks.spec import parse_network

CONFIG = "config.json"
HF_WHAT = "Hugging Face config"


def _exists(path: Path, check) -> bool:
    try:
        return check(path)
    except (OSError, ValueError):  # a name too long for a path, a NUL byte
        return False


def is_importable(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a file or folder an importer reads (not a spec or a zoo name)."""
    path = Path(name_or_path)
    return path.suffix.lower() in (".onnx", ".json") or _exists(path, Path.is_dir)


def _model_name(path: Path) -> str:
    """The network's name: the folder's for a config.json (Hugging Face keeps one model a folder),
    else the file's stem."""
    if path.name == CONFIG:
        folder = path.resolve().parent.name
        return folder or "model"
    return path.stem or "model"


def imported_spec(name_or_path: str, seq: int | None = None) -> tuple[str, str, bool]:
    """(spec YAML text, source, whether the text was made by an importer) for an importable
    ``name_or_path`` (:func:`is_importable`); a ``.json`` network spec comes back as it is."""
    path = Path(name_or_path)
    if path.suffix.lower() == ".onnx":
        from networks.importers.onnx.importer import import_onnx  # noqa: PLC0415 - deferred (module docstring)

        data = read_bytes(path, "ONNX model", limit=MAX_ONNX_BYTES)
        return import_onnx(data, str(path), seq, name=_model_name(path)), str(path), True
    if _exists(path, Path.is_dir):
        inner = path / CONFIG
        if not _exists(inner, Path.is_file):
            try:  # an ONNX model the folder holds: named, as the file to give
                onnx = sorted(p.name for p in path.iterdir() if p.suffix.lower() == ".onnx")[:1]
            except OSError:
                onnx = []
            hint = (f"give the ONNX model itself: {path / onnx[0]}" if onnx else
                    "give a network spec, a config.json or a folder holding one, or a .onnx file")
            raise DnnplanError(f"is a directory, not a network spec file, and holds no {CONFIG} (a Hugging Face "
                               "model's folder has one)", file=str(path), hint=hint)
        path = inner
    text = read_text(path, HF_WHAT if path.name == CONFIG else "Hugging Face config or network spec")
    if path.name != CONFIG and not _is_hf_config(text):
        return text, str(path), False  # a network spec written as JSON
    from networks.importers.hf.importer import import_config  # noqa: PLC0415 - deferred (module docstring)

    return import_config(text, str(path), seq, name=_model_name(path)), str(path), True


def _is_hf_config(text: str) -> bool:
    """A JSON object naming a model_type (or not JSON at all: the config reader says what is wrong)."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return True
    return not isinstance(data, dict) or "model_type" in data or "layers" not in data


@dataclass(frozen=True)
class Imported:
    """What ``dnnplan import`` made: the spec's YAML text and the network it describes."""

    text: str
    network: Network
    source: str


def import_model(name_or_path: str, seq: int | None = None) -> Imported:
    """Import a Hugging Face config (or its folder) or an ONNX file: its spec and the network."""
    if not name_or_path.strip():
        raise DnnplanError(f"{short(name_or_path)} names no model to import",
                           hint="give a Hugging Face config.json, a folder holding one, or a .onnx file")
    refuse_standard_input(name_or_path, "model")
    if not is_importable(name_or_path) or not _exists(Path(name_or_path), Path.exists):
        what = "not a model to import" if _exists(Path(name_or_path), Path.exists) else "no such file or folder"
        raise DnnplanError(what, file=name_or_path,
                           hint="give a Hugging Face config.json, a folder holding one, or a .onnx file")
    text, source, generated = imported_spec(name_or_path, seq)
    if not generated:
        raise DnnplanError("is a network spec already (written as JSON), not a Hugging Face config", file=source,
                           hint="a Hugging Face config names its model_type")
    try:
        network = parse_network(text, source)
    except DnnplanError as err:  # a line of the spec made here, not of the user's file: the layer and the file
        raise DnnplanError(err.bare, file=source, layer=err.layer,
                           hint=err.hint or "the sizes the file gives make this layer; check them") from None
    return Imported(text, network, source)
