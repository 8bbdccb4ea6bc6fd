"""Profile tables on disk: atomic JSON writes, reading with clear errors, the per-user cache.

The format lives in :mod:`costmodel.profile_table` (and the compute model over it in
:mod:`costmodel.profiled_compute`); this is the file edge. The cache holds one table per
(fingerprint, threads) under ``$XDG_CACHE_HOME/dnnplan`` or ``~/.cache/dnnplan`` (override with
``$DNNPLAN_CACHE``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

from costmodel.profile_table import (ProfileTable, fingerprint_id, foreign_reason, merge, table_from_dict,
                                     table_to_dict)
from networks.errors import DnnplanError
from networks.reading import MAX_TABLE_BYTES, read_text

#: Tables shipped with the package, by name (none yet: one placed here also needs pyproject's package data)
SHIPPED_DIR = Path(__file__).parent / "profiles"


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


def read_table(path: str | os.PathLike) -> ProfileTable:
    path = str(path)
    if not os.path.exists(path) and shipped_table_path(path):
        path = str(shipped_table_path(path))
    text = read_text(path, "profile table", limit=MAX_TABLE_BYTES,
                     missing_hint="run `dnnplan profile NETWORK --out FILE` first")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DnnplanError(f"profile table is corrupt: invalid JSON at line {err.lineno} ({err.msg})",
                           file=path, hint="delete it and run `dnnplan profile` again") from None
    except (RecursionError, ValueError) as err:  # deep nesting; a number past Python's 4,300-digit limit
        why = "its JSON nests too deeply" if isinstance(err, RecursionError) else str(err)
        raise DnnplanError(f"profile table is corrupt: {why}", file=path,
                           hint="delete it and run `dnnplan profile` again") from None
    return table_from_dict(data, path)


def load_table(path: str | os.PathLike) -> ProfileTable:
    """Read a table file, or a shipped table by name (:func:`read_table`)."""
    return read_table(path)


def write_table(table: ProfileTable, path: str | os.PathLike) -> None:
    """Write atomically: a temporary file in the same directory, flushed, then renamed over."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(table_to_dict(table), fh, indent=1, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
