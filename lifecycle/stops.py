"""The signals that stop a command: Ctrl-C (SIGINT), SIGTERM (`kill`, `timeout`, a batch
scheduler's time limit) and SIGHUP (the terminal closed), all handled as Ctrl-C is.

:func:`install` (called by the ``dnnplan`` command at start) makes SIGTERM and SIGHUP raise
:class:`Stopped`, a ``KeyboardInterrupt``, so every path that keeps what was measured on Ctrl-C
(profile tables, validate's partial report, the per-user cache) and ends the MPI job it started
does the same for them; :func:`exit_code` is then 128 + the signal, as a shell reports a command
a signal ended. A signal that was ignored when the command started (``nohup`` ignores SIGHUP, a
background job of a script SIGINT) stays ignored. :func:`sigint_handled_by` hands them to another
handler for the length of a block (a child job that must end in order first), then back. Another
stop signal within :data:`BURST_S` of the first is ignored (the first is being handled); a later
one ends the command at once (:func:`arrived`).
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import contextmanager
from typing import Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: The stop signals this process received, in order (state of the process, kept at its edge)
_RECEIVED: list[int] = []
#: when the first of them arrived (``time.monotonic``)
_FIRST_AT: list[float] = []
#: seconds after the first stop signal in which another is the same stop, ignored: a burst (a held
#: or mashed Ctrl-C, a scheduler signalling every process of a job, several kills at once), which
#: landing in the first one's handling (the plan shown, the workers ended, the exit handlers) would
#: else leave a traceback, a plan not shown or workers not ended
BURST_S = 2.0
#: whether :func:`install` ran: this process is a command's, which a stop ends (a library caller's
#: process, a notebook's, outlives a stop: there a burst is not ignored nor a later stop fatal)
_INSTALLED: list[bool] = []
#: the :func:`holding` blocks open: a stop signal meanwhile is noted, not raised
_HELD: list[object] = []


class Stopped(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def arrived(signum: int) -> bool:
    """A stop signal arrived, in a command's process (:func:`install` ran; else always True): True
    for the first (the caller raises it), False for another within
    :data:`BURST_S` of it (ignored: the first is being handled); a later one ends the process at
    once, with 128 + the first signal (the user asked twice: nothing more is shown; workers end
    with this process, lifecycle.process_pool)."""
    if not _RECEIVED or not _INSTALLED:  # a library caller's process (no install()): every stop raised
        _RECEIVED.append(signum)
        _FIRST_AT[:] = [time.monotonic()]
        return True
    if not _FIRST_AT or time.monotonic() - _FIRST_AT[0] < BURST_S:
        return False
    os._exit(128 + _RECEIVED[0])


def _raise(signum: int, frame: object) -> None:
    if arrived(signum) and not _HELD:
        raise Stopped(signum)


class Hold:
    """A :func:`holding` block: :attr:`stopped` says whether a stop signal arrived in it."""

    def __init__(self) -> None:
        self.before = len(_RECEIVED)

    @property
    def stopped(self) -> bool:
        return len(_RECEIVED) > self.before


def held() -> bool:
    """Whether a :func:`holding` block is open: a stop is to be noted, not raised."""
    return bool(_HELD)


@contextmanager
def holding() -> Iterator[Hold]:
    """Meanwhile a stop signal is noted (the first of a burst; a later one still ends the command at
    once, :func:`arrived`) and not raised, so the block finishes: a search's answer printed whole and
    its files written once the search has ended (a stop landing while they were shown lost them
    all). After the block, ``hold.stopped`` says whether one arrived: the command then ends with
    :func:`exit_code`."""
    hold = Hold()
    _HELD.append(hold)
    try:
        yield hold
    finally:
        _HELD.remove(hold)


def _end_at_once(signum: int, frame: object) -> None:
    os._exit(128 + signum)


def end_at_once_until_installed() -> None:
    """Until :func:`install`, a stop signal ends the process at once, with 128 + the signal: one
    landing while the command's modules load (before anything was started or written) would else
    be Python's ``KeyboardInterrupt`` traceback (each signal left alone where it is ignored or
    handled outside Python, as :func:`install` leaves it)."""
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.default_int_handler or current == signal.SIG_DFL:
            signal.signal(sig, _end_at_once)


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Stopped` in the main thread from now on (each one
    left alone where it is ignored or handled outside Python)."""
    _INSTALLED[:] = [True]
    for sig in STOP_SIGNALS:
        current = signal.getsignal(sig)
        if current is signal.default_int_handler or current == signal.SIG_DFL or current is _end_at_once:
            signal.signal(sig, _raise)


def stopped_by(err: BaseException) -> bool:
    """Whether ``err`` is a stop's: a ``KeyboardInterrupt`` (:class:`Stopped` too), or an error it
    was raised from on its way out. A stop that lands while a C extension's module initialises
    leaves that import as ``ImportError: initialization failed``, the interrupt its cause (pybind11's
    module init: HiGHS's ``highspy``, imported when a plan's first ILP runs)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def handles(handler: object) -> bool:
    """Whether ``handler`` is one that stops the command (this module's or Python's Ctrl-C's)."""
    return handler is _raise or handler is signal.default_int_handler


def received() -> int:
    """The signal that stopped this command (SIGINT when none was seen: a KeyboardInterrupt)."""
    return _RECEIVED[0] if _RECEIVED else signal.SIGINT


def exit_code() -> int:
    """128 + the signal that stopped the command: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + received()


def name() -> str:
    """How the stop is named to the user: ``Ctrl-C (SIGINT)``, ``SIGTERM``, ``SIGHUP``."""
    sig = received()
    return "Ctrl-C (SIGINT)" if sig == signal.SIGINT else signal.Signals(sig).name


@contextmanager
def sigint_handled_by(handler: Callable[[int, object], object] | signal.Handlers) -> Iterator[None]:
    """SIGINT goes to ``handler`` meanwhile (``signal.SIG_IGN``: ignored), to the handler it had
    after; so do SIGTERM and SIGHUP where they stop the command (lifecycle.stops.install). A
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
