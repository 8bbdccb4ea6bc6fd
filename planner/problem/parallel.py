"""Independent pieces of a search computed side by side: the interface the planner is handed (pure).

The planner never starts a process. The command line hands it a :class:`Parallel` in
``Settings.parallel`` (``dnnplan plan --jobs N``: this process and ``N - 1`` workers,
:mod:`lifecycle.process_pool`), and the search maps a module-level function over picklable tasks
with it, its own process taking tasks beside the workers (``here``): the lower bounds of the
pipeline and micro-batch pairs (:func:`planner.pipeline.workers.pair_bounds.pair_bound`) and their gap
closings; or it hands single tasks out ahead of their turn (``submit``): the pairs' searches
(:func:`planner.pipeline.workers.pair_searches.search_pair`). Each is a pure function of its task, so the
numbers are the same wherever they are computed and the answer is the one a single process
gives. The function is called as ``fn(task, kept)``: ``kept`` is a dict that lives as long as the
worker, so a worker's later tasks reuse what its earlier ones priced (the planning call's
:class:`planner.problem.priced_layers.PricedLayers` and kernel times, named by its token). :data:`IN_PROCESS`
computes them one after another here.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Callable, Hashable, Iterator, Protocol, Sequence

from costmodel.compute.model import OnDemand


class Parallel(Protocol):
    """Maps a function over tasks on ``jobs`` workers."""

    jobs: int

    def unordered(self, fn: Callable[[Any, dict], Any], tasks: Sequence[Any],
                  here: Callable[[int], Any] | None = None,
                  keys: Sequence[Hashable] | None = None, shared: Sequence[Any] = ()) -> Iterator[tuple[int, Any]]:
        """``(i, fn(tasks[i], kept))`` for every task, in the order they finish, ``kept`` the
        worker's own dict across its tasks; closing the iterator early drops the tasks not yet
        started. ``here(i)``: task ``i`` computed in the caller's process instead, which then
        takes tasks too (its answer is ``here(i)``'s: what it computes stays where it is used).
        ``keys[i]``: what task ``i`` prices; a task whose key the caller's process computed in an
        earlier call is computed there again where it can be (what it priced is kept there).
        ``shared``: objects every task carries (a network's stack), sent to a worker once."""
        ...

    def submit(self, fn: Callable[[Any, dict], Any], task: Any, shared: Sequence[Any] = ()) -> Future:
        """``fn(task, kept)`` handed to a worker now, ahead of being needed: its future
        (``cancel()`` takes it back while not started, to be computed by the caller). While it
        runs, ``kept["stopped"]()`` says whether :meth:`stop_handed_out` was called since.
        ``shared``: objects other tasks carry too, sent to a worker once."""
        ...

    def stop_handed_out(self) -> None:
        """The tasks :meth:`submit` handed out so far are to stop: a running one that asks
        ``kept["stopped"]()`` learns it, and ends early (its answer is then not used)."""
        ...


class InProcess:
    """Every task here, one after another, in order."""

    jobs = 1

    def unordered(self, fn: Callable[[Any, dict], Any], tasks: Sequence[Any],
                  here: Callable[[int], Any] | None = None,
                  keys: Sequence[Hashable] | None = None, shared: Sequence[Any] = ()) -> Iterator[tuple[int, Any]]:
        kept: dict = {}  # this call's alone: nothing outlives it
        for i, task in enumerate(tasks):
            yield i, fn(task, kept) if here is None else here(i)

    def submit(self, fn: Callable[[Any, dict], Any], task: Any, shared: Sequence[Any] = ()) -> Future:
        future: Future = Future()  # computed now, in order: nothing runs beside this process
        future.set_result(fn(task, {}))
        return future

    def stop_handed_out(self) -> None:
        """Nothing is running: every task :meth:`submit` took is done."""


IN_PROCESS = InProcess()


def side_by_side(parallel: Parallel | None, compute) -> Parallel | None:
    """``parallel`` when it has more than one worker and the compute model prices the same in any
    process (not one that times kernels on demand, whose timings must land in this process's
    profile: ``costmodel.compute.model.OnDemand``); else None (compute here, in order)."""
    if parallel is None or parallel.jobs <= 1 or isinstance(compute, OnDemand):
        return None
    return parallel
