"""Worker processes that compute a command's independent pieces side by side, and end with it.

:class:`ProcessPool` maps a module-level function over picklable tasks on ``jobs`` processes (the
planner's ``planner.problem.parallel.Parallel``: ``dnnplan plan --jobs N``): this one and ``jobs - 1``
workers, all taking the tasks in order from one list (this process computes its own the caller's
way, ``here``: what it computes lands where it is used, nothing is sent back); a task whose key
this process computed before stays here. The workers start
on the first map (:func:`start_method`), every one before a stop signal is taken, and they
end with the command however it ends: they ignore Ctrl-C (the command answers it), and
:meth:`ProcessPool.close` ends them and the fork server at exit (also when the command ends at once,
``dnnplan.search_bound.end``); should the command be killed (``kill -9``), each exits within a
second (it watches the command, :func:`lifecycle.jobs.watch_launcher`; on Linux the kernel also
ends it with its parent, the parent-death signal).
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import threading
import time
from collections import deque
from multiprocessing.reduction import ForkingPickler
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool, _ExecutorManagerThread
from types import MappingProxyType
from typing import Any, Callable, Hashable, Iterator, Sequence

from lifecycle import sent_once
from lifecycle.jobs import LAUNCHER_ENV, launcher_env, watch_launcher
from lifecycle.stops import STOP_SIGNALS
from networks.writing import SystemFailure

#: how long each worker's first task holds it, so that each is started by one (an idle worker
#: would take the next, and the pool start no more) [s]
READY_S = 0.1
#: how long :meth:`ProcessPool.close` waits for the pool's own lock before ending the workers without it [s]
LOCK_WAIT_S = 1.0
#: how long this process waits for a worker to finish a task whose pricing it holds before it takes
#: such tasks itself (the worker may be busy with a long task handed out before) [s]
STEAL_AFTER_S = 0.03
#: prctl's option that sends the caller a signal when its parent ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start_method() -> str:
    """How workers start: forked from this process on Linux (in a tenth of a second, nothing to
    import again; they run only the planner's pure pricing, never this process's other threads'
    work), else from a fork server that imported the preload once, else spawned."""
    methods = multiprocessing.get_all_start_methods()
    if sys.platform.startswith("linux") and "fork" in methods:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def worker_started(launcher: dict, stops=None) -> None:
    """In each worker: Ctrl-C is the command's to answer; end when the command's process ends
    (its parent, the fork server, by the kernel's parent-death signal; the command itself watched,
    :func:`lifecycle.jobs.watch_launcher`). ``stops``: the pool's count of stops, shared with the
    command's process (:meth:`ProcessPool.stop_handed_out`)."""
    global _STOPS
    _STOPS = stops
    watch_launcher(launcher)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hold_signals(signal.SIG_UNBLOCK, STOP_SIGNALS)  # a forked worker inherits them held
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: close() at exit still ends them
        pass


def hold_signals(how: int, signals):
    """``signal.pthread_sigmask`` where there is one (POSIX); the mask before."""
    return signal.pthread_sigmask(how, signals) if hasattr(signal, "pthread_sigmask") else set()


def ended_how(exitcode: int | None) -> str:
    """How a worker process ended, in words: ``was killed by signal 9 (SIGKILL: out of memory?)``
    (the signal Linux's out-of-memory killer sends), ``was killed by signal 11 (SIGSEGV)``,
    ``exited with status 3``."""
    if exitcode is None:
        return "ended, and the system does not say how"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    sig = -exitcode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "an unnamed signal"
    return f"was killed by signal {sig} ({name}{': out of memory?' if sig == signal.SIGKILL else ''})"


#: in a worker process, what its tasks keep for its later ones (``fn(task, kept)``,
#: planner.problem.parallel); the command's own process never fills it
_KEPT: dict = {}
#: in a worker process, the pool's count of stops, shared with the command's process: a task handed
#: out by :meth:`ProcessPool.submit` at a lower count is to stop (``kept["stopped"]()``)
_STOPS = None


