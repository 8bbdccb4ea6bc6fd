"""A task reaches a worker of the search's pool (lifecycle.process_pool) as it stood when handed out.

The search hands out tasks that share objects it goes on filling (a compute model's cache of kernel
times); were a task pickled later, in the pool's own thread, it would change while pickled (the
feeder thread's "dictionary changed size during iteration", raised from the task's future) or
reach the worker half changed."""

from __future__ import annotations

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
