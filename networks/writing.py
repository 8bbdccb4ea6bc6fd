"""Writing every file the tool writes: checked, atomic, with the user's umask.

:func:`write_file` is the one way a file is written (plans, profile tables and the per-user cache,
JSON results, traces, reports, figures): the bytes go to a temporary file in the target's folder,
which is flushed and synced to disk, given the mode the user's umask allows (``0666 & ~umask``,
as ``open()`` would), renamed over the target, and the folder synced. A failure anywhere (no
space, a read-only or failing mount, a permission) removes the temporary file, leaves the
previous file as it was, and raises :class:`SystemFailure`: one line naming the file, the step
that failed and the system's reason. A character device or a FIFO named as the target (``/dev/null``,
``/dev/stdout`` when it is a pipe, ``/dev/full``) is written through, not replaced, and its failure
reported the same way; a block device, a socket or anything else that is not a file is refused
(:func:`check_target`).
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import sys
import tempfile

from networks.errors import DnnplanError

#: Exit code of a command that a failure of the system stopped (sysexits' EX_IOERR): docs/errors.md
EXIT_SYSTEM = 74
#: How a rank's one line starts when the system failed under it (the launcher exits EXIT_SYSTEM)
SYSTEM_FAILED = "the system failed: "
#: What an existing target that is not a regular file is, by its mode
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
#: The paths that name this process's own standard output or error: written into that stream, after
#: what it holds (a redirection to a file, ``> out.txt``, is not replaced by the file written)
STANDARD_STREAMS = {"/dev/stdout": 1, "/dev/fd/1": 1, "/proc/self/fd/1": 1,
                    "/dev/stderr": 2, "/dev/fd/2": 2, "/proc/self/fd/2": 2}
#: what such a target is
STANDARD = "this process's standard output or error"
#: Targets written through (nothing to rename over: the device, the pipe or the stream is the destination)
_THROUGH = ("a character device", "a FIFO", STANDARD)
_HINTS = {errno.ENOSPC: "free some space or write elsewhere", errno.EDQUOT: "free some space or write elsewhere",
          errno.EROFS: "the file system is read-only; write elsewhere",
          errno.EACCES: "you may not write there; write elsewhere",
          errno.EPERM: "you may not write there; write elsewhere",
          errno.ENXIO: "no process is reading that FIFO"}


class SystemFailure(Exception):
    """The world around the tool failed: a full disk, a read-only or failing mount, a permission,
    a lock held too long. Not a mistake in the input, and not a bug: the command line shows the
    one line ``str(err)`` and exits with its own code (docs/errors.md)."""

    def __init__(self, message: str, *, file: str | None = None, hint: str | None = None):
        super().__init__(str(DnnplanError(message, file=file, hint=hint)))  # the same one-line form


def reason(err: OSError) -> str:
    """The system's reason for ``err``, with its symbolic name: ``No space left on device (ENOSPC)``."""
    name = errno.errorcode.get(err.errno or 0)
    text = err.strerror or str(err)
    return f"{text} ({name})" if name else text


def failure(step: str, err: OSError, path: str, kept: bool = True) -> SystemFailure:
    """The error for ``step`` failing on ``path`` (``kept``: say that the previous file is untouched)."""
    hint = _HINTS.get(err.errno or 0)
    if kept:
        hint = (hint + "; " if hint else "") + "any previous file there is unchanged"
    return SystemFailure(f"could not be written: {step} failed: {reason(err)}", file=path, hint=hint)


def shell_word(path: str) -> str:
    """``path`` as one shell word naming it, for a command the user pastes: quoted where a shell
    would split it (a space), ``./`` before a name that starts with ``-`` (else an option)."""
    return shlex.quote("./" + path if path.startswith("-") else path)


def standard_stream(path: str) -> bool:
    """Whether ``path`` names this process's standard output or error (``/dev/stdout``...): what is
    written there is the output itself, so no line says it was written."""
    return os.path.normpath(path) in STANDARD_STREAMS


