"""An advisory lock on a shared file (a profile table, the per-user cache), held while it is read,
merged and written.

The lock is ``flock`` on a lock file beside the table (``.NAME.lock``, removed by its holder when
done), so it is let go the moment its holder ends, however it ends (even ``kill -9``). The holder
writes its pid into the lock file: a lock that cannot be had within ``wait_s`` is reported naming
that pid, not waited on forever. Should the recorded holder be gone while the lock is still held (a
process it forked keeps the lock's descriptor), the lock is stale: after it has been seen so for a
second, the lock file is removed and a new one taken.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from contextlib import contextmanager
from typing import Iterator

from networks.writing import SystemFailure, failure, umask
from lifecycle.jobs import launcher_alive

#: How long a writer waits for another to finish writing the same table [s]
WAIT_S = 60.0
POLL_S = 0.05
#: How long a lock whose recorded holder is gone must stay held before it is taken as stale [s]
STALE_AFTER_S = 1.0


def lock_path(path: str) -> str:
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(folder, f".{name}.lock")


@contextmanager
def locked(path: str, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the lock of the file ``path`` for the block; :class:`SystemFailure` when it cannot be
    had within ``wait_s`` seconds or the lock file cannot be made."""
    where = lock_path(path)
    fd = _acquire(where, wait_s, path)
    try:
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid only names the holder in a message; a full disk must not stop the write
        yield
    finally:
        if _same_file(fd, where):
            _remove(where)  # no lock file left beside the table; a waiter on it sees it gone and retries
        os.close(fd)  # lets the lock go


def _open(where: str) -> int:
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666 & ~umask())
    except OSError as err:
        raise failure("making its lock file", err, where) from None
    return fd


def _acquire(where: str, wait_s: float, path: str) -> int:
    """A descriptor of the lock file ``where`` (of the file ``path``), locked."""
    deadline = time.monotonic() + wait_s
    gone_since: float | None = None
    while True:
        fd = _open(where)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            except OSError as err:  # a file system without flock: the table is written unlocked
                if err.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK):
                    return fd
                os.close(fd)
                raise failure("locking it", err, where) from None
            else:
                if _same_file(fd, where):
                    return fd
                break  # the lock file was removed meanwhile (stale): lock the new one
            holder = _holder(fd)
            now = time.monotonic()
            if holder is not None and not _alive(holder):
                gone_since = gone_since or now
                if now - gone_since >= STALE_AFTER_S and _same_file(fd, where):
                    _remove(where)  # whoever holds it holds a lock on a name no longer there
                    break
            else:
                gone_since = None
            if now >= deadline:
                os.close(fd)
                who = f"pid {holder}" if holder is not None else "another process"
                raise SystemFailure(f"another dnnplan ({who}) has been writing this table for more than "
                                    f"{wait_s:g} s (its lock {where} is still held)", file=path,
                                    hint="wait for it to finish, or end it, and run again")
            time.sleep(POLL_S)
        os.close(fd)


def _same_file(fd: int, where: str) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(where)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _holder(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    return launcher_alive(pid, "")


def _remove(where: str) -> None:
    try:
        os.unlink(where)
    except OSError:
        pass