def _pickled(fn: Callable[[Any, dict], Any], task: Any, named: dict | None = None) -> bytes:
    """``(fn, task)`` pickled now, in the caller's thread: the task as it is when handed out. The
    pool's own thread pickles what it sends later, while the caller goes on; a task sharing a dict
    the caller fills meanwhile (a pricing cache) would change under it ("dictionary changed size
    during iteration", or a task sent half old, half new). ``named``: the objects pickled once
    (:meth:`lifecycle.sent_once.Shared.named`)."""
    return sent_once.dumps((fn, task), named or {})


def _with_kept(blob: bytes, handed_at: int | None = None) -> Any:
    """``fn(task, kept)`` in a worker, ``(fn, task)`` from :func:`_pickled`, with that worker's own
    ``kept``; ``kept["stopped"]()`` says whether the command has stopped the tasks handed out up to
    this one since (``handed_at``, the count of stops when it was handed out; None: never)."""
    fn, task = sent_once.loads(blob)
    stops = _STOPS
    _KEPT["stopped"] = (lambda: False) if handed_at is None or stops is None else (lambda: stops.value != handed_at)
    return fn(task, _KEPT)


def _ready(hold_s: float) -> float:
    """A worker's first task: it has started (held ``hold_s``: :data:`READY_S`)."""
    time.sleep(hold_s)
    return hold_s


def _read_only(mapping: MappingProxyType):
    return _mapping_proxy, (dict(mapping),)


def _mapping_proxy(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


def _quiet_cancelled_race(hook: Callable) -> Callable:
    """``threading.excepthook`` that leaves out the pool's own thread failing to fail a future the
    pool had cancelled: :meth:`ProcessPool.close` cancels the tasks not started and ends the workers,
    and Python 3.11's pool, finding its workers gone, sets its broken-pool error on every task it
    holds, the cancelled ones too (``InvalidStateError``), a traceback on stderr after a stop
    signal. Every other thread's error goes to ``hook``."""

    def quiet(args) -> None:
        if isinstance(args.thread, _ExecutorManagerThread) and args.exc_type is not None \
                and issubclass(args.exc_type, InvalidStateError):
            return
        hook(args)

    quiet.quiets_cancelled_race = True
    return quiet


def _end(processes: list) -> None:
    """End and reap ``processes``: SIGTERM, then SIGKILL for one still alive a second later (a
    worker the pool's own thread forked holds that thread's signal mask, SIGTERM among the held:
    the term would wait for ever)."""
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=1.0)
        if process.is_alive():
            process.kill()
            process.join(timeout=1.0)


