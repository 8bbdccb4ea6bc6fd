"""The progress line of a long search, on stderr (stdout stays the answer's, `--json` included).

Once a search has run for :data:`FIRST_AFTER_S` and holds a plan, the line says how long it has
run of its bound, the best plan so far (its step and what it is) and the gap proven so far, over
the ZeRO stages planned so far while others are still to come:

    searching 6.2 s of 17 s: best so far 19.57 s a step (pipeline 8, 96 micro-batches), within 5.4% of the optimum
    searching 3.3 s of 20 s: best so far 18.6 s a step (ZeRO-3: pipeline 4, 12 micro-batches, 8 chunks a device),
    proven optimal of the ZeRO stages planned so far (ZeRO-1, ZeRO-0, ZeRO-2 not planned yet)

On a terminal it is one line redrawn in place (and gone once the answer is printed); into a file
or pipe, a new line every :data:`EVERY_S` seconds while the search runs.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

from dnnplan.render.terminal.console import Console
from rich.live import Live
from rich.text import Text

from dnnplan.render import fmt
from planner.solvers import Budget

FIRST_AFTER_S = 1.0
EVERY_S = 2.0


def line(budget: Budget) -> str | None:
    """The progress line now, or None before the search holds a plan."""
    best = budget.best
    if best is None or budget.settled:
        return None
    bound = f" of {budget.stated_s:g} s" if budget.stated_s is not None else ""
    gap = "proven optimal" if best.gap <= 0 else f"within {best.gap:.1%} of the optimum"
    if best.pending:  # the bound covers the ZeRO stages planned so far, not those still to come
        gap += f" of the ZeRO stages planned so far ({best.pending})"
    return (f"searching {budget.elapsed():.1f} s{bound}: best so far {fmt.seconds(best.step_s)} a step "
            f"({best.what}), {gap}")


def live_terminal(console: Console) -> bool:
    """Whether stderr is a terminal that redraws a line in place: a terminal (FORCE_COLOR makes rich
    take a file for one: a log got 4 redraws a second of cursor codes) that is not dumb
    (TERM=dumb: rich's live line draws nothing there, and no progress was seen)."""
    try:
        tty = os.isatty(console.file.fileno())
    except (AttributeError, OSError, ValueError):  # no file descriptor of its own (a test's capture)
        tty = console.is_terminal
    return tty and not console.is_dumb_terminal


@contextmanager
def progress_line(budget: Budget, enabled: bool = True) -> Iterator[None]:
    """Draw :func:`line` on stderr while the block runs (module docstring)."""
    console = Console(stderr=True, highlight=False)
    if not enabled:
        yield
        return
    if live_terminal(console):
        with Live(get_renderable=lambda: Text(line(budget) or "") if budget.elapsed() >= FIRST_AFTER_S else Text(""),
                  console=console, transient=True, refresh_per_second=4):
            yield
        return
    done = threading.Event()

    def tick() -> None:
        if done.wait(FIRST_AFTER_S):
            return
        while not done.is_set():
            text = line(budget)
            if text is not None:
                console.print(text, markup=False, soft_wrap=True)
            if done.wait(EVERY_S):
                return

    worker = threading.Thread(target=tick, name="dnnplan-progress", daemon=True)
    worker.start()
    try:
        yield
    finally:
        done.set()
        worker.join(timeout=1.0)
