"""The pipeline search with its pairs' bounds computed by worker processes (``dnnplan plan --jobs N``)
gives the answer one process gives: the same choice, step, cut, every pair's bound and the proven
gap, the pairs searched and the other pairs' gaps closed by the workers too
(planner.pipeline.workers.pair_bounds, planner.pipeline.workers.pair_searches, planner.pipeline.pair_closing,
lifecycle.process_pool)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import divisors
from lifecycle.process_pool import ProcessPool
from planner.pipeline.workers.pair_bounds import pair_bound
from planner.pipeline.workers.pair_searches import search_pair
from planner.pipeline.search import search_pipeline
from planner.pipeline.triples import AUTO, bounded
from planner.problem.parallel import IN_PROCESS
from planner.problem.priced_layers import PricedLayers
from planner.problem.priced_once import priced_once
from planner.problem.solve import Settings
from profiler import context

from tests.support.pipeline_cases import gpt4

SETTINGS = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="fp16"))


class _Counted(ProcessPool):
    """A pool that counts the tasks handed to it, and those its caller's process computed."""

    sent = 0
    here = 0
    closings = 0

    def unordered(self, fn, tasks, here=None, keys=None, shared=()):
        self.sent += len(tasks)
        self.closings += sum(1 for t in tasks if t.close) if fn is search_pair else 0

        def counted(i):
            self.here += 1
            return here(i)

        yield from super().unordered(fn, tasks, None if here is None else counted, keys, shared)


class _AllInWorkers:
    """Two jobs, every task computed as a worker computes it (``fn(task, kept)``, one ``kept``
    across the tasks), none by the search's own process: what a worker sends back is what the
    search takes."""

    jobs = 2

    def __init__(self):
        self.fns: list = []
        self.kept: dict = {}
        self.closings = 0  # pairs' gaps closed as a worker closes them
        self.searches = 0  # pairs searched as a worker searches them, ahead of their turn

    def unordered(self, fn, tasks, here=None, keys=None, shared=()):
        self.fns.append(fn)
        self.closings += sum(1 for t in tasks if fn is search_pair and t.close)
        for i, task in enumerate(tasks):
            yield i, fn(task, self.kept)

    def submit(self, fn, task, shared=()):
        self.fns.append(fn)
        self.searches += fn is search_pair and not task.close
        future = Future()
        future.set_result(fn(task, self.kept))
        return future


def _summary(choice) -> tuple:
    return (choice.stages, choice.micro_batches, choice.chunks, choice.cut, choice.prediction.step_s,
            choice.stats["proven_gap"], choice.stats["closed_pairs"],
            tuple((c.stages, c.micro_batches, c.chunks, c.bound_s, c.step_s, c.lower_s, c.skipped, c.closed)
                  for c in choice.candidates))


@pytest.mark.parametrize("schedule", ["1f1b", pytest.param(AUTO, marks=pytest.mark.slow)])
def test_workers_give_the_answer_one_process_gives(tmp_path, schedule):
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.0012  # memory-bound stages: Lagrangian gaps, closed by the proof
    args = (ctx.network, 8, 8, ctx.machine, ctx.compute, limit)
    alone = search_pipeline(*args, SETTINGS, micro_counts=divisors(8), prove_s=None, schedule=schedule)
    workers = _Counted(2, ("planner.pipeline.workers.pair_bounds",))
    try:
        shared = search_pipeline(*args, dataclasses.replace(SETTINGS, parallel=workers), micro_counts=divisors(8),
                                 prove_s=None, schedule=schedule)
    finally:
        workers.close()
    assert len(alone.candidates) > 8 and alone.stats["proven_gap"] == 0
    assert workers.sent >= len([c for c in alone.candidates if c.bound_s is not None])  # every bound went out
    assert 0 < workers.here < workers.sent  # the search's own process bounded some, the worker the others
    assert workers.closings > 0 and _summary(alone)[6] > 0  # other pairs' gaps closed side by side too
    assert _summary(shared) == _summary(alone)


def test_the_bounds_come_in_bound_order_whatever_order_they_finish_in():
    """In order of the bound (the first number; here above the stages' mean bracket, the third, by 2
    for odd m, which puts 5 after 4 where the mean would put it before), each with its bound."""
    combos = [(0.1 * i, 2 ** (i % 3), i, 1) for i in range(7)]

    def bound(stages, m, v):
        return 10.0 - m + 2 * (m % 2), m != 3, 10.0 - m

    def backwards(given):
        for i in reversed(range(len(given))):
            yield i, bound(*given[i][1:])

    assert bounded(bound, combos, many=backwards) == bounded(bound, combos)
    assert bounded(bound, combos, many=lambda given: IN_PROCESS.unordered(lambda c, kept: bound(*c[1:]), given)) \
        == bounded(bound, combos)
    assert [c[2] for c in bounded(bound, combos)] == [6, 4, 5, 2, 3, 0, 1]
    assert [c[0] for c in bounded(bound, combos)] == [10.0 - m + 2 * (m % 2) for m in (6, 4, 5, 2, 3, 0, 1)]


