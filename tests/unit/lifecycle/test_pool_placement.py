"""Where the search's pool (lifecycle.process_pool, `plan --jobs`) computes a task. It keeps a task
where its key was computed before: the pipeline search bounds the same pairs again for each ZeRO
stage, and a pair's pricing is kept in the process that priced it, so each pair goes back to that
process (its own tasks first, the others' taken only once its own are all taken). And the workers
compute ahead, while the command leaves them idle, what a later call will ask for: that call takes
their answers, or takes back a task not started."""

from __future__ import annotations

import time

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


def test_tasks_computed_ahead_while_idle_are_taken_by_the_call_that_asks_for_them():
    pool = ProcessPool(2)
    try:
        pool.when_idle(lambda: (_in_worker, [10, 11], None))
        pool.idle()  # no worker started yet: none is started for this
        assert pool._pool is None
        _where(pool, [1], False)  # the workers start
        pool.when_idle(lambda: (_in_worker, [10, 11], None))
        pool.idle()  # the workers compute 10 and 11 now
        time.sleep(2 * WORKER_S + 0.5)
        start = time.perf_counter()
        got = _where(pool, [10, 11, 12], True)
        assert got == {10: "worker", 11: "worker", 12: "here"}  # 10 and 11 as the worker answered them
        assert time.perf_counter() - start < WORKER_S  # not computed again
        pool.idle()  # nothing named: nothing computed
        assert _where(pool, [10], False) == {10: "here"}
    finally:
        pool.close()


def test_a_task_handed_out_ahead_and_not_started_is_taken_back():
    """Four tasks ahead, the worker busy with the first: this process takes back one not started
    rather than wait, and every task is answered once."""
    pool = ProcessPool(2)
    try:
        pool.ahead(_in_worker, [20, 21, 22, 23])
        time.sleep(WORKER_S / 3)  # the worker on 20, the others waiting
        answers = list(pool.unordered(_in_worker, [20, 21, 22, 23], lambda i: _here([20, 21, 22, 23][i])))
        assert sorted(key for _, (_, key) in answers) == [20, 21, 22, 23]
        assert "here" in {side for _, (side, _) in answers}
        assert "worker" in {side for _, (side, _) in answers}
    finally:
        pool.close()


def _started(task: tuple[str, int], kept: dict) -> int:
    """Notes that ``task`` started (in the file it names), then holds the worker a while."""
    path, key = task
    with open(path, "a") as fh:
        fh.write(f"{key}\n")
    time.sleep(WORKER_S / 3)
    return key


def test_a_task_submitted_now_goes_before_the_tasks_handed_out_ahead_not_started(tmp_path):
    """Six tasks ahead, one worker: a task submitted now waits only behind those already on their
    way to the worker (at most the worker's one running and the one queued for it), and the six are
    still computed, once each."""
    log = str(tmp_path / "started")
    pool = ProcessPool(2)
    try:
        _where(pool, [0], False)  # the worker started
        ahead = [(log, k) for k in range(30, 36)]
        pool.ahead(_started, ahead)
        assert pool.submit(_started, (log, 99)).result(timeout=60) == 99
        order = [int(line) for line in open(log).read().split()]
        assert 99 in order[:3]
        got = dict(pool.unordered(_started, ahead))
        assert sorted(got.values()) == list(range(30, 36))
        assert sorted(int(line) for line in open(log).read().split()) == [*range(30, 36), 99]
    finally:
        pool.close()
