"""The ``local`` machine's compute model: the per-user profile cache, filled on demand.

``local_compute_model(machine, threads)`` returns a :class:`OnDemandCompute`: a
:class:`~costmodel.compute.profile_table.ProfiledCompute` over the cached table of this computer (keyed by
fingerprint and thread count) that, when asked for a kernel call it has not measured, measures it
right then (quick policy), adds it to the table and saves the cache (atomically, at most every few
seconds and when the process exits). Calls the roofline expects to take longer than
``max_call_s`` are interpolated instead. ``DNNPLAN_NO_PROFILE=1`` turns on-demand timing off
(interpolation and the roofline only).

:meth:`OnDemandCompute.calls_of` lists the kernel calls a prediction looks up, and
:meth:`OnDemandCompute.install` replaces their entries, in memory, with timings taken elsewhere:
a shared machine's speed can drift by tens of percent between hours, so a cache filled earlier
can be far from what a run meets; `dnnplan execute/validate --fresh-profile` times those calls
inside the run, between its steps (profiler.in_step.kernels), and predicts from those timings.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import time
from typing import Callable

from rich.console import Console
from rich.markup import escape
from threadpoolctl import threadpool_limits

from costmodel.compute.roofline import Roofline
from costmodel.calls.kernel_call import KernelCall
from costmodel.machine.model import Machine
from costmodel.compute.profile_table import (DISPATCH, Entry, collective_key, is_dispatch_key, wait_key, with_entries,
                                             with_executor)
from costmodel.compute.profiled import Lookup, ProfiledCompute
from networks.errors import DnnplanError
from networks.writing import SystemFailure
from profiler.probes import comm_context, dispatch, rank_wait
from profiler.timing import side_by_side
from profiler.in_step import before_run
from profiler.timing.companions import Companions
from profiler.tables.fingerprint import fingerprint
from profiler.timing.harness import QUICK, TimingPolicy, time_call
from lifecycle.stops import sigint_handled_by
from profiler.tables.store import cache_path, earlier_cache_paths, open_for_device, read_table, write_table


#: into a file or pipe, the seconds at least between two lines saying what is being timed
SAY_EVERY_S = 10.0


class OnDemandCompute(ProfiledCompute):
    def __init__(self, table, fallback, path, threads: int, progress: bool = True, max_call_s: float = 1.0,
                 concurrency: int = 1, refresh: bool = False):
        super().__init__(table, fallback)
        self.refresh = refresh  # re-time every call on its first lookup in this process (--refresh-profile)
        self._timed: set[str] = set()  # keys timed (or found too slow to time) by this process
        self.concurrency = concurrency
        self._companions = None
        self.path = path
        self.threads = threads
        self.progress = progress
        self.max_call_s = max_call_s
        self.new: dict = {}
        self.cached = table  # what the cache file holds: the profiler's own timings (save writes it)
        self._last_save = time.perf_counter()
        self._status = None
        self._said_at: float | None = None  # when the latest timing line went to a file or pipe (_say)
        self.enabled = not os.environ.get("DNNPLAN_NO_PROFILE")
        self._recording: dict[str, KernelCall] | None = None
        self._listing_only = False  # calls_of(time_missing=False): list the calls, time none
        self.dispatch_failure = ""  # why the executor's dispatch time could not be timed, if it could not
        atexit.register(self._save_at_exit)

    def calls_of(self, predict: Callable[[], object], time_missing: bool = True) -> list[KernelCall]:
        """The kernel calls ``predict()`` looks up (those missing are timed on demand, as ever,
        unless ``time_missing`` is false: then nothing is timed and they are interpolated for this
        pass), less those too slow to time on demand (interpolated instead, see ``max_call_s``);
        none when on-demand timing is off (``DNNPLAN_NO_PROFILE``)."""
        if not self.enabled:
            return []
        self._recording, self._memo = {}, {}
        self._listing_only = not time_missing
        try:
            predict()
            calls = list(self._recording.values())
        finally:
            self._recording, self._listing_only, self._memo = None, False, {}
        return [c for c in calls if self._fallback_call(c) <= self.max_call_s]

    def retime(self, calls: list[KernelCall]) -> None:
        """Time ``calls`` again now, side by side (every call once per round, profiler.timing.side_by_side),
        beside companions for a profile of several ranks, and put the entries in the table and the
        cache file; the refresh (``--refresh-profile``) then leaves them be."""
        todo = [c for c in dict.fromkeys(calls) if c.key not in self._timed]
        if not self.enabled or not todo:
            return
        rounds = side_by_side.ROUNDS
        self._start_companions()
        say = lambda done, total: self._say(  # noqa: E731
            f"timing {len(todo)} kernels side by side, "
            f"round {min(rounds, done * rounds // total + 1)} of {rounds}")
        say(0, 1)
        with threadpool_limits(limits=self.threads):
            entries = side_by_side.time_side_by_side(todo, rounds, self._companions, progress=say)
        self._timed.update(entries)
        self.misses.difference_update(todo)
        self._keep_timed(entries)
        self.save()

    def time_in_step(self, calls: list[KernelCall], before, updates=()) -> dict[str, Entry]:
        """Entries of ``calls`` timed in their step's context (profiler.in_step.before_run; ``before``:
        per call key, the calls just before it; ``updates``: the step's updates in its order),
        beside companions for a profile of several ranks; not put in the table nor the cache (the
        caller installs them for one plan)."""
        todo = list(dict.fromkeys(calls))
        if not self.enabled or not todo:
            return {}
        self._start_companions()
        say = lambda done, total: self._say(  # noqa: E731
            f"timing the plan's {len(todo)} kernels in its step's order, round {done} of {total}")
        say(0, before_run.ROUNDS + 1)
        try:
            with threadpool_limits(limits=self.threads):
                return before_run.time_in_step(todo, before, companions=self._companions, progress=say,
                                                 updates=updates)
        finally:
            self.save()

    def time_collectives_in_step(self, calls, ranks: int) -> dict[str, Entry]:
        """Entries of the collectives ``calls`` (costmodel.step.collective_calls.CommCall) timed on ``ranks``
        ranks in their step's context (profiler.probes.comm_context), keyed as the calls; not cached (the
        caller prices one plan with them). Nothing when on-demand timing is off; a failure is
        said on stderr and leaves the collectives priced by the machine's links."""
        if not self.enabled or not calls or ranks < 2:
            return {}
        self._say(f"timing the plan's {len(calls)} collectives in its step's order on {ranks} ranks")
        entries, why = comm_context.time_collectives(calls, ranks, self.threads)
        if why and self.progress:
            Console(stderr=True).print(f"[yellow]warning:[/yellow] {why}; its collectives are priced by the "
                                       "machine's links")
        return entries

    def _keep_timed(self, entries: dict[str, Entry]) -> None:
        """Entries this process timed: into the table, and into the cache file with the next save."""
        self.new.update(entries)
        self.table = with_entries(self.table, entries)
        self.cached = with_entries(self.cached, entries)
        self._rebuild()

    def install(self, entries: dict[str, Entry]) -> None:
        """Replace (or add) these entries for this process only, e.g. kernels timed inside a run; the
        cache file keeps the profiler's own timings (taken beside companion processes), so that
        the kernels of one plan are not newer there than those of the alternatives the planner
        weighs them against."""
        if not entries:
            return
        self.table = with_entries(self.table, entries)
        self._rebuild()

    def _measure(self, call: KernelCall, policy: TimingPolicy = QUICK) -> Lookup | None:
        self._timed.add(call.key)
        if not self.enabled or self._fallback_call(call) > self.max_call_s:
            return None
        self._say(f"profiling kernel {len(self.new) + 1}: {call.kernel} {call.shape} {call.algo}")
        self._start_companions()
        if self._companions is not None:
            self._companions.load(call)  # the other ranks run the same kernel meanwhile
        try:
            with threadpool_limits(limits=self.threads):
                entry = time_call(call, policy=policy)
        finally:
            if self._companions is not None:
                self._companions.pause()
        self._keep_timed({call.key: entry})
        if time.perf_counter() - self._last_save > 5:
            self.save()
        return Lookup(entry.median_s, "exact")

    def _start_companions(self) -> None:
        """For a profile of several ranks, the other ranks' companion processes (once; again where
        they ended: :meth:`profiler.timing.companions.Companions.pause`)."""
        if self.concurrency > 1 and (self._companions is None or not self._companions.conns):
            self._companions = Companions(self.concurrency - 1, self.threads)

    def _say(self, text: str) -> None:
        """Show what is being timed on the status line (stderr), started on first use; into a file
        or pipe, where no line redraws, the latest as a line of its own now and then (at most every
        :data:`SAY_EVERY_S`: minutes of timing, a sweep's machine `local` points, say what they do)."""
        if not self.progress:
            return
        console = Console(stderr=True)
        if not console.is_terminal:
            now = time.perf_counter()
            if self._said_at is None or now - self._said_at >= SAY_EVERY_S:
                console.print(text, markup=False, highlight=False, soft_wrap=True)
                self._said_at = now
            return
        if self._status is None:
            self._status = console.status(text)
            self._status.start()
        self._status.update(text)

    def _rebuild(self) -> None:
        fresh = ProfiledCompute(self.table, self.fallback)
        self._groups = fresh._groups
        self._memo = {}

    def lookup(self, call: KernelCall) -> Lookup:
        if self._recording is not None:
            self._recording.setdefault(call.key, call)
            if self._listing_only:
                return super().lookup(call)
        stale = self.refresh and call.key not in self._timed
        if (stale or call.key not in self.table.entries) and call not in self._memo:
            got = self._measure(call)
            if got is not None:
                self.misses.discard(call)
                return got
        return super().lookup(call)

    def dispatch_s(self, local, algorithm: str, consumers: int) -> float:
        """The executor's time around one layer pass (profiler.probes.dispatch), its probe timed on first
        use when the cache has none (or, with ``refresh``, once per process), like a kernel call."""
        if self.enabled and DISPATCH not in self._timed and (self.refresh or not self._dispatch_points()):
            self._timed.add(DISPATCH)
            self._say("profiling the executor's own time per layer pass (cached)")
            entries, self.dispatch_failure = dispatch.time_dispatch(self.threads, self.concurrency)
            if self.dispatch_failure and self.progress:
                Console(stderr=True).print(f"[yellow]warning:[/yellow] {self.dispatch_failure}; predictions leave "
                                           "out the executor's own time between kernels")
            self._keep_executor(entries)
        return super().dispatch_s(local, algorithm, consumers)

    def retime_dispatch(self) -> None:
        """The executor's dispatch probe timed again now, for a prediction made just before its run
        (executor.session.execute.step_context_entries): the time between kernels follows the machine's
        state of the moment, as the kernels do (docs/executor.md, "Dispatch"). Once per process
        and cache file; the new bins replace the cached ones in this process only (every model it
        opens on the cache file takes them), as the kernels timed in step context are installed:
        the cache file keeps the profile's bins, which the planner weighs its alternatives on, so
        that a `validate` resumed after Ctrl-C plans the plans the interrupted one ran. A probe
        that fails leaves the cached bins."""
        if not self.enabled or DISPATCH in self._timed:
            return
        self._timed.add(DISPATCH)
        if self.path not in _RETIMED:
            self._say("timing the executor's own time per layer pass again, before the run")
            entries, why = dispatch.time_dispatch(self.threads, self.concurrency)
            _RETIMED[self.path] = entries
            if why and self.progress:
                Console(stderr=True).print(f"[yellow]warning:[/yellow] {why}; the prediction keeps the cached "
                                           "executor time between kernels")
        if _RETIMED[self.path]:  # the new bins replace every old one (a bin the new probe lacks is not kept)
            self.table = _without_dispatch(self.table)
            for name, entry in _RETIMED[self.path].items():
                self.table = with_executor(self.table, name, entry)

    def wait_per_work(self, ranks: int, time_missing: bool = True) -> float:
        """A ``ranks``-rank step's wait per second of work (profiler.probes.rank_wait), its probe run under
        mpiexec on first use when the cache has none, or none of the executor's code around a
        collective that the same probe measures (or, with ``refresh``, once per process);
        ``time_missing=False``: the cache's value only."""
        key = wait_key(ranks)
        # the code probe's first entry (an allreduce after no pass) stands for all of its entries
        missing = key not in self.table.executor or collective_key(ranks, "allreduce", 0) not in self.table.executor
        if ranks > 1 and time_missing and self.enabled and key not in self._timed and (self.refresh or missing):
            self._timed.add(key)
            self._say(f"profiling how long {ranks} ranks wait for each other and the code around a collective (cached)")
            entries, why = rank_wait.time_wait(self.threads, ranks)
            if why and self.progress:
                Console(stderr=True).print(f"[yellow]warning:[/yellow] {why}; predictions leave out the time "
                                           "ranks wait for each other")
            self._keep_executor(entries)
        return super().wait_per_work(ranks)

    def _keep_executor(self, entries: dict) -> None:
        for name, entry in entries.items():
            self.table = with_executor(self.table, name, entry)
            self.cached = with_executor(self.cached, name, entry)
            self.new[name] = entry  # written with the next save

    def _save_at_exit(self) -> None:
        """:meth:`save` as the process ends (a failure is one line on stderr, once: :meth:`save`)."""
        self.save()

    def save(self) -> None:
        if self._companions is not None:
            self._companions.close()
            self._companions = None
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self.new and str(self.path) not in _UNSAVED:
            try:
                with sigint_handled_by(signal.SIG_IGN):  # a stop signal meanwhile would lose them (atexit)
                    write_table(self.cached, self.path)
            except (SystemFailure, DnnplanError) as err:  # the cache is a cache: the plan goes on without it
                _UNSAVED[str(self.path)] = str(err)
                if self.progress:
                    Console(stderr=True).print(
                        f"[yellow]warning:[/yellow] the kernels timed are not cached; set DNNPLAN_CACHE to a "
                        f"folder this user can write: {escape(str(err))}", markup=True, highlight=False)
        self.new = {}
        self._last_save = time.perf_counter()


