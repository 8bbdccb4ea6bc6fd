"""Worker processes that compute a command's independent pieces side by side, and end with it.

:class:`Workers` maps a module-level function over picklable tasks on ``jobs`` processes (the
planner's ``planner.problem.parallel.Parallel``: ``dnnplan plan --jobs N``). The processes start
on the first map, from a fork server that imported ``preload`` once (so each starts in
milliseconds, without this process's threads), and end with the command however it ends: they
ignore Ctrl-C (the command answers it, then ends them), :meth:`Workers.close` runs at exit (also
when the command ends at once, ``dnnplan.search_bound.end``), and each is told by the kernel to
end when this process does (Linux's parent-death signal), ``kill -9`` included.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing
import os
import signal
from multiprocessing.reduction import ForkingPickler
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from types import MappingProxyType
from typing import Any, Callable, Iterator, Sequence

#: prctl's option that sends the caller a signal when its parent ends (linux/prctl.h)
PR_SET_PDEATHSIG = 1


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _started() -> None:
    """In each worker: Ctrl-C is the command's to answer; end when the command's process ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: close() at exit still ends them
        pass


def _read_only(mapping: MappingProxyType):
    return _mapping_proxy, (dict(mapping),)


def _mapping_proxy(mapping: dict) -> MappingProxyType:
    return MappingProxyType(mapping)


class Workers:
    """``jobs`` worker processes, started on the first map (module docstring)."""

    def __init__(self, jobs: int, preload: Sequence[str] = ()):
        self.jobs = max(1, int(jobs))
        self.preload = tuple(preload)
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # frozen specs keep their mappings read-only (a machine's peaks): sent as the mapping they show
            ForkingPickler.register(MappingProxyType, _read_only)
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
            if "forkserver" in methods and self.preload:
                context.set_forkserver_preload(list(self.preload))
            self._pool = ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_started)
            atexit.register(self.close)
        return self._pool

    def unordered(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        """``(i, fn(tasks[i]))`` as each finishes; closing the iterator cancels the tasks not started."""
        pool = self._executor()
        futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=futures.get):
                    yield futures[future], future.result()
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        """End the workers now (a task still running is not waited for)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join(timeout=1.0)
