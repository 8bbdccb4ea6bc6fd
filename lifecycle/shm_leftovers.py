"""Shared-memory files a job's ranks leave behind when they are stopped, removed when the job ends.

MPICH (the ``mpich`` wheel's) keeps each node's shared-memory segment as a file,
``/dev/shm/mpich_shm_<id>_<n>``, from ``MPI_Init`` until ``MPI_Finalize`` removes it. A rank
stopped before it finalises (Ctrl-C on ``dnnplan execute``, a time-out, SIGTERM to the command)
leaves it: one to two MiB of memory each, held until the machine restarts (the test suite's
stopped jobs alone left 576 MiB on the development VM). :func:`before` lists those files when a
job starts; :func:`remove_left` removes the ones the job made (not listed before, owned by this
user) that no live process has mapped any more, once the job has ended. A file another job
still maps is never removed; where there is no ``/dev/shm`` (not Linux) nothing is done. A rank
whose launcher is gone (``kill -9``: no launcher is left to clean up after it) removes the files
it maps itself before it exits (:func:`remove_own`): the job is over, and a file removed while
mapped stays readable to the processes that map it.
"""

from __future__ import annotations

import os
import time

#: where POSIX shared memory lives on Linux
SHM_DIR = "/dev/shm"
#: the names MPICH gives its shared-memory files, and UCX (which the wheel's MPICH may use) its own
PREFIXES = ("mpich_shm_", "ucx_shm_posix_")
#: how long a file still mapped when the job ended is waited for, and how often it is looked at [s]
SETTLE_S = 1.0
SETTLE_EVERY_S = 0.05


def _ours(shm_dir: str) -> set[str]:
    """The MPI shared-memory files in ``shm_dir`` this user owns."""
    try:
        entries = list(os.scandir(shm_dir))
    except OSError:
        return set()
    uid = os.getuid() if hasattr(os, "getuid") else None
    out = set()
    for entry in entries:
        if not entry.name.startswith(PREFIXES):
            continue
        try:
            if uid is None or entry.stat(follow_symlinks=False).st_uid == uid:
                out.add(entry.name)
        except OSError:
            continue
    return out


def before(shm_dir: str = SHM_DIR) -> frozenset[str]:
    """The MPI shared-memory files there before a job starts."""
    return frozenset(_ours(shm_dir))


def mapped(paths: set[str], proc: str = "/proc") -> set[str]:
    """Those of ``paths`` some live process has mapped (its ``/proc/PID/maps`` names it)."""
    found: set[str] = set()
    try:
        pids = [name for name in os.listdir(proc) if name.isdigit()]
    except OSError:
        return set(paths)  # cannot tell: every file counts as in use
    for pid in pids:
        try:
            with open(os.path.join(proc, pid, "maps"), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue
        found.update(path for path in paths if path in text)
        if found == paths:
            break
    return found


def remove_left(earlier: frozenset[str], shm_dir: str = SHM_DIR, proc: str = "/proc",
                settle_s: float = SETTLE_S) -> list[str]:
    """Remove the files the ended job left (module docstring): their names, as removed. A file
    still mapped is waited for up to ``settle_s`` (a rank killed a moment ago may still be
    leaving), then left."""
    new = {os.path.join(shm_dir, name) for name in _ours(shm_dir) - earlier}
    removed: list[str] = []
    deadline = time.monotonic() + settle_s
    while new:
        for path in sorted(new - mapped(new, proc)):
            new.discard(path)
            try:
                os.unlink(path)
            except OSError:
                continue
            removed.append(os.path.basename(path))
        if not new or time.monotonic() >= deadline:
            break
        time.sleep(SETTLE_EVERY_S)
    return removed


def remove_own(shm_dir: str = SHM_DIR, maps: str = "/proc/self/maps") -> list[str]:
    """Remove the MPI shared-memory files this process maps (module docstring): their names."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    prefix = shm_dir.rstrip("/") + "/"
    removed = []
    for path in sorted({line.split(None, 5)[-1].removesuffix(" (deleted)") for line in lines
                        if len(line.split(None, 5)) == 6}):
        if not (path.startswith(prefix) and os.path.basename(path).startswith(PREFIXES)):
            continue
        try:
            os.unlink(path)
        except OSError:
            continue
        removed.append(os.path.basename(path))
    return removed
