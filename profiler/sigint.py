"""Ctrl-C (SIGINT) handled another way for the length of a block, then as before."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Callable, Iterator


@contextmanager
def sigint_handled_by(handler: Callable[[int, object], object] | signal.Handlers) -> Iterator[None]:
    """SIGINT goes to ``handler`` meanwhile (``signal.SIG_IGN``: ignored), to the handler it had
    after. A handler can be set in the main thread only, and one set outside Python cannot be put
    back: then this changes nothing."""
    old = signal.getsignal(signal.SIGINT)
    try:
        if old is not None:
            signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)
