"""The ``dnnplan`` console script's first code: a stop signal while the command's modules load ends
it at once, quietly (exit 128 + the signal), not in a traceback; the command then handles them
itself (:func:`dnnplan.cli.main`, lifecycle.stops)."""

import os
import sys

from lifecycle import stops


def main() -> None:
    stops.end_at_once_until_installed()
    closed_streams_to_devnull()
    from dnnplan.cli import main as run  # noqa: PLC0415 - after the signals are set: the command's modules

    run()


def closed_streams_to_devnull() -> None:
    """A standard stream the caller closed (``>&-``, ``2>&-``: Python's ``sys.stdout`` is then None)
    written to /dev/null: what would go there goes nowhere, and the command's exit status is its own
    (a plan written with ``--out`` and its summary lost, not an error in the middle of the command)."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - the process's own