def target_kind(path: str) -> str | None:
    """What the existing ``path`` is when it is not a regular file ("a FIFO"...; :data:`STANDARD` for
    ``/dev/stdout`` and the like, whatever the stream is); None when it is a regular file or does not exist."""
    if standard_stream(path):
        return STANDARD
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def check_target(path: str) -> str | None:
    """Refuse (DnnplanError) a target that can be neither replaced nor written through; the kind of
    a target written through ("a character device", "a FIFO"), or None for a file (new or not)."""
    kind = target_kind(path)
    if kind is not None and kind not in _THROUGH:
        raise DnnplanError(f"cannot write here: it is {kind}, not a file", file=path,
                           hint="pass the path of a file (new, or one to replace)")
    return kind


def umask() -> int:
    """This process's umask, read from /proc where it can be (setting it to read it back is not
    safe while other threads create files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        old = os.umask(0o022)
        os.umask(old)
        return old


def write_file(path: str | os.PathLike, data: str | bytes, replace: bool = True) -> None:
    """Write ``data`` (text is UTF-8) to ``path``: atomically for a file, written through for a
    character device or FIFO; :class:`SystemFailure` on any failure of the system, the previous
    file intact. The folder must exist (it is never created here). ``replace`` False (a command's
    output without --force, checked absent when the command started): a file another process made
    there meanwhile is kept, and this one is refused in one line (two commands given one new
    ``--out``: each said it wrote the file, and the first's was lost)."""
    path = os.fspath(path)
    body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    kind = check_target(path)
    if kind is not None:
        _write_through(path, body, kind)
        return
    real = os.path.realpath(path)  # a symbolic link is followed: the file it names is replaced
    folder = os.path.dirname(real) or "."
    step, fd, tmp = "creating a temporary file beside it", None, None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(real)}.", suffix=".tmp")
        step = "writing it"
        os.fchmod(fd, 0o666 & ~umask())  # mkstemp makes it 0600; a file written by open() gets the umask's mode
        _write_all(fd, body)
        step = "syncing it to disk"
        os.fsync(fd)
        os.close(fd)
        fd = None
        step = "renaming it into place"
        if replace:
            os.replace(tmp, real)
        else:
            _place_new(tmp, real, path)
        tmp = None
        step = "syncing its folder"
        _sync_folder(folder)
    except OSError as err:
        raise failure(step, err, path, kept=tmp is not None or step == "creating a temporary file beside it") from None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            _remove(tmp)


def _place_new(tmp: str, real: str, path: str) -> None:
    """``tmp`` in place as ``real``, which must not exist: a hard link made only if nothing is there
    (atomic), then the temporary name removed; where the file system takes no hard links, renamed
    after a last look."""
    made = DnnplanError(f"{path} was made by another process while this one worked: it is kept",
                        hint="pass --force to replace it, or give another path")
    try:
        os.link(tmp, real)
    except FileExistsError:
        raise made from None
    except OSError:  # no hard links here (some network and FAT file systems)
        if os.path.lexists(real):
            raise made from None
        os.replace(tmp, real)
        return
    _remove(tmp)


def _write_through(path: str, body: bytes, kind: str) -> None:
    """Write into a character device or a FIFO (a FIFO nobody reads is an error, not a wait), or
    into this process's standard stream itself, after what was printed to it (flushed first)."""
    if kind == STANDARD:
        fd = STANDARD_STREAMS[os.path.normpath(path)]
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    stream.flush()
            _write_all(fd, body)
        except OSError as err:
            raise failure(f"writing it ({kind})", err, path, kept=False) from None
        return
    step = "opening it"
    try:
        fd = os.open(path, os.O_WRONLY | (os.O_NONBLOCK if kind == "a FIFO" else 0))
        try:
            os.set_blocking(fd, True)
            step = "writing it"
            _write_all(fd, body)
        finally:
            os.close(fd)
    except OSError as err:
        raise failure(f"{step} ({kind})", err, path, kept=False) from None


def _write_all(fd: int, body: bytes) -> None:
    view = memoryview(body)
    while view:
        view = view[os.write(fd, view):]


def _sync_folder(folder: str) -> None:
    """fsync the folder, so the rename survives a crash; a file system that cannot (EINVAL) is let be."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
