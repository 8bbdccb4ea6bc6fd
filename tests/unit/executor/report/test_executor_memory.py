"""The measured peak memory of a rank (executor.backend.host_memory): an extra, untimed step under tracemalloc,
the largest rank's peak in the measurement, and beside the prediction's peak in execute's JSON."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from costmodel.machine.loading import load_machine
from costmodel.step.prediction import predict_step
from executor.report.collect import RankTimes, aggregate
from executor.report.compare import comparison_json, compare_prediction
from executor.backend.host_memory import held_bytes, traced_peak_bytes
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers
from profiler.context import compute_model

from tests.support.cases import load, make_plan


def test_traced_peak_counts_what_the_call_allocates_not_what_was_there():
    there = np.ones(2**20, dtype=np.float32)  # 4 MiB allocated before: not counted

    def work():
        a = np.ones(2**19, dtype=np.float64)  # 4 MiB at once
        del a
        b = np.ones(2**18, dtype=np.float32)  # 1 MiB after it was freed
        return b

    peak = traced_peak_bytes(work)
    assert 4 * 2**20 <= peak < 4 * 2**20 + 2**20 + 2**16
    assert there.nbytes == 4 * 2**20


def test_held_bytes_counts_an_array_once():
    a, b = np.zeros(100, np.float32), np.zeros(10, np.float64)
    assert held_bytes([a, b, a, "not an array"]) == a.nbytes + b.nbytes


def test_the_memory_step_is_plausible_and_leaves_the_timed_steps_alone():
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    timers = Timers(keep_spans=True)
    res = run_plan(plan, net, MPI.COMM_SELF, steps=2, warmup=1, seed=0, timers=timers)
    weights = sum(np.prod(shape) for layer in net.layers for _, shape in layer.weights) * 4
    # at least the weights, their momentum and their gradients (float32) are held at once
    assert res.peak_bytes >= 3 * weights
    pred = predict_step(net, 8, plan.strategies(), plan.algorithms(), load_machine("dgx-a100"),
                        compute_model(load_machine("dgx-a100"), None, 1))
    assert 0.5 < res.peak_bytes / pred.memory_peak_bytes < 2  # the same arrays the cost model counts
    assert set(timers.step_wall) == {-1, 0, 1} and {s.step for s in timers.spans} == {-1, 0, 1}
    assert len(res.losses) == 3 and len(res.step_s) == 2
    off = run_plan(plan, net, MPI.COMM_SELF, steps=1, warmup=0, seed=0, measure_memory=False)
    assert off.peak_bytes is None


def _rank(rank: int, peak: int | None) -> RankTimes:
    return RankTimes(rank, {0: 0.01}, {(0, "fc", "fwd_compute"): 0.005}, ("fc",), (), peak)


def test_the_measurement_takes_the_largest_ranks_peak_and_none_when_a_rank_has_none():
    assert aggregate([_rank(0, 1000), _rank(1, 3000)], 1).peak_bytes == 3000
    assert aggregate([_rank(0, 1000), _rank(1, None)], 1).peak_bytes is None


def test_execute_json_puts_the_measured_peak_beside_the_predicted():
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    machine = load_machine("dgx-a100")
    pred = predict_step(net, 8, plan.strategies(), plan.algorithms(), machine, compute_model(machine, None, 1))
    measured = aggregate([_rank(0, 2 * pred.memory_peak_bytes)], 1)
    data = comparison_json("p.yaml", compare_prediction(pred, measured), None)
    assert data["predicted_peak_bytes"] == pred.memory_peak_bytes > 0
    assert data["measured_peak_bytes"] == 2 * pred.memory_peak_bytes
    assert data["memory_rel"] == pytest.approx(1.0)
