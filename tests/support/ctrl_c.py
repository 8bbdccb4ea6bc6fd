"""Ctrl-C as a terminal delivers it, for the tests that send it to a dnnplan command."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` of a command a test interrupts: SIGINT back to its default action. A process
    started in the background of a non-interactive shell (``cmd &``, as CI scripts often start
    their jobs) has SIGINT ignored, every child inherits that, and Python then never raises
    KeyboardInterrupt: the command would ignore the test's Ctrl-C as it should ignore the shell's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def default_stop_signals() -> None:
    """``preexec_fn`` of a command a test stops with SIGINT, SIGTERM or SIGHUP: each back to its
    default action, for the same reason as :func:`default_sigint` (a test run under ``nohup``
    has SIGHUP ignored, and dnnplan leaves an ignored SIGHUP ignored, as nohup asks)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
