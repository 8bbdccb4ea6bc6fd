"""Reading a user's file: bytes, bounded in size, decoded as UTF-8, every failure one clear line.

Every loader of a user's file (network spec, machine, plan, profile table) reads through
:func:`read_text`, so a directory is called a directory, a binary or mis-encoded file is named with
the offset and line of its first bad byte, a FIFO, socket or device is refused before it is
opened (opening a FIFO waits for a writer), and a file too large to be what it claims to be is
refused before it is parsed (YAML is parsed at roughly a megabyte a second; a JSON profile table
far faster).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from networks.errors import DnnplanError
from networks.writing import target_kind

MIB = 2**20
#: A network spec, machine file or plan, in YAML or JSON: a plan for some 20,000 layers fits.
MAX_DOCUMENT_BYTES = 8 * MIB
#: A profile table (JSON): some million timed kernel calls fit.
MAX_TABLE_BYTES = 256 * MIB
#: An ONNX model: protobuf's limit for one message (larger models keep their weights in external
#: files, which are never read).
MAX_ONNX_BYTES = 2048 * MIB


def read_text(path: str | os.PathLike, what: str, *, limit: int = MAX_DOCUMENT_BYTES,
              missing_hint: str | None = None) -> str:
    """The text of the ``what`` file (``'network spec'``, ``'plan'``...) at ``path``; a
    :class:`DnnplanError` naming the file if it is missing, a directory, unreadable, larger than
    ``limit`` bytes or not UTF-8."""
    return decode(read_bytes(path, what, limit=limit, missing_hint=missing_hint), str(path), what)


def refuse_standard_input(path: str | os.PathLike, what: str) -> None:
    """``-``, standard input by the shell tools' convention, refused in one line: dnnplan reads a
    file (a pipe into ``-`` would else read a stale file of that name, or none)."""
    if str(path) == "-":
        raise DnnplanError(f"'-' names standard input, and a {what} is read from a file",
                           hint="save it to a file and name that; a file called '-' is ./-")


def read_bytes(path: str | os.PathLike, what: str, *, limit: int = MAX_DOCUMENT_BYTES,
               missing_hint: str | None = None) -> bytes:
    """The bytes of the ``what`` file at ``path`` (an ONNX model, or a text file before decoding);
    a :class:`DnnplanError` naming the file if it is missing, a directory, unreadable or larger
    than ``limit`` bytes, or ``-`` (:func:`refuse_standard_input`)."""
    refuse_standard_input(path, what)
    source = str(path)
    p = Path(path)
    try:
        if p.is_dir():
            raise DnnplanError(f"is a directory, not a {what} file", file=source,
                               hint=f"give the path of the {what} file inside it")  # not how to make one here
        _refuse_special(p, what, source)  # before open: opening a FIFO would wait for a writer
        # O_NONBLOCK: should a FIFO take the file's place after that check, opening it still does not wait
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with open(fd, "rb") as fh:
            _refuse_special(p, what, source, os.fstat(fh.fileno()).st_mode)
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise DnnplanError(f"is {size / MIB:.1f} MiB; a {what} file is at most {limit // MIB} MiB",
                                   file=source)
            data = fh.read(limit + 1)  # a file that grew since stat is bounded too
    except FileNotFoundError:
        raise DnnplanError(f"no such {what} file", file=source, hint=missing_hint) from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise DnnplanError(f"cannot read the {what}: {getattr(err, 'strerror', None) or err}", file=source) from None
    if len(data) > limit:
        raise DnnplanError(f"is larger than {limit // MIB} MiB, the most a {what} file may be", file=source)
    return data


def _refuse_special(p: Path, what: str, source: str, mode: int | None = None) -> None:
    """A FIFO, socket or device given as a ``what`` file is refused (reading one could wait forever
    or never end)."""
    kind = target_kind(str(p)) if mode is None else (None if stat.S_ISREG(mode) else "not a regular file")
    if kind is not None:
        raise DnnplanError(f"is {kind}, not a {what} file", file=source,
                           hint="give the path of a regular file, not a pipe or device")


def decode(data: bytes, source: str, what: str) -> str:
    """``data`` as UTF-8 text (a byte-order mark dropped); a DnnplanError at the first bad byte."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DnnplanError(f"is not UTF-8 text (byte 0x{data[err.start]:02x} at offset {err.start})",
                           file=source, line=line,
                           hint=f"a {what} is a text file; save it as UTF-8") from None