#: per cache file this process could not write, why (said once, then not tried again)
_UNSAVED: dict[str, str] = {}
#: per cache file, the dispatch bins this process timed again (OnDemandCompute.retime_dispatch;
#: empty: the probe failed)
_RETIMED: dict[str, dict[str, Entry]] = {}


def _without_dispatch(table):
    """``table`` less its ``dispatch/h<k>`` entries."""
    return dataclasses.replace(table, executor={k: e for k, e in table.executor.items() if not is_dispatch_key(k)})


def local_compute_model(machine: Machine, threads: int = 1, progress: bool = True,
                        concurrency: int = 1, refresh: bool = False) -> OnDemandCompute:
    """The cached, on-demand profiled compute model of this computer (backend numpy), for runs of
    ``concurrency`` ranks sharing it (kernels timed beside that many - 1 companions). ``refresh``:
    every call is timed again on its first lookup and the cache updated, so the calls one plan
    weighs against each other are all timed now, side by side: the cache gathers entries over
    days, while a shared machine's speed can drift unevenly between kernels, enough to change
    which algorithm is the faster (docs/profiler.md, "Refreshing the cache")."""
    fp = fingerprint("numpy", threads, concurrency)
    path = cache_path(fp)
    table = open_for_device(str(path), fp)
    if not path.exists() and not table.comm:
        table = _with_earlier_comm(table, fp)
    return OnDemandCompute(table, Roofline(machine), str(path), threads, progress, concurrency=concurrency,
                           refresh=refresh)


def _with_earlier_comm(table, fp):
    """A new kernel revision starts an empty cache file (kernels.KERNELS_REVISION); the
    collectives fitted by ``dnnplan profile-comm`` do not depend on the kernels, so they are carried
    over from the latest earlier revision's file of the same device, threads and ranks (a file
    that does not read as a table is passed over)."""
    for old in earlier_cache_paths(fp):
        if not old.exists():
            continue
        try:
            comm = read_table(old).comm
        except DnnplanError:
            continue
        if comm:
            return dataclasses.replace(table, comm=dict(comm))
    return table
