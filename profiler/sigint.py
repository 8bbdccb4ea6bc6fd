"""Ctrl-C (SIGINT), and the other stop signals dnnplan handles as Ctrl-C (profiler.stops), handled
another way for the length of a block, then as before."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterator

from profiler.stops import STOP_SIGNALS, handles


@contextmanager
def sigint_handled_by(handler: Callable[[int, object], object] | signal.Handlers) -> Iterator[None]:
    """SIGINT goes to ``handler`` meanwhile (``signal.SIG_IGN``: ignored), to the handler it had
    after; so do SIGTERM and SIGHUP where they stop the command (profiler.stops.install). A
    handler can be set in the main thread only, and one set outside Python cannot be put back:
    then this changes nothing."""
    olds: dict[int, object] = {}
    try:
        for sig in STOP_SIGNALS:
            old = signal.getsignal(sig)
            if old is not None and (sig == signal.SIGINT or handles(old)):
                olds[sig] = old
                signal.signal(sig, handler)
    except ValueError:  # not the main thread
        olds = {}
    try:
        yield
    finally:
        for sig, old in olds.items():
            signal.signal(sig, old)
