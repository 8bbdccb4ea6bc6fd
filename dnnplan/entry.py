"""The ``dnnplan`` console script's first code: a stop signal while the command's modules load ends
it at once, quietly (exit 128 + the signal), not in a traceback; the command then handles them
itself (:func:`dnnplan.cli.main`, lifecycle.stops)."""

from lifecycle import stops


def main() -> None:
    stops.end_at_once_until_installed()
    from dnnplan.cli import main as run  # noqa: PLC0415 - after the signals are set: the command's modules

    run()
