"""Profile tables on disk: reading with clear errors, the per-user cache, and writes that merge:
each write reads the file again under its lock and adds to it, so runs sharing a table keep
every measurement (two `dnnplan profile --out t.json` at once, two plans filling the cache).

The format lives in :mod:`costmodel.compute.profile_table` (and the compute model over it in
:mod:`costmodel.compute.profiled`); this is the file edge. The cache holds one table per
(fingerprint, threads) under ``$XDG_CACHE_HOME/dnnplan`` or ``~/.cache/dnnplan`` (override with
``$DNNPLAN_CACHE``).
"""

from __future__ import annotations

import json
import re
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from costmodel.compute.profile_table import (ProfileTable, fingerprint_id, foreign_reason, merge, table_from_dict,
                                             table_to_dict)
from networks.errors import DnnplanError
from networks.reading import MAX_TABLE_BYTES, read_text
from networks.spec_yaml import DIGITS
from networks.writing import failure, target_kind, write_file
from profiler.tables.lock import locked

#: Tables shipped with the package, by name (``--profile h100-bf16``; pyproject's package data ships them)
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "profiles"  # profiler/profiles/


def cache_dir() -> Path:
    if os.environ.get("DNNPLAN_CACHE"):
        return Path(os.environ["DNNPLAN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "dnnplan"


def cache_path(fp: Mapping[str, Any]) -> Path:
    ranks = f"-{fp['concurrency']}r" if fp.get("concurrency", 1) > 1 else ""
    kernels = f"-k{fp['kernels']}" if fp.get("kernels") is not None else ""  # older kernels: another file
    return cache_dir() / f"profile-{fp.get('backend')}-{fp.get('threads')}t{ranks}{kernels}-{fingerprint_id(fp)}.json"


def earlier_cache_paths(fp: Mapping[str, Any]) -> list[Path]:
    """The cache files of the same device, threads and ranks for earlier kernel revisions, the
    latest first (last: the name from before revisions were named)."""
    rev = fp.get("kernels")
    if rev is None:
        return []
    return [cache_path({**fp, "kernels": r}) for r in range(int(rev) - 1, 0, -1)] + \
        [cache_path({**fp, "kernels": None})]


def shipped_table_path(name: str) -> Path | None:
    """A shipped table by name (``profiler/profiles/NAME.json``), or None."""
    path = SHIPPED_DIR / f"{name}.json"
    return path if path.is_file() else None


def shipped_table_names() -> list[str]:
    """The names ``--profile`` takes for the shipped tables."""
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.json"))


def resolve_table(path: str | os.PathLike) -> str:
    """``path``, or the shipped table of that name when no such file exists."""
    path = str(path)
    shipped = None if os.path.exists(path) else shipped_table_path(path)
    return str(shipped) if shipped else path


#: the fix for a file that does not read as a profile table: never "delete it" (it may be the user's own file)
NOT_A_TABLE = ("give a profile table, or a new file for `dnnplan profile --out`; a table cut short is profiled again "
               "into a new file")


def read_table(path: str | os.PathLike) -> ProfileTable:
    path = resolve_table(path)
    shipped = ", ".join(shipped_table_names())
    text = read_text(path, "profile table", limit=MAX_TABLE_BYTES,
                     missing_hint="run `dnnplan profile NETWORK --out FILE` first"
                     + (f", or name a shipped table: {shipped}" if shipped else ""))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if re.search(r"^network:", text, re.M) and re.search(r"^layers:", text, re.M):
            raise DnnplanError("is a dnnplan plan, not a profile table", file=path,
                               hint="give a profile table, or a new file for `dnnplan profile --out`") from None
        raise DnnplanError(f"is not a profile table: invalid JSON at line {err.lineno} ({err.msg})",
                           file=path, hint=NOT_A_TABLE) from None
    except (RecursionError, ValueError) as err:  # deep nesting; a number past Python's 4,300-digit limit
        why = "its JSON nests too deeply" if isinstance(err, RecursionError) else DIGITS
        raise DnnplanError(f"is not a profile table: {why}", file=path, hint=NOT_A_TABLE) from None
    return table_from_dict(data, path)


def load_table(path: str | os.PathLike) -> ProfileTable:
    """Read a table file, or a shipped table by name (:func:`read_table`)."""
    return read_table(path)


def write_table(table: ProfileTable, path: str | os.PathLike) -> ProfileTable:
    """Merge ``table`` into the file at ``path`` and write it atomically (networks.writing), under
    the file's lock (profiler.tables.lock): what another process wrote there since this one read it
    is kept (``table`` wins a key both have). The table written is returned. A failure of the
    system is :class:`networks.writing.SystemFailure`, the file left as it was."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # the per-user cache's folder
    except OSError as err:
        raise failure("making its folder", err, str(path)) from None
    check_table_target(str(path))
    with locked(str(path)):
        merged = _onto_file(table, path)
        write_file(path, json.dumps(table_to_dict(merged), indent=1, sort_keys=False) + "\n")
    return merged


def check_table_target(path: str) -> None:
    """A profile table is read, merged and written back: it must be a file (or not exist yet)."""
    kind = target_kind(path)
    if kind is not None:
        raise DnnplanError(f"is {kind}; a profile table must be a file", file=path,
                           hint="pass the path of a file (new, or a table to add to)")


def _onto_file(table: ProfileTable, path: Path) -> ProfileTable:
    """``table`` over what the file at ``path`` holds now: entries of both (``table``'s where both
    have one), ``table``'s comm fits when it has any, else the file's."""
    if not path.exists():
        return table
    on_disk = read_table(path)
    why = foreign_reason(on_disk.fingerprint, table.fingerprint)
    if why:  # another device's table took its place meanwhile: not overwritten
        raise DnnplanError(f"profile table now belongs to another device or setting ({why})", file=str(path),
                           hint="pass a new --out file")
    return replace(table, entries={**on_disk.entries, **table.entries},
                   executor={**on_disk.executor, **table.executor}, comm=dict(table.comm or on_disk.comm))


def open_for_device(path: str | os.PathLike | None, fp: Mapping[str, Any]) -> ProfileTable:
    """The table at ``path`` to resume into (empty when absent); a table of another device is refused."""
    if path is None or not os.path.exists(path):
        return ProfileTable(dict(fp), {}, {}, str(path or "<new>"))
    table = read_table(path)
    why = foreign_reason(table.fingerprint, fp)
    if why:
        raise DnnplanError(f"profile table belongs to another device or setting ({why})", file=str(path),
                           hint="pass a new --out file, or the --threads / --backend it was made with")
    return merge(table, ProfileTable(dict(fp), {}, {}, str(path)))
