"""Pipeline pairs' bounds computed by a worker ahead of their search give the numbers the search
computes itself, against any step held, and the same answer (planner.pipeline.workers.ahead)."""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future

from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import divisors
from planner.pipeline.workers.ahead import BoundAhead, BoundsAhead, against, bound_ahead, bounds_ahead, task_key
from planner.pipeline.workers.pair_bounds import pair_bound
from planner.pipeline.search import pair_tasks_ahead, search_pipeline
from planner.problem.priced_layers import PricedLayers
from planner.problem.priced_once import priced_once
from planner.problem.solve import Settings
from profiler import context

from tests.support.pipeline_cases import gpt4

SETTINGS = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="fp16"))
LIMIT = 2.0 ** 30 * 0.0012  # memory-bound stages


class _Worker:
    """Two jobs; a task handed out is computed at once, as a worker computes it (one ``kept``)."""

    jobs = 2

    def __init__(self, stop_after: int | None = None):
        self.kept: dict = {}
        self.handed: list = []
        self.stop_after = stop_after  # the search calls the bounds in after this many pairs
        self.stops = 0

    def submit(self, fn, task):
        self.handed.append(fn)
        calls = iter(range(10 ** 6))
        kept = dict(self.kept, stopped=lambda: self.stop_after is not None and next(calls) >= self.stop_after)
        future = Future()
        future.set_result(fn(task, kept))
        return future

    def stop_handed_out(self):
        self.stops += 1

    def unordered(self, fn, tasks, here=None, keys=None):
        for i, task in enumerate(tasks):
            yield i, fn(task, self.kept)


def _case(tmp_path):
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    return ctx.network, 8, 8, ctx.machine, priced_once(ctx.compute)


def test_a_bound_computed_ahead_is_the_bound_against_any_step_held(tmp_path):
    net, batch, p, machine, compute = _case(tmp_path)
    tasks = pair_tasks_ahead(net, batch, p, machine, compute, LIMIT, dataclasses.replace(SETTINGS, priced=PricedLayers()))
    assert len(tasks) > 8
    partial = whole = 0
    for task in tasks:
        got = bound_ahead(task, {})
        helds = [None, float("inf"), 0.0] + [s for s, _ in got.partials] + [s * (1 + 1e-9) for s, _ in got.partials]
        if got.whole.step_s < float("inf"):
            helds += [got.whole.step_s * 0.999, got.whole.step_s * 1.001]
        for above in helds:
            expected = pair_bound(dataclasses.replace(task, above=above), {})
            assert against(got, above) == expected, (task.stages, task.micro_batches, above)
            partial += expected.fits is None
            whole += expected.fits is not None
    assert partial > 0 and whole > 0  # both kinds of answer were checked


def test_a_pair_the_worker_did_not_come_to_is_bounded_by_the_search():
    got = BoundAhead(((3.0, 1.0),))  # its first partial bound alone
    assert against(got, 2.0).step_s == 3.0 and against(got, 2.0).fits is None
    assert against(got, 4.0) is None and against(got, None) is None


def test_called_in_early_the_worker_gives_what_it_has_bounded(tmp_path):
    net, batch, p, machine, compute = _case(tmp_path)
    tasks = tuple(pair_tasks_ahead(net, batch, p, machine, compute, LIMIT,
                                   dataclasses.replace(SETTINGS, priced=PricedLayers())))
    n = len(tasks)
    got = bounds_ahead(tasks, {"stopped": iter([False] * (n + 2) + [True] * n).__next__})
    assert len(got) == n  # every pair's first partial bound, and the two pairs of least first bound whole
    assert sum(1 for g in got.values() if g.whole is not None) == 2
    assert all(len(g.partials) == 1 for g in got.values() if g.whole is None)
    first = sorted(tasks, key=lambda t: got[task_key(t)].partials[0][0])[:2]
    assert all(got[task_key(t)].whole is not None for t in first)


def test_the_search_takes_the_bounds_computed_ahead_and_answers_as_alone(tmp_path):
    net, batch, p, machine, compute = _case(tmp_path)
    settings = dataclasses.replace(SETTINGS, priced=PricedLayers())
    alone = search_pipeline(net, batch, p, machine, compute, LIMIT, settings, micro_counts=divisors(8), prove_s=None)
    n = len(pair_tasks_ahead(net, batch, p, machine, compute, LIMIT, settings))
    for stop_after in (None, n + 3):  # every pair bounded ahead; or every first partial bound and three pairs
        worker = _Worker(stop_after)
        ahead = BoundsAhead(worker)
        shared = dataclasses.replace(SETTINGS, priced=PricedLayers(), parallel=worker, ahead=ahead)
        ahead.hand_out(pair_tasks_ahead(net, batch, p, machine, compute, LIMIT, shared))
        taken = []
        bound = ahead.bound
        ahead.bound = lambda task: taken.append(b := bound(task)) or b
        got = search_pipeline(net, batch, p, machine, compute, LIMIT, shared, micro_counts=divisors(8), prove_s=None)
        assert worker.handed[0] is bounds_ahead
        answered = sum(b is not None for b in taken)
        assert answered == len(taken) if stop_after is None else 3 <= answered < len(taken)
        assert (got.stages, got.micro_batches, got.cut, got.prediction.step_s, got.stats["proven_gap"]) == \
            (alone.stages, alone.micro_batches, alone.cut, alone.prediction.step_s, alone.stats["proven_gap"])
        assert [(c.stages, c.micro_batches, c.bound_s, c.lower_s, c.skipped) for c in got.candidates] == \
            [(c.stages, c.micro_batches, c.bound_s, c.lower_s, c.skipped) for c in alone.candidates]


def test_a_task_handed_to_a_worker_carries_no_workers_budget_or_bounds_ahead(tmp_path):
    net, batch, p, machine, compute = _case(tmp_path)
    shared = dataclasses.replace(SETTINGS, parallel=_Worker(), ahead=BoundsAhead(_Worker()))
    task = pair_tasks_ahead(net, batch, p, machine, compute, LIMIT, shared)[0]
    assert task.settings.parallel is None and task.settings.ahead is None and task.settings.budget is None


class _Pending:
    """Two jobs; a task handed out runs until its test sets its result."""

    jobs = 2

    def __init__(self):
        self.future = Future()
        self.future.set_running_or_notify_cancel()  # started: not taken back
        self.stops = 0

    def submit(self, fn, task):
        return self.future

    def stop_handed_out(self):
        self.stops += 1


def test_only_a_search_of_the_pairs_handed_out_waits_for_the_worker(tmp_path):
    net, batch, p, machine, compute = _case(tmp_path)
    settings = dataclasses.replace(SETTINGS, priced=PricedLayers())
    tasks = pair_tasks_ahead(net, batch, p, machine, compute, LIMIT, settings)
    pool = _Pending()
    ahead = BoundsAhead(pool)
    ahead.hand_out(tasks[1:])
    done = bounds_ahead(tuple(tasks[1:]), {})
    late = threading.Timer(2.0, pool.future.set_result, (done,))  # a search that waited would wait this long
    late.start()
    try:
        start = time.perf_counter()
        assert ahead.bound(tasks[0]) is None and pool.stops == 1  # another pair: asked to stop, not waited for
        assert time.perf_counter() - start < 1.0
    finally:
        late.join()
    assert ahead.bound(tasks[1]) == against(done[task_key(tasks[1])], None) and pool.stops == 1
