"""How a plan file names the files it was made from (it asks only whether paths exist): a network spec,
Hugging Face folder or ONNX file, or a machine YAML, by its path from the plan file's own folder, so
the plan reads back from any working folder; a zoo network or shipped machine by its name."""

from __future__ import annotations

import os

#: the plan's keys that may name a file (a network spec or Hugging Face config, a machine YAML)
FILE_KEYS = ("network", "machine")


def _names_a_path(ref: str, folder: str = ".") -> bool:
    """Whether a plan's network or machine is a path (a folder in it, a spec's, config's or ONNX
    file's suffix, or a folder in ``folder``: a Hugging Face model's, which the loader reads before
    a zoo name), not a zoo network or shipped machine's name."""
    return ("/" in ref or os.sep in ref or ref.endswith((".yaml", ".yml", ".json", ".onnx"))
            or os.path.isdir(os.path.join(folder, ref)))


def from_plan_folder(ref: str, path: str) -> str:
    """``ref`` (a path from the working folder, or a name) as the plan at ``path`` records it: a
    relative path from the plan's folder (``./`` first where it is there), a name as it is."""
    if not _names_a_path(ref) or os.path.isabs(ref) or not os.path.exists(ref):
        return ref
    rel = os.path.relpath(os.path.abspath(ref), os.path.dirname(os.path.abspath(path)))
    return rel if rel.startswith("..") else os.path.join(".", rel)


def in_plan_folder(ref: str, path: str) -> str:
    """A relative path the plan at ``path`` records, from the working folder: from the plan's folder
    where it is there, else as recorded (a plan written relative to the folder it was made in)."""
    if not _names_a_path(ref, os.path.dirname(path) or ".") or os.path.isabs(ref):
        return ref
    there = os.path.normpath(os.path.join(os.path.dirname(path), ref))
    return there if os.path.exists(there) else ref
