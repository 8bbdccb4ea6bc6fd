"""Ctrl-C in `dnnplan validate`: a second one ignored while what was finished is written, and
Ctrl-C kept from the helper processes forked while kernels are timed."""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager
from typing import Iterator

from costmodel.compute import OnDemand


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C is ignored meanwhile, so that what an interrupted run keeps is written whole
    (a signal handler can be set in the main thread only: elsewhere this changes nothing)."""
    try:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:
        old = None
    try:
        yield
    finally:
        if old is not None:
            signal.signal(signal.SIGINT, old)


@contextmanager
def sigint_here_only() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this process only, not in the helpers it forks meanwhile
    (the companion processes that load the computer while a kernel is timed, profiler.companions,
    which would print a traceback): a terminal's Ctrl-C reaches its whole process group, and the
    helpers are ended by this process (:func:`save_timed`)."""
    me = os.getpid()

    def handler(signum, frame):
        if os.getpid() == me:
            raise KeyboardInterrupt

    try:
        old = signal.getsignal(signal.SIGINT)
        if old is signal.default_int_handler:
            signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: handlers stay as they are
        old = None
    try:
        yield
    finally:
        if old is signal.default_int_handler:
            signal.signal(signal.SIGINT, old)


def save_timed(compute: object) -> str | None:
    """Write what ``compute`` timed on demand to its cache file (its path; None: nothing to save)."""
    if not isinstance(compute, OnDemand):
        return None
    with sigint_ignored():
        compute.save()
    return getattr(compute, "path", None)