class ProcessPool:
    """``jobs`` processes, this one and ``jobs - 1`` workers (at least one), the workers started on
    the first map (module docstring)."""

    def __init__(self, jobs: int, preload: Sequence[str] = ()):
        self.jobs = max(1, int(jobs))
        self.workers = max(1, self.jobs - 1)
        self.preload = tuple(preload)
        self._pool: ProcessPoolExecutor | None = None
        #: the keys of the tasks this process computed (:meth:`unordered`'s ``keys``), and those a worker did
        self._here: set = set()
        self._there: set = set()
        self._stops = None  # the count of stops shared with the workers (stop_handed_out)
        self._shared = sent_once.Shared()  # the objects many tasks carry, pickled once

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # frozen specs keep their mappings read-only (a machine's peaks): sent as the mapping they show
            ForkingPickler.register(MappingProxyType, _read_only)
            context = multiprocessing.get_context(start_method())
            if context.get_start_method() == "forkserver" and self.preload:
                context.set_forkserver_preload(list(self.preload))
            # every worker started before a stop signal is taken: one landing while a worker starts
            # would leave it half started (its traceback on stderr), the command's end would not see it
            if not getattr(threading.excepthook, "quiets_cancelled_race", False):
                threading.excepthook = _quiet_cancelled_race(threading.excepthook)
            held = hold_signals(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                self._stops = context.Value("q", 0, lock=False)
                self._pool = ProcessPoolExecutor(self.workers, mp_context=context, initializer=worker_started,
                                                 initargs=({LAUNCHER_ENV: launcher_env()[LAUNCHER_ENV]}, self._stops))
                atexit.register(self.close)
                forked = context.get_start_method() == "fork"  # the first task forks them all at once
                for future in [self._pool.submit(_ready, 0.0 if forked else READY_S)
                               for _ in range(1 if forked else self.workers)]:
                    future.result()
            finally:
                hold_signals(signal.SIG_SETMASK, held)
        return self._pool

    def submit(self, fn: Callable[[Any, dict], Any], task: Any, shared: Sequence[Any] = ()) -> Future:
        """``fn(task, kept)`` handed to a worker now: its future (``cancel()`` takes it back while
        not started; :meth:`stop_handed_out` asks it to stop while running). A worker the system
        ends makes ``result()`` raise the pool's own error. ``shared``: objects the task carries
        that other tasks carry too, pickled once and loaded once in each worker
        (:mod:`lifecycle.sent_once`)."""
        pool = self._executor()  # first: it registers how read-only mappings are pickled
        return pool.submit(_with_kept, _pickled(fn, task, self._shared.named(shared)), self._stops.value)

    def stop_handed_out(self) -> None:
        """The tasks :meth:`submit` handed out so far are to stop: each running one's
        ``kept["stopped"]()`` says so from now on (one that never asks runs to its end), so its
        worker is free for the tasks after it (a pipeline pair searched ahead of its turn, the
        search moving on to another ZeRO stage, would else hold its worker to the command's
        deadline, and the next stage's bounds handed to it would wait as long)."""
        if self._stops is not None:
            self._stops.value += 1

    def _kept_here(self, keys: Sequence[Hashable] | None, n: int) -> set[int]:
        """The tasks (of ``n``) whose key this process computed before."""
        return set() if keys is None else {i for i in range(n) if keys[i] in self._here}

    def unordered(self, fn: Callable[[Any, dict], Any], tasks: Sequence[Any],
                  here: Callable[[int], Any] | None = None,
                  keys: Sequence[Hashable] | None = None, shared: Sequence[Any] = ()) -> Iterator[tuple[int, Any]]:
        """``(i, fn(tasks[i], kept))`` as each finishes, ``kept`` the worker's own dict across its
        tasks; closing the iterator cancels the tasks not started. ``here(i)``: task ``i`` computed
        in this process, which then takes the tasks in order beside the workers (each worker is
        handed the next task not taken while it holds fewer than two: one running, one waiting, so
        it never idles while this process computes), and, once none is left to take, any handed to
        a worker that has not started it. ``keys[i]``: what task ``i`` prices (a pipeline pair's
        ranks and micro-batch): a task whose key this process computed in an earlier call of this
        pool stays here, where what it priced is kept; the workers take the others, and this
        process takes the workers' (from the end of its list) once its own are all taken, but
        for those whose key a worker computed before (priced there, they cost a worker less),
        until a worker keeps it waiting :data:`STEAL_AFTER_S`.
        A worker the system ends (the out-of-memory killer's SIGKILL, a crash) ends the workers and
        raises :class:`networks.writing.SystemFailure`: one line saying how it ended. ``shared``:
        objects every task carries, pickled once and loaded once in each worker
        (:mod:`lifecycle.sent_once`)."""
        pool = self._executor()
        named = self._shared.named(shared)
        workers = list((getattr(pool, "_processes", None) or {}).values())
        futures: dict = {}
        pending: set = set()
        mine = set() if here is None else self._kept_here(keys, len(tasks))
        local = deque(i for i in range(len(tasks)) if i in mine)  # this process's own, in order
        remote = deque(i for i in range(len(tasks)) if i not in mine)  # the workers', in order
        most = len(tasks) if here is None else 2 * self.workers  # tasks handed to the workers at once

        def submit(i: int) -> None:
            future = pool.submit(_with_kept, _pickled(fn, tasks[i], named))
            futures[future] = i
            pending.add(future)

        def hand_out() -> None:
            """The next tasks to the workers, up to ``most`` at once; those whose key a worker
            computed before, all at once (this process leaves them to the workers: sent together,
            a worker takes one after another without waiting on this process)."""
            for i in [i for i in remote if theirs(i)]:
                remote.remove(i)
                submit(i)
            while len(pending) < most and (remote or local):
                submit(remote.popleft() if remote else local.pop())

        waited = [False]  # a worker has kept this process waiting: it takes any task left

        def theirs(i: int) -> bool:
            """Task ``i`` prices what a worker priced before: a worker computes it for less, unless
            the workers are busy."""
            return not waited[0] and keys is not None and keys[i] in self._there and keys[i] not in self._here

        def take() -> int | None:
            """The task this process computes next: its own next, else the next not handed out,
            else one handed to a worker that has not started it (withdrawn), else None; never one
            whose pricing a worker holds (it waits for the workers instead)."""
            if local:
                return local.popleft()
            i = next((i for i in remote if not theirs(i)), None)
            if i is not None:
                remote.remove(i)
                return i
            for future in sorted(pending, key=futures.get):
                if not theirs(futures[future]) and future.cancel():
                    pending.discard(future)
                    return futures[future]
            return None

        def computed_here(i: int):
            if keys is not None:
                self._here.add(keys[i])
            return here(i)

        try:
            if here is not None and tasks:
                first = take()  # its own first, else the first of all, the likeliest to matter, here
                hand_out()
                if first is not None:
                    yield first, computed_here(first)
            hand_out()
            while pending:
                done = {f for f in pending if f.done()}
                if not done and here is not None and (mine_next := take()) is not None:
                    yield mine_next, computed_here(mine_next)
                    hand_out()
                    continue
                if not done and here is not None and not waited[0]:
                    done, _ = wait(pending, timeout=STEAL_AFTER_S, return_when=FIRST_COMPLETED)
                    waited[0] = not done
                    if not done:
                        continue
                if not done:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                pending -= done
                for future in sorted(done, key=futures.get):
                    got = future.result()
                    if keys is not None:
                        self._there.add(keys[futures[future]])
                    yield futures[future], got
                hand_out()
        except BrokenProcessPool:
            raise self._lost(workers) from None
        finally:
            for future in pending:
                future.cancel()

    def _lost(self, workers: list) -> SystemFailure:
        """The error for a worker the system ended (the pool ends the others with SIGTERM), the
        workers ended."""
        self.close()
        _end(workers)  # the pool may have let go of them while it broke: ended here too
        codes = [p.exitcode for p in workers if p.exitcode is not None]
        code = next((c for c in codes if c != -signal.SIGTERM), codes[0] if codes else None)
        return SystemFailure(f"a worker process of the search (--jobs) {ended_how(code)}",
                             hint="plan again with fewer --jobs; --jobs 1 plans in this process alone")

    def close(self) -> None:
        """End the workers now (a task still running is not waited for)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        manager = getattr(pool, "_executor_manager_thread", None)
        lock = getattr(pool, "_shutdown_lock", None)
        # the tasks' queue's feeder thread may be blocked writing to a worker a stop signal to the
        # command's group ended: not joined at exit (multiprocessing's exit handler waited on it
        # until end()'s watchdog, 10 s after `timeout` sent SIGTERM)
        call_queue = getattr(pool, "_call_queue", None)
        if call_queue is not None:
            call_queue.cancel_join_thread()
        # a stop signal raised in this thread inside the pool's own ``with lock`` can leave that lock
        # held (the interrupt lands after the lock is taken, before the block that releases it):
        # the pool is then not shut down in order, its workers are ended all the same
        if lock is None or lock.acquire(timeout=LOCK_WAIT_S):
            if lock is not None:
                lock.release()
            pool.shutdown(wait=False, cancel_futures=True)
        _end(processes)
        # the pool's own thread reaps its workers too: until it has, one it reaped may still read
        # as alive here (its exit status taken by that thread, not yet recorded)
        if manager is not None:
            manager.join(timeout=2.0)
        # the fork server too, now (a later pool starts another): ended, then reaped
        server = getattr(multiprocessing.forkserver, "_forkserver", None)
        pid = getattr(server, "_forkserver_pid", None)
        if pid is not None:
            try:
                os.kill(pid, signal.SIGTERM)
                server._stop()
            except (OSError, AttributeError):
                pass
