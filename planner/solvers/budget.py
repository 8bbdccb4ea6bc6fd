"""How long a search may run, how it is stopped, and the best answer it holds so far.

A :class:`Budget` travels with a search (``Settings.budget``, and the ``budget`` argument of the
solvers). It carries:

- a **deadline** on the clock (``time.perf_counter``): every loop of the search asks
  :meth:`Budget.expired` and ends with what it holds; each ILP gets what is left as HiGHS's time
  limit and checks it again from its interrupt callback;
- a **stop request** (Ctrl-C): the command line's signal handler calls :meth:`Budget.request_stop`
  and raises ``KeyboardInterrupt``; an ILP solve that runs meanwhile (in a thread of its own,
  :mod:`.ilp`) sees the request from HiGHS's interrupt callback and ends; :meth:`Budget.check`
  raises ``KeyboardInterrupt`` for a request a loop of the search finds;
- the **best answer so far** (:meth:`Budget.offer`): its step, a proven lower bound on the optimum
  (:meth:`Budget.bound`) and a ``finish`` function that turns it into the result the search would
  return. After ``KeyboardInterrupt`` the caller finishes :attr:`Budget.best` (nothing is searched
  any more) and shows it; a listener (:attr:`Budget.listener`, set by the command line) draws the
  progress line.

Nothing here prints or reads a file; the clock is the only outside state it reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable


class Stopped(RuntimeError):
    """The budget stopped the ILP before it found any assignment."""


@dataclass(frozen=True)
class Offer:
    """The best answer a search holds: its step (s), what it is in a few words, the lower bound
    proven so far on any answer's step, and how to turn it into the search's result."""

    step_s: float
    what: str
    lower_s: float
    finish: Callable[[], Any]
    #: the parts of the search ``lower_s`` does not cover yet, in words ("": every part)
    pending: str = ""

    @property
    def gap(self) -> float:
        """How much faster than this answer the optimum could still be (0: proven optimal)."""
        return max(0.0, 1.0 - self.lower_s / self.step_s) if self.step_s > 0 else 0.0


class Budget:
    """See the module docstring. ``seconds``: from now until the deadline (None: no deadline);
    ``stated_s``: the bound the caller promised its user, of which the search gets ``seconds``."""

    def __init__(self, seconds: float | None = None, clock: Callable[[], float] = time.perf_counter,
                 stated_s: float | None = None, start: float | None = None):
        self.clock = clock
        self.start = clock() if start is None else start  # the clock's time the seconds count from
        self.seconds = seconds
        self.stated_s = seconds if stated_s is None else stated_s
        self.deadline = None if seconds is None else self.start + seconds
        self.best: Offer | None = None
        self.lower_s = 0.0  # the largest lower bound proven on every answer's step
        self.settled = False  # the search is over (settle)
        #: what the bound held covers, in words, for an answer a stop finishes (the last :meth:`cover`'s)
        self.covering = ""
        self.listener: Callable[[Offer, float], None] | None = None
        self._shared = {"stop": False}  # with the budgets renewed from this one
        #: the longest a pipeline search under this budget took to bound its pairs (:meth:`bounding_took`)
        self.bounds_s = 0.0

    def renewed(self, seconds: float | None = None, stated_s: float | None = None) -> "Budget":
        """A budget of the same seconds (or ``seconds``) from now (the next search of a series: a
        sweep's next device count), sharing this one's stop request; ``stated_s``: the bound its
        messages name (default: this one's)."""
        out = Budget(self.seconds if seconds is None else seconds, self.clock,
                     self.stated_s if stated_s is None else stated_s)  # from now
        out._shared = self._shared
        return out

    # --- the clock and the stop request ---------------------------------------------------------

    def left(self) -> float | None:
        """Seconds until the deadline (never below 0); None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - self.clock())

    def elapsed(self) -> float:
        return self.clock() - self.start

    def proof_deadline(self, bounding_s: float) -> float | None:
        """The clock's time by which proving a plan (closing its gaps) ends, for a search whose
        pairs' bounds took ``bounding_s``: the deadline (a part of a larger search may end sooner,
        to leave its later parts their bounds: ``planner.zero_choice.Share``)."""
        return self.deadline

    def bounding_took(self, seconds: float) -> None:
        """A pipeline search bounded its pairs in ``seconds`` (the longest so far is kept as
        ``bounds_s``: what a later part of a larger search needs for its own bounds, which are
        what cover it in the gap stated, ``planner.zero_choice``)."""
        self.bounds_s = max(self.bounds_s, seconds)

    def timed_out(self) -> bool:
        return self.deadline is not None and self.clock() >= self.deadline

    def expired(self) -> bool:
        """The search should end now: the deadline passed or a stop was requested."""
        return self.stop_requested or self.timed_out()

    @property
    def stop_requested(self) -> bool:
        return self._shared["stop"]

    def request_stop(self) -> None:
        self._shared["stop"] = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if a stop was requested (module docstring)."""
        if self.stop_requested:
            raise KeyboardInterrupt

    # --- the best answer so far -----------------------------------------------------------------

    def offer(self, step_s: float, what: str, finish: Callable[[], Any], lower_s: float | None = None,
              pending: str = "") -> bool:
        """Keep this answer if it is the best so far (True); ``lower_s``: a lower bound on every
        answer's step proven with it (the bound held is the largest proven); ``pending``: what
        that bound does not cover yet, in words (:attr:`Offer.pending`)."""
        if lower_s is not None:
            self.lower_s = max(self.lower_s, lower_s)
        if self.best is not None and step_s >= self.best.step_s:
            self.bound(self.lower_s)
            return False
        self.best = Offer(step_s, what, min(self.lower_s, step_s), finish, pending)
        self._tell()
        return True

    def bound(self, lower_s: float) -> None:
        """A lower bound on every answer's step, proven now (kept if higher than the one held)."""
        self.cover(max(self.lower_s, lower_s))

    def cover(self, lower_s: float, pending: str | None = None, covering: str | None = None) -> None:
        """The lower bound held is now ``lower_s``, higher or lower: a search whose bound covers
        the parts planned so far (``planner.zero_choice.Share``: the ZeRO stages), to which a new
        part is added, replaces its bound rather than raising it (a bound over fewer parts is no
        bound over more). ``pending`` (:attr:`Offer.pending`) and ``covering`` (:attr:`covering`):
        what the new bound leaves out and covers, in words, where the caller says (the answer
        held may have been offered while fewer parts were planned)."""
        self.lower_s = lower_s
        if covering is not None:
            self.covering = covering
        if self.best is None:
            return
        pending = self.best.pending if pending is None else pending
        if min(lower_s, self.best.step_s) != self.best.lower_s or pending != self.best.pending:
            self.best = Offer(self.best.step_s, self.best.what, min(lower_s, self.best.step_s),
                              self.best.finish, pending)
            self._tell()

    def forget(self) -> None:
        """Drop the answer held and the bound (the search starts again, e.g. on a completed profile)."""
        self.best, self.lower_s = None, 0.0

    def settle(self, step_s: float, finish: Callable[[], Any]) -> None:
        """The search is over and this is its answer (what Ctrl-C shows from now on); no progress follows."""
        self.best = Offer(step_s, "the plan", step_s, finish)
        self.settled = True

    def _tell(self) -> None:
        if self.listener is not None and self.best is not None:
            self.listener(self.best, self.elapsed())


def unlimited() -> Budget:
    """A budget with no deadline (tests, library callers that want the exact optimum)."""
    return Budget(None)


class Partial:
    """A budget seen by a search over part of the plans (the whole batch at once, or the pipelined
    plans): the budget's clock, stop request and best plan, its plans offered to the budget, but
    each lower bound it proves passed on no higher than ``cap``, the least step the rest of the
    plans may take (a bound over part of the plans is no bound over all of them). The part's own
    bound is kept as :attr:`lower_s`."""

    def __init__(self, budget: Budget, cap: float):
        self.budget, self.cap = budget, cap
        self.lower_s = 0.0

    def __getattr__(self, name: str):
        return getattr(self.budget, name)

    def offer(self, step_s: float, what: str, finish: Callable[[], Any], lower_s: float | None = None) -> bool:
        if lower_s is not None:
            self.lower_s = max(self.lower_s, lower_s)
        return self.budget.offer(step_s, what, finish, None if lower_s is None else min(lower_s, self.cap))

    def bound(self, lower_s: float) -> None:
        self.lower_s = max(self.lower_s, lower_s)
        self.budget.bound(min(lower_s, self.cap))


def partial(budget: Budget | None, cap: float) -> Budget | None:
    """``budget`` seen by a search over part of the plans (:class:`Partial`); None without one."""
    return None if budget is None else Partial(budget, cap)


class Ceiling(Partial):
    """A budget seen by a search that need not go on once it proves none of its plans beats
    ``ceiling``, a step held from elsewhere: it expires then (:attr:`beaten`), and its bounds are
    passed on as proven."""

    def __init__(self, budget: Budget, ceiling: float):
        super().__init__(budget, float("inf"))
        self.ceiling = ceiling

    @property
    def beaten(self) -> bool:
        return self.lower_s >= self.ceiling * (1 - 1e-12)

    def expired(self) -> bool:
        return self.beaten or self.budget.expired()

    def timed_out(self) -> bool:
        return self.beaten or self.budget.timed_out()