def test_bounds_and_closings_computed_only_by_workers_give_the_answer_one_process_gives(tmp_path):
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    args = (ctx.network, 8, 8, ctx.machine, priced_once(ctx.compute), 2.0 ** 30 * 0.0012)
    settings = dataclasses.replace(SETTINGS, priced=PricedLayers())
    alone = search_pipeline(*args, settings, micro_counts=divisors(8), prove_s=None)
    away = _AllInWorkers()
    elsewhere = search_pipeline(*args, dataclasses.replace(settings, parallel=away, priced=PricedLayers()),
                                micro_counts=divisors(8), prove_s=None)
    assert pair_bound in away.fns and away.searches > 0 and away.closings > 0 and alone.stats["closed_pairs"] > 0
    assert _summary(elsewhere) == _summary(alone)
    assert elsewhere.stats["worst_stage_gap"] == alone.stats["worst_stage_gap"]


def test_a_workers_search_stops_at_the_commands_deadline_and_the_pair_is_searched_here(tmp_path):
    """A pair's search handed to a worker carries the command's deadline (a worker has no budget):
    past it the worker answers LATE at once instead of holding the worker past the command's time
    limit, and the command then searches the pair itself, under its own budget."""
    import time

    from planner.pipeline.workers.pair_searches import LATE, Ahead, search_task
    from planner.pipeline.pair_search import PairSearch
    from planner.pipeline.stack import uniform_stack
    from planner.solvers import Budget

    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=SETTINGS.choices)
    stack = uniform_stack(ctx.network)
    spent = dataclasses.replace(SETTINGS, budget=Budget(0.0))
    search = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, 2.0 ** 30, spent)
    task = search_task(search, 2, 8)
    assert task.ends is not None and task.ends <= time.perf_counter()
    assert search_pair(task, {}) == LATE
    fresh = dataclasses.replace(task, ends=None)  # the same pair with time left: searched
    assert search_pair(fresh, {}) != LATE

    class _Late:
        jobs = 2

        def submit(self, fn, task, shared=()):
            future = Future()
            future.set_running_or_notify_cancel()  # a worker has it: not taken back
            future.set_result(LATE)
            return future

    here = []
    ahead = Ahead(search, _Late(), [(1.0, 2, 8, 1, True), (1.0, 2, 4, 1, True)], lambda i: here.append(i) or i,
                  lambda i: False)
    ahead.hand_out(0, 10.0)  # pair 1 to the worker
    assert ahead.best(1, 10.0, lambda: None) == 1 and here == [1]



def test_a_workers_search_left_when_the_search_moves_on_answers_late_and_the_pool_is_told(tmp_path):
    """A pair searched ahead of its turn whose search has moved on (``kept["stopped"]()``: the pool's
    ``stop_handed_out``) answers LATE at once; Ahead.close tells the pool only while a search it
    handed out is still running."""
    from planner.pipeline.workers.pair_searches import LATE, Ahead, search_task
    from planner.pipeline.pair_search import PairSearch
    from planner.pipeline.stack import uniform_stack

    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=SETTINGS.choices)
    search = PairSearch(uniform_stack(ctx.network), 8, 8, ctx.machine, ctx.compute, 2.0 ** 30, SETTINGS)
    task = search_task(search, 2, 8)
    assert search_pair(task, {"stopped": lambda: True}) == LATE
    assert search_pair(task, {"stopped": lambda: False}) != LATE

    class _Held:
        jobs = 2
        told = 0

        def submit(self, fn, task, shared=()):
            future = Future()
            future.set_running_or_notify_cancel()  # a worker runs it: not taken back, not done
            return future

        def stop_handed_out(self):
            self.told += 1

    held = _Held()
    ahead = Ahead(search, held, [(1.0, 2, 8, 1, True), (1.0, 2, 4, 1, True)], lambda i: i, lambda i: False)
    ahead.hand_out(0, 10.0)
    ahead.close()
    assert held.told == 1
    idle = _Held()
    Ahead(search, idle, [(1.0, 2, 8, 1, True)], lambda i: i, lambda i: False).close()  # none handed out
    assert idle.told == 0
