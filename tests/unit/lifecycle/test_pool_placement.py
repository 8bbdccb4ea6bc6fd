"""Where the search's pool (lifecycle.process_pool, `plan --jobs`) computes a task. It keeps a task
where its key was computed before: the pipeline search bounds the same pairs again for each ZeRO
stage, and a pair's pricing is kept in the process that priced it, so each pair goes back to that
process (its own tasks first, the others' taken only once its own are all taken, and a worker's
only once the workers keep it waiting)."""

from __future__ import annotations

import time

from lifecycle import process_pool
from lifecycle.process_pool import ProcessPool

#: how long a worker's task takes, and this process's: the worker's long beside all of this
#: process's, so which process takes which task follows from the pool's order alone
WORKER_S = 0.6
HERE_S = 0.05


def _in_worker(task: int, kept: dict) -> tuple[str, int]:
    time.sleep(WORKER_S)
    return "worker", task


def _here(key: int) -> tuple[str, int]:
    time.sleep(HERE_S)
    return "here", key


def _where(pool: ProcessPool, keys: list[int], with_keys: bool) -> dict[int, str]:
    """Which process computed each key, the tasks in ``keys``' order."""
    got = pool.unordered(_in_worker, keys, lambda i: _here(keys[i]), keys if with_keys else None)
    return {key: side for _, (side, key) in got}


def test_a_task_goes_back_to_the_process_that_computed_its_key():
    pool = ProcessPool(2)
    try:
        first = _where(pool, [0, 1, 2, 3, 4, 5], True)
        workers = {k for k, side in first.items() if side == "worker"}
        assert workers and len(workers) < 6  # each side computed some
        again = _where(pool, [5, 4, 3, 2, 1, 0], True)  # the same keys, in another order
        assert {k for k, side in again.items() if side == "worker"} == workers
    finally:
        pool.close()


def test_without_keys_the_tasks_are_taken_in_order():
    """No keys: this process takes the first task and then the next not handed out, as before."""
    pool = ProcessPool(2)
    try:
        _where(pool, [0, 1, 2, 3, 4, 5], False)
        again = _where(pool, [5, 4, 3, 2, 1, 0], False)
        assert again[5] == "here"  # the first task, here whatever computed it before
        assert sorted(again) == [0, 1, 2, 3, 4, 5]
    finally:
        pool.close()


def _timed(task: tuple[int, float], kept: dict) -> tuple[str, int]:
    time.sleep(task[1])
    return "worker", task[0]


def test_a_task_a_worker_priced_waits_for_the_worker_unless_it_keeps_this_process_waiting(monkeypatch):
    """A task whose key only a worker computed is not taken here while the workers answer within
    STEAL_AFTER_S (it prices for less there); once one keeps this process waiting longer, it is."""
    monkeypatch.setattr(process_pool, "STEAL_AFTER_S", 0.5)  # a worker's answer, however loaded the machine
    steal_after = process_pool.STEAL_AFTER_S
    pool = ProcessPool(2)
    try:
        keys = list(range(8))

        def slow_here(i: int) -> tuple[str, int]:  # the worker takes most while this process takes one
            time.sleep(0.5)
            return "here", keys[i]

        first = {key: side for _, (side, key) in pool.unordered(_timed, [(k, 0.01) for k in keys], slow_here, keys)}
        theirs = [k for k, side in first.items() if side == "worker"]
        assert len(theirs) > 4
        quick = pool.unordered(_timed, [(k, 0.01) for k in theirs],
                               lambda i: _here(theirs[i]), theirs)
        assert {side for _, (side, _) in quick} == {"worker"}
        slow = pool.unordered(_timed, [(k, 3 * steal_after) for k in theirs], lambda i: _here(theirs[i]), theirs)
        assert "here" in {side for _, (side, _) in slow}
    finally:
        pool.close()
