"""The command line's side of a search's bound: the default time limit and Ctrl-C.

`dnnplan plan` answers within ``--time-limit`` seconds (default :data:`DEFAULT_TIME_LIMIT_S`) of
the command's start (its first import): the search (:mod:`planner.solvers.budget`) gets the limit less
:func:`finish_reserve_s`, the time pricing and printing the plan it holds take at most.

Ctrl-C during a search (:func:`stop_on_ctrl_c`): asks the search to stop (an ILP that runs, in a
thread of its own, ends at HiGHS's next interrupt callback) and raises ``KeyboardInterrupt`` in the
command, which shows the best plan it holds and exits 130 (docs/errors.md). Another Ctrl-C within
``lifecycle.stops.BURST_S`` of the first is ignored (a held or mashed Ctrl-C); a later one while
that plan is priced and printed ends the command at once (exit 130, nothing shown).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

import typer

from dnnplan import STARTED
from lifecycle import stops
from planner.solvers import Budget

#: seconds `dnnplan plan` takes at most by default, from its start to its answer
DEFAULT_TIME_LIMIT_S = 20.0


def finish_reserve_s(limit_s: float) -> float:
    """Seconds kept back from ``limit_s`` to end the ILP running at the deadline and to price and
    print the plan held: 15% of the limit, at least 1 s and at most 3 s (llama2-7b on 1024 devices,
    965 candidates a layer, took 2.2 s from its deadline to its answer on the loaded development VM)."""
    return min(3.0, max(1.0, 0.15 * limit_s), 0.5 * limit_s)


def search_budget(time_limit_s: float | None) -> Budget:
    """The budget of a search that must answer within ``time_limit_s`` (None: the default) of the
    command line's start (its first import, :data:`dnnplan.STARTED`: importing `dnnplan plan` and
    the planner took 0.56 s of CPU on the 2-core development VM, 2026-12-02, and seconds of wall
    time when it is loaded; :func:`count_from_the_start`), or else of now."""
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    return Budget(limit - finish_reserve_s(limit), stated_s=limit, start=_FROM[0])


_FROM: list = [None]  # when the bound counts from: None, the command's call (tests, a library caller)


def count_from_the_start() -> None:
    """Count the bound from the command line's first import (:data:`dnnplan.STARTED`): the console
    script and ``python -m dnnplan`` call this before the command runs (dnnplan.cli.main)."""
    _FROM[0] = STARTED


@contextmanager
def stop_on_ctrl_c(budget: Budget) -> Iterator[None]:
    """While the block runs, SIGINT asks ``budget`` to stop (module docstring). Outside the main
    thread (where no signal handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        if stops.arrived(signum):  # the first: the best plan so far is shown; a burst's others ignored
            budget.request_stop()
            if not stops.held():  # the search has ended and its answer is being shown: noted only
                raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def end(code: int) -> None:
    """End the command with exit ``code``. Run as the console command (:func:`count_from_the_start`),
    at once: the exit handlers run and the output is flushed, then the process ends without the
    interpreter's teardown, which waits for HiGHS's worker threads (0.1-1.5 s measured on the
    2-core development VM, the longer under load) and would abort on a solve that a Ctrl-C left
    winding down in its thread (planner.solvers.ilp). Should an exit handler not return within
    :data:`EXIT_WAIT_S` (one waiting on a lock a stop signal left held), the process ends all the
    same, with ``code``: its workers end with it (lifecycle.process_pool). Called in-process
    (tests), ``typer.Exit``."""
    if _FROM[0] is None:
        raise typer.Exit(code)
    watchdog = threading.Timer(EXIT_WAIT_S, _flushed_exit, (code,))
    watchdog.daemon = True
    watchdog.start()
    with stops.holding():  # a stop signal now is noted: the exit handlers end the workers whole
        atexit._run_exitfuncs()
    _flushed_exit(code)


#: seconds the exit handlers may take before :func:`end` ends the process without them
EXIT_WAIT_S = 10.0


def _flushed_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a stream closed by the caller (2>&-): None
            pass
    os._exit(code)
