"""The ``dnnplan`` console script's first code: a stop signal while the command's modules load ends
it at once, quietly (exit 128 + the signal), not in a traceback; the command then handles them
itself (:func:`dnnplan.cli.main`, lifecycle.stops)."""

import codecs
import os
import re
import sys
import unicodedata

from lifecycle import stops

#: the characters dnnplan writes beyond ASCII, as an ASCII-only terminal gets them (tables' boxes:
#: rich draws them in ASCII where the stream's encoding is not UTF)
NEAREST_ASCII = {"µ": "u", "×": "x", "—": "--", "–": "-", "→": "->", "≤": "<=", "≥": ">=", "…": "...", "∩": "&",
                 "’": "'", "‘": "'", "“": '"', "”": '"', "±": "+-", "≈": "~", "·": "."}
#: the error handler of a standard stream that cannot write them (:func:`ascii_where_needed`)
NEAREST = "dnnplan-nearest-ascii"


def main() -> None:
    stops.end_at_once_until_installed()
    closed_streams_to_devnull()
    ascii_where_needed()
    no_zero_width()
    from dnnplan.cli import main as run  # noqa: PLC0415 - after the signals are set: the command's modules

    run()


def no_zero_width() -> None:
    """``COLUMNS`` (``LINES``) that is not a whole number from 1 is not a width: 0 drew everything in
    no columns (an error line, the answer and the help vanished, exit 2 without a word), and one
    that str.isdigit takes but int() does not ('²') ended rich's start in a traceback. Left out, the
    terminal's own width is used, else 80."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value is not None and not re.fullmatch(r"\s*0*[1-9][0-9]*\s*", value):
            del os.environ[name]


def closed_streams_to_devnull() -> None:
    """A standard stream the caller closed (``>&-``, ``2>&-``: Python's ``sys.stdout`` is then None)
    written to /dev/null: what would go there goes nowhere, and the command's exit status is its own
    (a plan written with ``--out`` and its summary lost, not an error in the middle of the command)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - the process's own


def ascii_where_needed() -> None:
    """A standard stream whose encoding cannot write what dnnplan prints (an ASCII-only locale,
    ``LC_ALL=en_US.ASCII``, ``PYTHONIOENCODING=ascii``) writes each such character as its nearest
    ASCII (``µs`` as ``us``, ``×`` as ``x``, an accented letter without its accent, else ``?``):
    the answer printed, not an encoding error after the search."""
    codecs.register_error(NEAREST, _nearest_ascii)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            "µ×—".encode(stream.encoding or "ascii")
        except UnicodeEncodeError:
            stream.reconfigure(errors=NEAREST)
        except (LookupError, AttributeError, ValueError):  # an unknown codec, or not a text stream of its own
            pass


def _nearest_ascii(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text = err.object[err.start:err.end]
    out = []
    for ch in text:
        plain = NEAREST_ASCII.get(ch)
        if plain is None:
            plain = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode() or "?"
        out.append(plain)
    return "".join(out), err.end
