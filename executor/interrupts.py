"""Ctrl-C in `dnnplan validate`: a second one ignored while what was finished is written (the
companion processes forked while kernels are timed ignore it: profiler.companions)."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

from costmodel.compute import OnDemand


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C is ignored meanwhile, so that what an interrupted run keeps is written whole
    (a signal handler can be set in the main thread only, and one set outside Python cannot be put
    back: then this changes nothing)."""
    old = signal.getsignal(signal.SIGINT)
    try:
        if old is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


def save_timed(compute: object) -> str | None:
    """Write what ``compute`` timed on demand to its cache file (its path; None: nothing to save)."""
    if not isinstance(compute, OnDemand):
        return None
    with sigint_ignored():
        compute.save()
    return getattr(compute, "path", None)
