"""Scratch folders a command works in (a run's plan and results, a probe's files), removed when it
ends however it ends, and when it cannot remove them itself (killed outright: ``kill -9``, the
machine's own end), by the next command that makes one.

:func:`scratch_folder` makes ``dnnplan-<what>-XXXX`` in the temporary folder with an owner file
naming this process (its pid and start time), removed with it on the way out; making one first
removes the others whose owner is gone (no such process, or another process under that pid since).
A folder without an owner file is never touched.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: every scratch folder's name starts so (and its kind follows: dnnplan-run-, dnnplan-validate-)
PREFIX = "dnnplan-"
#: the file in a scratch folder naming the process that made it: "PID START"
OWNER = ".owner"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (its start time in clock ticks since boot, /proc's field 22), or
    None where it is not running or this system has no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_alive(folder: Path) -> bool:
    """Whether the process that made ``folder`` still runs (True where it cannot be told)."""
    try:
        pid, start = (folder / OWNER).read_text(encoding="ascii").split()
        pid_ = int(pid)
    except (OSError, ValueError):
        return True  # no owner file, or one being written: not ours to remove
    if not os.path.exists("/proc/self/stat"):
        return True
    return process_start(pid_) == start


def remove_orphans(base: str | None = None) -> list[str]:
    """Remove the scratch folders in ``base`` (the temporary folder) whose owner is gone; the ones removed."""
    removed = []
    root = Path(base or tempfile.gettempdir())
    try:
        folders = [p for p in root.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return removed
    for folder in folders:
        if not _owner_alive(folder):
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(str(folder))
    return removed


@contextmanager
def scratch_folder(what: str, base: str | None = None) -> Iterator[str]:
    """A new ``dnnplan-<what>-XXXX`` folder, owned by this process, removed on the way out (module
    docstring); the orphans of killed commands are removed first."""
    remove_orphans(base)
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{what}-", dir=base) as folder:
        start = process_start(os.getpid())
        if start is not None:
            Path(folder, OWNER).write_text(f"{os.getpid()} {start}", encoding="ascii")
        yield folder
