"""Tasks handed one at a time to worker processes forked from this one, each task's answer or how
its worker ended: :func:`each_forked` (``dnnplan plan --sweep ... --sweep-jobs N``, a point a task).

A worker is forked (it holds what this process holds: nothing is pickled but the tasks and the
answers), takes a task, answers it, and takes the next. A worker the system ends while it holds a
task (the out-of-memory killer's SIGKILL, a crash) does not leave the caller waiting: that task's
answer is :class:`Lost`, saying how the worker ended (:func:`lifecycle.process_pool.ended_how`), a
fresh worker takes the next task, and the other tasks are answered. An exception a task raises is
raised here. Workers start as :class:`lifecycle.process_pool.ProcessPool`'s do (Ctrl-C is the
caller's, each ends with this process) and end with the iteration, however it ends: nothing is left
running.
"""

from __future__ import annotations

import multiprocessing
import signal
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterator

from lifecycle.jobs import LAUNCHER_ENV, launcher_env
from lifecycle.process_pool import ended_how, hold_signals, worker_started
from lifecycle.stops import STOP_SIGNALS

#: how long an ended worker is waited for before the next is ended [s]
JOIN_S = 1.0


@dataclass(frozen=True)
class Lost:
    """A task whose worker ended before it answered: ``how`` (``was killed by signal 9 (SIGKILL:
    out of memory?)``, ``exited with status 3``)."""

    how: str


def _serve(conn: Connection, fn: Callable[[Any], Any], launcher: dict) -> None:
    """A worker: each task received answered with ``(True, fn(task))`` or ``(False, the error)``,
    until None or the caller's end of the pipe closes."""
    worker_started(launcher)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        try:
            answer: tuple[bool, Any] = (True, fn(task))
        except BaseException as err:  # noqa: BLE001 - raised in the caller
            answer = (False, err)
        try:
            conn.send(answer)
        except Exception as err:  # noqa: BLE001 - an answer that does not pickle, as an error that does
            conn.send((False, RuntimeError(f"{type(err).__name__}: {err}")))


class _Worker:
    """One forked worker and this process's end of its pipe."""

    def __init__(self, fn: Callable[[Any], Any]):
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(theirs, fn, {LAUNCHER_ENV: launcher_env()[LAUNCHER_ENV]}),
                                       daemon=True)
        held = hold_signals(signal.SIG_BLOCK, STOP_SIGNALS)  # started whole before a stop signal is taken
        try:
            self.process.start()
        finally:
            hold_signals(signal.SIG_SETMASK, held)
        theirs.close()
        self.task: Any = None

    def answer(self) -> Any:
        """The answer to the task held (the worker ready or ended): its result, or :class:`Lost`."""
        try:
            if self.conn.poll():
                ok, value = self.conn.recv()
                if not ok:
                    raise value
                return value
        except (EOFError, OSError):
            pass
        self.process.join(JOIN_S)
        return Lost(ended_how(self.process.exitcode))

    def end(self, idle: bool) -> None:
        """An idle worker told to end, a busy one (the caller stopped) ended; either reaped."""
        if idle and self.process.is_alive():
            try:
                self.conn.send(None)
                self.process.join(JOIN_S)
            except OSError:
                pass
        if self.process.is_alive():
            self.process.terminate()
        self.process.join(JOIN_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def each_forked(fn: Callable[[Any], Any], tasks: Iterator[Any], jobs: int) -> Iterator[tuple[Any, Any]]:
    """``(task, fn(task))`` for every task of ``tasks``, ``jobs`` at a time in forked workers, as each
    finishes (module docstring): a task is drawn from ``tasks`` when a worker frees, and a task
    whose worker ended before answering gives ``(task, Lost(how))``."""
    idle: list[_Worker] = []
    busy: dict[Connection, _Worker] = {}
    every: list[_Worker] = []

    def hand_out(worker: _Worker | None) -> None:
        task = next(tasks, None)
        if task is None:
            if worker is not None:
                idle.append(worker)
            return
        if worker is not None:
            try:
                worker.conn.send(task)
            except OSError:  # it ended between tasks: a fresh one takes the task
                worker = None
        if worker is None:
            worker = _Worker(fn)
            every.append(worker)
            worker.conn.send(task)
        worker.task = task
        busy[worker.conn] = worker

    try:
        for _ in range(max(1, jobs)):
            hand_out(None)
        while busy:
            sentinels = {w.process.sentinel: w for w in busy.values()}
            ready = wait([*busy, *sentinels])
            done = {busy[r] if r in busy else sentinels[r] for r in ready}
            for worker in sorted(done, key=every.index):
                del busy[worker.conn]
                task, value = worker.task, worker.answer()
                hand_out(None if isinstance(value, Lost) else worker)
                yield task, value
    finally:
        for worker in every:
            worker.end(idle=worker in idle)
