"""The pipeline pairs searched side by side, in the order one process takes them (pure).

After the pairs are bounded, the search takes them in order of their bounds and searches each
whose bound is below the best step found so far (:func:`planner.pipeline.search._pairs`). With a
:class:`planner.problem.parallel.Parallel` of several processes, once a step is held, the pairs a
worker bounded (whose pricing the search's own process does not hold) are handed to the workers
ahead of their turn, as :class:`SearchTask` s; a worker searches its pair on a pricing of its own (the planning call's
kernel times and layers kept across its tasks, :func:`planner.pipeline.workers.pair_bounds.kept_pricing`)
and sends back only the pair's step, cut, lower bound and stage solves (:class:`Searched`). The
search's own process takes the pairs in order as before: a pair a worker holds is taken from it
(waited for while running, withdrawn and searched here while not started), and while it waits
it searches the later pairs it holds the pricing of. Each result counts only when its turn comes
and only if its pair is still to be searched under the best step then held, so the pairs searched
and the answer are the ones one process gives; a worker's pair that becomes the best is searched
again here, for the plan itself (as the proof's closings, :mod:`planner.pipeline.pair_closing`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from costmodel.compute.model import ComputeModel
from costmodel.machine.model import Machine
from planner.pipeline.choice import OutOfTime
from planner.pipeline.interleave import Unplanned
from planner.pipeline.workers.pair_bounds import kept_pricing
from planner.pipeline.stack import Stack
from planner.problem.parallel import Parallel
from planner.problem.solve import Settings

#: pairs handed to each worker ahead of their turn at once
AHEAD_PER_WORKER = 2


@dataclass(frozen=True)
class SearchTask:
    """One (S, m, V)'s search, as a worker computes it: the search's inputs, the pair, whether its
    memory-bound stages' gaps are closed (the proof, :mod:`planner.pipeline.pair_closing`) and the
    deadline (``time.perf_counter``'s, the same clock in every process on one machine) at which
    closing stops, and the command's, at which any search stops (a task already running when the
    command's search moves on would else hold its worker past the command's time limit)."""

    stack: Stack
    batch: int
    devices: int
    machine: Machine
    compute: ComputeModel
    settings: Settings  # without its budget and workers (neither crosses processes)
    limit: float
    exact: bool
    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    close: bool
    deadline: float | None
    searcher: type  # the search's own class (planner.pipeline.pair_search.PairSearch)
    ends: float | None = None
    #: a search ahead of its turn: the step held when it was handed out; the pair's bound with the
    #: reshards inside a block comes first, and a bound that reaches it ends the task (None: closing)
    below: float | None = None


def search_task(search, stages: int, micro_batches: int, chunks: int = 1, close: bool = False,
                below: float | None = None) -> SearchTask:
    """The :class:`SearchTask` of ``search``'s pair (S, m, V), closing at its deadline when ``close``;
    ``below``: searched ahead of its turn under that step held (:attr:`SearchTask.below`)."""
    return SearchTask(search.stack, search.batch, search.p, search.machine, search.compute,
                      search.settings.plain(), search.limit, search.exact,
                      search.schedule, stages, micro_batches, chunks, close, search.deadline if close else None,
                      type(search), search.command_end(), below)


@dataclass(frozen=True)
class Searched:
    """A pair's search, as sent back: its best step and cut, its lower bound, its stage solves and
    the largest gap a stage solve kept."""

    step_s: float | None  # None: no cut fits
    stages: int
    micro_batches: int
    cut: tuple[int, ...]
    lower_s: float
    solves: int
    worst_gap: float
    chunks: int = 1
    #: its bound with the reshards inside a block (0: not computed, a closing); a search ahead of
    #: its turn whose bound reached the step held when it was handed out is not run (``bounded``)
    bound_s: float = 0.0
    bounded: bool = False


#: a closing its deadline left unfinished (its gaps stay open)
LATE = "late"


def search_pair(task: SearchTask, kept: dict) -> Searched | str:
    """``task``'s pair searched (its step None: no cut fits), or :data:`LATE` (a closing its
    deadline left unfinished, or a search the command's); ``kept``: the worker's dict across its
    tasks (:func:`kept_pricing`)."""
    settings, compute = kept_pricing(task.settings, task.compute, kept)
    search = task.searcher(task.stack, task.batch, task.devices, task.machine, compute, task.limit, settings,
                           task.exact, task.schedule)
    search.deadline, search.ends = task.deadline, task.ends
    search.stopped = kept.get("stopped")  # the search moved on (Ahead.close): left
    bound = 0.0
    if task.below is not None:  # as the search's process bounds a pair whose turn has come (search._pairs)
        bound = search.stage_bound(task.stages, task.micro_batches, task.chunks, edges=True).step_s
        if bound >= task.below:
            return Searched(None, task.stages, task.micro_batches, (), bound, 0, 0.0, task.chunks, bound, True)
    try:
        got = search.best(task.stages, task.micro_batches, close=task.close, chunks=task.chunks)
    except (OutOfTime, Unplanned):  # (a triple's: closings only, whose pairs keep what they had)
        return LATE
    if got is None:
        return Searched(None, task.stages, task.micro_batches, (), float("inf"), search.solves, search.worst_gap,
                        task.chunks, bound)
    return Searched(got.step_s, got.stages, got.micro_batches, got.cut, got.lower_s, search.solves, search.worst_gap,
                    got.chunks, bound)


class Ahead:
    """The searches of the pairs of ``combos`` (``(bound, S, m, V, fits)``, in the order the search
    takes them) handed to ``parallel``'s workers ahead of their turn (module docstring).
    ``here(i)``: pair ``i`` searched in this process (a :class:`planner.pipeline.choice.Best`);
    ``mine(i)``: whether this process holds pair ``i``'s pricing (it bounded the pair)."""

    def __init__(self, search, parallel: Parallel, combos: list, here: Callable[[int], object],
                 mine: Callable[[int], bool]):
        self.search, self.parallel, self.combos, self.here, self.mine = search, parallel, combos, here, mine
        self.futures: dict[int, object] = {}  # pair -> its worker's future
        self.taken: dict[int, Searched] = {}  # pair -> its worker's search, taken for its bound (edges_bound)
        self.done: dict[int, object] = {}  # pair -> its search, done here ahead of its turn
        self.most = AHEAD_PER_WORKER * max(1, parallel.jobs - 1)

    def _searchable(self, i: int, below: float) -> bool:
        bound, _, _, chunks, fits = self.combos[i]
        return fits is True and chunks == 1 and bound < below

    def hand_out(self, i: int, below: float) -> None:
        """The pairs after ``i`` still to be searched under ``below`` (the best step held) whose
        pricing a worker holds, to the workers, up to :data:`AHEAD_PER_WORKER` each not yet done;
        none before a step is held (a pair whose bound reaches the first step found is never
        searched)."""
        if below == float("inf"):
            return
        running = sum(1 for f in self.futures.values() if not f.done())
        for k in range(i + 1, len(self.combos)):
            if running >= self.most:
                break
            if k in self.futures or k in self.done or self.mine(k) or not self._searchable(k, below):
                continue
            self.futures[k] = self.parallel.submit(search_pair, search_task(self.search, *self.combos[k][1:3],
                                                                            below=below), shared=(self.search.stack,))
            running += 1

    def edges_bound(self, i: int, below: float, wait_s: Callable[[], float | None]) -> float | None:
        """Pair ``i``'s bound with the reshards inside a block, its turn come with ``below`` the best
        step held, where a worker holds its search (which computes that bound first, and ends there
        when it reaches the step held at hand-out, no more than ``below``): the worker's result is
        kept for :meth:`best`. None: no worker holds it (taken back while not started, or its worker
        failed or was late): the search's process bounds it, and :meth:`best` searches it here."""
        self.hand_out(i, below)
        future = self.futures.get(i)
        if future is None:
            return None
        del self.futures[i]
        if future.cancel():
            return None
        got = self._result(i, future, below, wait_s)
        if got is None:
            return None
        self.taken[i] = got
        return got.bound_s

    def best(self, i: int, below: float, wait_s: Callable[[], float | None]):
        """Pair ``i``'s search (a ``Best`` searched here, a :class:`Searched` from a worker, or
        None: nothing fits), its turn come with ``below`` the best step held; ``wait_s()``: how long
        it may still wait for a worker (None: as long as it takes; raises :class:`OutOfTime` past it).
        A search done here ahead of its turn is counted in the search's stage solves and gaps when
        its turn comes, as one process counts it."""
        if i in self.taken:
            return self.taken.pop(i)
        self.hand_out(i, below)
        if i in self.done:
            got, solves, worst_gap = self.done.pop(i)
            self.search.solves += solves
            self.search.worst_gap = max(self.search.worst_gap, worst_gap)
            return got
        future = self.futures.pop(i, None)
        if future is None or future.cancel():
            return self.here(i)
        got = self._result(i, future, below, wait_s)
        return self.here(i) if got is None else got

    def _result(self, i: int, future, below: float, wait_s: Callable[[], float | None]) -> Searched | None:
        """The worker's search of pair ``i`` (None: it failed, or was left at the command's deadline:
        the pair is the search's process's to bound and search); while it runs, later pairs are
        searched here (:meth:`_before_turn`)."""
        while not future.done():  # running in a worker: a later pair searched here meanwhile
            k = next((k for k in range(i + 1, len(self.combos)) if k not in self.done and self._searchable(k, below)
                      and (self.mine(k) or (k in self.futures and self.futures[k].cancel()))), None)
            if k is None:
                break
            self.futures.pop(k, None)
            if not self._before_turn(k):
                break
        try:
            got = future.result(timeout=wait_s())
        except TimeoutError:
            raise OutOfTime from None
        except Exception:  # noqa: BLE001 - a worker that failed: the pair searched here (an error of its own is raised here)
            return None
        return None if got == LATE else got

    def _before_turn(self, k: int) -> bool:
        """Pair ``k`` searched here before its turn, its stage solves and gaps kept apart until then;
        False: left unsearched (the search's time ran out)."""
        s = self.search
        solves, worst_gap = s.solves, s.worst_gap
        try:
            got = self.here(k)
        except OutOfTime:
            return False
        finally:
            delta, pair_gap = s.solves - solves, s.worst_gap
            s.solves, s.worst_gap = solves, worst_gap
        self.done[k] = (got, delta, pair_gap)
        return True

    def close(self) -> None:
        """Drop the searches not started, and stop those running (a worker searching a slow pair
        ahead would else hold it to the command's deadline, and the next ZeRO stage's bounds handed
        to it would wait as long)."""
        for future in self.futures.values():
            future.cancel()
        if any(not future.done() for future in self.futures.values()):
            self.parallel.stop_handed_out()
        self.futures.clear()
        self.done.clear()
        self.taken.clear()
