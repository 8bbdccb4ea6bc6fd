"""A worker process the system kills (SIGKILL, as the out-of-memory killer sends it) while it holds a
task: the sweep's forked workers (lifecycle.forked_workers) answer that task as lost, saying how, and
answer the others; the search's pool (lifecycle.process_pool, `plan --jobs`) ends in one line saying
how. Nothing waits forever, and no worker is left running. The workers really are killed: each task
that should die sends itself SIGKILL."""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import signal
import time

import pytest

from lifecycle.forked_workers import Lost, each_forked
from lifecycle.process_pool import ProcessPool, ended_how
from networks.errors import DnnplanError
from networks.writing import SystemFailure

KILLED = "was killed by signal 9 (SIGKILL: out of memory?)"


def _tenfold_or_die(task: int, kept: dict | None = None) -> int:
    """Ten times ``task``; task 2 is killed by SIGKILL, task 3 exits with status 3, task 4 raises."""
    if task == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    if task == 3:
        os._exit(3)
    if task == 4:
        raise DnnplanError("four is refused")
    return task * 10


def _gone(pids: list[int]) -> bool:
    """Whether none of ``pids`` runs any more (reaped, or at most a zombie)."""
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rpartition(")")[2].split()[0] not in ("Z", "X"):
                    return False
        except OSError:
            pass
    return True


def _started_here(before: set) -> list:
    """The children alive now that were not before the test began."""
    return [p for p in multiprocessing.active_children() if p not in before]


def test_how_a_worker_ended_is_said_in_words():
    assert ended_how(-signal.SIGKILL) == KILLED
    assert ended_how(-signal.SIGSEGV) == "was killed by signal 11 (SIGSEGV)"
    assert ended_how(3) == "exited with status 3"


@pytest.mark.parametrize("jobs", [1, 2, 3])
def test_a_killed_task_is_lost_and_the_others_answered(jobs):
    before = set(multiprocessing.active_children())  # other tests' workers, not these
    pids = []

    def tenfold(task: int) -> int:
        if task == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        if task == 3:
            os._exit(3)
        return task * 10, os.getpid()

    got = {}
    for task, answer in each_forked(tenfold, iter([1, 2, 3, 5, 6, 7]), jobs):
        if isinstance(answer, Lost):
            got[task] = answer
        else:
            got[task], pid = answer
            pids.append(pid)
    assert got == {1: 10, 2: Lost(KILLED), 3: Lost("exited with status 3"), 5: 50, 6: 60, 7: 70}
    assert not _started_here(before) and _gone(pids)


def test_tasks_are_drawn_as_workers_free_and_a_task_error_is_raised_here():
    before = set(multiprocessing.active_children())  # other tests' workers, not these
    drawn = []

    def tasks():
        for task in (1, 5, 4, 6):
            drawn.append(task)
            yield task

    answers = each_forked(_tenfold_or_die, tasks(), 2)
    assert next(answers) in ((1, 10), (5, 50))
    assert drawn == [1, 5, 4]  # two at the start, the third when the first answered
    with pytest.raises(DnnplanError, match="four is refused"):
        list(answers)
    assert not _started_here(before)


def test_leaving_early_ends_the_workers():
    before = set(multiprocessing.active_children())  # other tests' workers, not these
    answers = each_forked(lambda task: task, iter(range(10)), 3)
    assert next(answers)[1] == 0
    answers.close()
    assert not _started_here(before)


def test_the_search_pool_ends_in_one_line_when_a_worker_is_killed():
    before = set(multiprocessing.active_children())  # other tests' workers, not these
    pool = ProcessPool(2)
    try:
        with pytest.raises(SystemFailure) as err:
            list(pool.unordered(_tenfold_or_die, [1, 2, 5, 6]))
        workers = pool._pool
    finally:
        pool.close()
    message = str(err.value)
    assert message.startswith(f"a worker process of the search (--jobs) {KILLED}") and "\n" not in message
    assert workers is None  # the pool was ended with the error
    assert not _started_here(before)
    again = ProcessPool(2)
    try:
        assert sorted(again.unordered(_tenfold_or_die, [1, 5])) == [(0, 10), (1, 50)]  # a new pool works
    finally:
        again.close()


def _slow(task: bytes, kept: dict | None = None) -> int:
    time.sleep(60)
    return len(task)


def test_closing_the_pool_waits_on_nothing_a_stop_left_held():
    """A stop signal can land inside the executor's own ``with lock`` and leave the lock held (the
    interrupt raised after the lock is taken, before the block that releases it). Closing the pool
    still ends its workers, tasks queued behind a busy one, and multiprocessing's exit handler (it
    joins the queues' feeder threads) returns."""
    before = set(multiprocessing.active_children())  # other tests' workers, not these
    pool = ProcessPool(2)
    for i in range(4):  # the worker busy, more queued behind it
        pool.submit(_slow, bytes([i]) * 300_000)
    time.sleep(0.5)
    executor = pool._pool
    executor._shutdown_lock.acquire()  # as a stop signal inside ``with executor._shutdown_lock`` leaves it
    start = time.perf_counter()
    try:
        pool.close()
        multiprocessing.util._run_finalizers()  # what the exit handler runs last (the feeder's join)
    finally:
        executor._shutdown_lock.release()
    assert time.perf_counter() - start < 10
    assert not _started_here(before)


def test_the_pools_own_race_with_a_cancelled_task_prints_no_traceback():
    """Python 3.11's pool, finding its workers ended by close(), fails every task it holds, the
    cancelled ones too: InvalidStateError in its own thread, left out of stderr; any other thread's
    error, or another error of that thread, still reaches the hook."""
    import threading
    from concurrent.futures import InvalidStateError
    from concurrent.futures.process import _ExecutorManagerThread

    from lifecycle.process_pool import _quiet_cancelled_race

    seen = []
    hook = _quiet_cancelled_race(seen.append)
    manager = _ExecutorManagerThread.__new__(_ExecutorManagerThread)
    other = threading.Thread()
    race = threading.ExceptHookArgs((InvalidStateError, InvalidStateError("CANCELLED"), None, manager))
    hook(race)
    assert seen == []
    for args in (threading.ExceptHookArgs((InvalidStateError, InvalidStateError("x"), None, other)),
                 threading.ExceptHookArgs((ValueError, ValueError("x"), None, manager))):
        hook(args)
    assert len(seen) == 2
