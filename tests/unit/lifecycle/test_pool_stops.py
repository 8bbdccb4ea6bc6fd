"""A task handed out ahead (lifecycle.process_pool.ProcessPool.submit) is told to stop when the
command moves on (``stop_handed_out``): its worker is free for the tasks after it. A pipeline pair
searched ahead of its turn held its worker to the command's deadline, and the next ZeRO stage's
bounds handed to that worker waited as long."""

from __future__ import annotations

import time

from lifecycle.process_pool import ProcessPool

#: how long a task waits to be told to stop before it gives up [s]
PATIENCE_S = 20.0


def _until_stopped(task: float, kept: dict) -> tuple[bool, float]:
    """Waits until told to stop (True) or ``PATIENCE_S`` pass (False); how long it waited."""
    start = time.perf_counter()
    if task:
        time.sleep(task)
    while time.perf_counter() - start < PATIENCE_S:
        if kept["stopped"]():
            return True, time.perf_counter() - start
        time.sleep(0.01)
    return False, time.perf_counter() - start


def _told(task: None, kept: dict) -> bool:
    return kept["stopped"]()


def test_a_running_task_is_told_to_stop_and_frees_its_worker():
    pool = ProcessPool(2)
    try:
        running = pool.submit(_until_stopped, 0.0)
        time.sleep(0.5)  # it runs in the worker
        pool.stop_handed_out()
        stopped, waited = running.result(timeout=PATIENCE_S + 5)
        assert stopped and waited < PATIENCE_S / 2
        assert pool.submit(_told, None).result(timeout=10) is False  # handed out after the stop: not told
    finally:
        pool.close()


def test_tasks_mapped_beside_this_process_are_never_told_to_stop():
    pool = ProcessPool(2)
    try:
        pool.stop_handed_out()
        assert not any(got for _, got in pool.unordered(_told, [None] * 3))
    finally:
        pool.close()


def _one(task: int, kept: dict) -> int:
    return task


def test_closing_does_not_wait_at_exit_for_the_feeder_of_ended_workers():
    """`timeout 4 dnnplan plan llama3.1-405b -p 16384 ... --jobs 8` exited after 14 s in 2 of 4 runs
    on the 2-core VM: SIGTERM to the group ended the workers, the tasks' queue's feeder thread was
    left blocked writing to them, and multiprocessing's exit handler joined it until end()'s 10 s
    watchdog. Closed, the pool's queue is not joined at exit (8 of 8 runs then exited at 4-7 s)."""
    pool = ProcessPool(2)
    assert list(pool.unordered(_one, [1, 2, 3]))
    queue = pool._pool._call_queue
    pool.close()
    assert queue._joincancelled
