"""Ctrl-C in `dnnplan validate`: a second one ignored while what was finished is written (the
companion processes forked while kernels are timed ignore it: profiler.timing.companions)."""

from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator

from costmodel.compute.model import OnDemand
from lifecycle.stops import sigint_handled_by


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """A second Ctrl-C is ignored meanwhile, so that what an interrupted run keeps is written whole
    (where a handler cannot be set, lifecycle.stops, this changes nothing)."""
    with sigint_handled_by(signal.SIG_IGN):
        yield


def save_timed(compute: object) -> str | None:
    """Write what ``compute`` timed on demand to its cache file (its path; None: nothing to save)."""
    if not isinstance(compute, OnDemand):
        return None
    with sigint_ignored():
        compute.save()
    return getattr(compute, "path", None)
