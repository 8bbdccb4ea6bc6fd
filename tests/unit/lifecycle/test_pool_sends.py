"""A task reaches a worker of the search's pool (lifecycle.process_pool) as it stood when handed out.

The search hands out tasks that share objects it goes on filling (a compute model's cache of kernel
times); were a task pickled later, in the pool's own thread, it would change while pickled (the
feeder thread's "dictionary changed size during iteration", raised from the task's future) or
reach the worker half changed."""

from __future__ import annotations

import os

from lifecycle.process_pool import ProcessPool

#: entries in the shared dict: enough that pickling it takes a while
SIZE = 200_000


def _size(task: dict, kept: dict) -> int:
    return len(task["shared"])


def test_a_submitted_task_is_sent_as_it_stood():
    pool = ProcessPool(2)
    try:
        shared = {i: float(i) for i in range(SIZE)}
        future = pool.submit(_size, {"shared": shared})
        for i in range(SIZE, 2 * SIZE):  # the caller fills it on at once
            shared[i] = float(i)
        assert future.result() == SIZE
    finally:
        pool.close()


def test_tasks_handed_out_beside_this_process_are_sent_as_they_stood():
    pool = ProcessPool(2)
    try:
        shared = {i: float(i) for i in range(SIZE)}
        tasks = [{"shared": shared} for _ in range(4)]

        def here(i: int) -> int:
            n = len(shared)  # this process's task fills the dict the workers' tasks share
            for j in range(len(shared), len(shared) + SIZE):
                shared[j] = float(j)
            return n

        got = dict(pool.unordered(_size, tasks, here))
        assert sorted(got) == [0, 1, 2, 3]
        assert got[0] == SIZE  # this process took the first task
        # each worker's task has the size the dict had when it was handed out: SIZE entries more
        # for each task this process computed before it
        assert all(n % SIZE == 0 and n >= SIZE for n in got.values())
    finally:
        pool.close()


class _Pickles:
    """An object that counts, in the process that pickles it, how often it is pickled."""

    count = 0

    def __init__(self, payload: list):
        self.payload = payload

    def __reduce__(self):
        _Pickles.count += 1
        return _Pickles, (self.payload,)


def _identity(task: dict, kept: dict) -> tuple[int, int, int]:
    """The shared object's id in the worker, the worker's pid and the payload's length."""
    return id(task["stack"]), os.getpid(), len(task["stack"].payload)


def test_a_shared_object_is_pickled_once_and_loaded_once_in_a_worker():
    pool = ProcessPool(2)
    try:
        stack = _Pickles(list(range(1000)))
        _Pickles.count = 0
        tasks = [{"stack": stack, "i": i} for i in range(6)]
        got = dict(pool.unordered(_identity, tasks, shared=(stack,)))
        got.update({6: pool.submit(_identity, {"stack": stack, "i": 6}, shared=(stack,)).result()})
        assert sorted(got) == list(range(7))
        assert _Pickles.count == 1  # once for seven tasks and two calls
        # one worker: every task saw the one object it loaded, with the payload whole
        assert len({(ident, pid) for ident, pid, _ in got.values()}) == 1
        assert {n for _, _, n in got.values()} == {1000}
        # not named as shared: pickled with each task, a new object in the worker each time
        _Pickles.count = 0
        plain = dict(pool.unordered(_identity, tasks[:3]))
        assert _Pickles.count == 3 and {n for _, _, n in plain.values()} == {1000}
    finally:
        pool.close()
