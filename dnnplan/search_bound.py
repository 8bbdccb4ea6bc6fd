"""The command line's side of a search's bound: the default time limit and Ctrl-C.

`dnnplan plan` answers within ``--time-limit`` seconds (default :data:`DEFAULT_TIME_LIMIT_S`) of
the command's start: the search (:mod:`planner.solvers.budget`) gets the limit less
:func:`finish_reserve_s`, the time pricing and printing the plan it holds take at most.

Ctrl-C during a search (:func:`stop_on_ctrl_c`): the first asks the search to stop, at once where
Python code runs (``KeyboardInterrupt``), and through HiGHS's interrupt callback where HiGHS runs
(it returns within a few tenths of a second); the command then shows the best plan it holds and
exits 130 (docs/errors.md). A second Ctrl-C while that plan is priced and printed ends the command
at once (exit 130, nothing shown).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from planner.solvers import Budget

#: seconds `dnnplan plan` takes at most by default, from its start to its answer
DEFAULT_TIME_LIMIT_S = 20.0


def finish_reserve_s(limit_s: float) -> float:
    """Seconds kept back from ``limit_s`` to price and print the plan held when the search stops:
    a tenth of the limit, at least 1 s and at most 3 s (the largest zoo plans take about 1 s)."""
    return min(3.0, max(1.0, 0.1 * limit_s), 0.5 * limit_s)


def search_budget(time_limit_s: float | None) -> Budget:
    """The budget of a search that must answer within ``time_limit_s`` (None: the default) from now."""
    limit = DEFAULT_TIME_LIMIT_S if time_limit_s is None else time_limit_s
    return Budget(limit - finish_reserve_s(limit), stated_s=limit)


@contextmanager
def stop_on_ctrl_c(budget: Budget) -> Iterator[None]:
    """While the block runs, SIGINT asks ``budget`` to stop (module docstring). Outside the main
    thread (where no signal handler can be set) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame) -> None:
        budget.request_stop()
        if not budget.deferred:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
