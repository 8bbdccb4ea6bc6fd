"""Files the command line writes for scripts (JSON results, traces), and the checks made on an
output path before any work starts: its folder must exist (none is created: a mistyped folder
is a mistake to report, not one to act on) and take new files, and an existing file is replaced
only with --force.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from dnnplan.render.terminal.messages import warn
from networks.errors import DnnplanError, short
from networks.writing import SystemFailure, check_target, reason, standard_stream, write_file


def check_output_folder(path: str) -> None:
    """Raise :class:`DnnplanError` unless ``path`` can be a file in an existing folder (for an
    output that may already exist, such as a profile table that is resumed)."""
    target = Path(path)
    parent = target.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise DnnplanError(f"cannot write {path}: the folder {parent} {what}",
                           hint="create it first, or pass a path in an existing folder")
    if target.is_dir():
        raise DnnplanError(f"cannot write {path}: it is a folder", hint="pass a file name")
    if check_target(path) is None:  # a file, new or not: written beside itself (a device or FIFO is written through)
        check_writable(parent, path)


def check_writable(folder: Path, path: str) -> None:
    """Create and remove a file in ``folder``, where ``path`` will be written (atomically, by a
    file beside it: networks.writing), so that a folder the command cannot write in is said before
    its work starts, not after (a permission, a read-only mount): one line, the system's failure
    (exit 74, as a write that fails later is)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".dnnplan-probe-", dir=folder)
    except OSError as err:
        raise SystemFailure(f"cannot write {path}: the folder {folder} does not take new files ({reason(err)})",
                            hint="pass a path in a folder you can write") from None
    os.close(fd)
    try:
        os.unlink(probe)
    except OSError:
        pass


def check_output(path: str | None, force: bool = False) -> None:
    """Check an output file before the work that produces it starts: its folder must exist, and
    an existing file is replaced only when ``force`` (--force). None (no output asked for) passes."""
    if path is None:
        return
    check_output_folder(path)
    if check_target(path) is not None:  # a device or a FIFO is written through, nothing replaced: no --force
        return
    if os.path.lexists(path) and not force:
        raise DnnplanError(f"{path} already exists", hint="pass --force to replace it")


def check_outputs(paths: dict[str, str | None], force: bool = False, reads: tuple[str | None, ...] = ()) -> None:
    """:func:`check_output` for each option's file (option -> path); two options may not name one
    file, nor one name a file the command reads (``reads``: with --force the input would be
    replaced by what is made of it); --force with none of them given is said to change nothing
    (one warning line)."""
    for opt, p in paths.items():
        named(opt, p)
    given = {opt: p for opt, p in paths.items() if p}
    for opt, path in given.items():
        for read in reads:
            if read and os.path.isfile(read) and os.path.realpath(read) == os.path.realpath(path):
                raise DnnplanError(f"{opt} {path} names the file this command reads, which it would replace",
                                   hint="write the output to another file")
    if force and not given:
        warn(f"--force changes nothing: it replaces the file {' or '.join(paths)} names, and none is given")
    seen: dict[str, str] = {}
    for opt, path in given.items():
        real = os.path.realpath(path)
        if real in seen:
            raise DnnplanError(f"{seen[real]} and {opt} name the same file {path}", hint="pass two files")
        seen[real] = opt
        check_output(path, force)


def json_beside(as_json: bool, out: str | None, opt: str = "--out") -> None:
    """--json prints one JSON object on standard output: an output file written there too (``--out
    -``, ``/dev/stdout``) would leave it no longer JSON; refused in one line."""
    if as_json and out and standard_stream(out):
        raise DnnplanError(f"--json and {opt} {out} both write standard output, which --json keeps for its object",
                           hint=f"write {opt} to a file, or drop --json")


def named(opt: str, path: str | None) -> str | None:
    """``path``, refused in one line where it is empty: no file, not the option left out (``--out
    ''`` wrote nothing and said nothing; a profile's went to the per-user cache)."""
    if path is not None and not path.strip():
        raise DnnplanError(f"{opt} {short(path)} names no file", hint=f"name the file, or leave {opt} out")
    if path == "-":  # the shell tools' standard output: a file called '-' would be written instead
        raise DnnplanError(f"{opt} - : dnnplan names standard output /dev/stdout",
                           hint=f"{opt} /dev/stdout, or name a file; a file called '-' is ./-")
    return path


def is_stdout(path: str | None) -> bool:
    """Whether ``path`` names this process's standard output (``--json /dev/stdout``, a pipe or a
    terminal): the command's tables then go to stderr, so what stdout carries is the JSON alone."""
    if not path:
        return False
    try:
        there, out = os.stat(path), os.fstat(1)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (out.st_dev, out.st_ino)


def tables_to_stderr(*consoles) -> None:
    """The consoles the command's tables print on, moved to stderr (:func:`is_stdout`)."""
    for console in consoles:
        console.stderr = True


def write_json_file(path: str, data: dict) -> None:
    """Atomic (networks.writing): a failed run never leaves a partial file, and a failure of the
    system is one line (SystemFailure) with the old file intact. The folder must exist (never created)."""
    check_output_folder(path)
    write_file(path, json.dumps(data, indent=1))
