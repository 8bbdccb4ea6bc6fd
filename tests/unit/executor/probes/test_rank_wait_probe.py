"""Ranks waiting for each other (executor.probes.wait, profiler.probes.rank_wait): how the probe turns spans
into a wait per second of work, how a table holds it, how the executor's prediction adds it, and
the probe itself under mpiexec."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from mpi4py import MPI

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.compute.profile_table import Entry, ProfileTable, table_from_dict, table_to_dict, wait_key
from costmodel.compute.profiled import ProfiledCompute
from costmodel.step.prediction import prediction_json
from executor.session import execute as session
from executor.report.compare import Measured, compare_prediction
from executor.probes.dispatch import PROBE, probe_plan
from executor.probes.wait import PER_RANK_BATCH, measure, wait_and_work, wait_fractions
from executor.runtime.timers import Timers
from profiler.probes import rank_wait
from networks.loader import load_network

from tests.support.cases import make_plan

FP = {"backend": "numpy", "device": "test cpu", "cores": 2, "threads": 1, "memory_bytes": 1}


def _compute(executor: dict) -> ProfiledCompute:
    return ProfiledCompute(ProfileTable(dict(FP), {}, {}, "<test>", executor), Roofline(load_machine("local")))


def test_wait_and_work_split_each_step_at_its_wait_spans():
    timers = Timers()
    timers.totals = {(0, "a", "wait"): 0.25, (0, "b", "wait"): 0.25, (0, "a", "fwd_compute"): 3.0,
                     (1, "a", "fwd_compute"): 2.0}
    timers.step_wall = {0: 4.0, 1: 2.0}
    assert wait_and_work(timers, [0, 1]) == [(0.5, 3.5), (0.0, 2.0)]


def test_wait_fractions_are_the_ranks_mean_wait_over_their_mean_work():
    ranks = [[(0.1, 1.0), (0.0, 2.0)], [(0.3, 1.0), (0.2, 2.0)]]
    got = wait_fractions(ranks)
    assert got == pytest.approx([0.2, 0.05])
    assert wait_fractions([[(0.0, 0.0)]]) == [0.0]


def test_the_probe_is_data_parallel_over_the_ranks():
    net = load_network(str(PROBE))
    plan = probe_plan(net, PER_RANK_BATCH * 4, 4)
    assert plan.devices == 4 and plan.batch == PER_RANK_BATCH * 4 and net.name == "dispatch-probe"
    assert {lp.strategy.as_dict().get("N") for lp in plan.layers} == {4}
    assert probe_plan(net, 8).devices == 1  # the dispatch probe's, one rank


def test_a_table_gives_the_wait_of_its_rank_count_and_none_for_one_rank():
    compute = _compute({"wait/p2": Entry(0.02, 0.03, 0.3, 21, 0, 0)})
    assert compute.wait_per_work(2) == pytest.approx(0.03)
    assert compute.wait_per_work(4) == 0.0  # not measured for 4 ranks
    assert compute.wait_per_work(1) == 0.0
    data = table_to_dict(compute.table)
    assert table_from_dict(data, "<rt>").executor["wait/p2"].median_s == pytest.approx(0.03)
    # the dispatch interpolation reads only dispatch entries
    assert compute.pass_dispatch_s(1 << 20) == 0.0


def _prepared(tmp_path, ranks: int, executor: dict) -> session.Prepared:
    net = load_network("lenet5")
    plan = make_plan(net, 8 * ranks, ranks, "data")
    return session.Prepared(str(tmp_path / "plan.yaml"), plan, net, load_machine("local"), _compute(executor), 1)


def test_the_executor_prediction_adds_the_wait_to_the_step_on_ranks_sharing_the_computer(tmp_path):
    with_wait = _prepared(tmp_path, 2, {"wait/p2": Entry(0.04, 0.05, 0.2, 21, 0, 0)})
    without = _prepared(tmp_path, 2, {})
    a, b = session.predict(with_wait), session.predict(without)
    assert b.wait_s == 0.0 and a.work_s == pytest.approx(b.step_s)
    assert a.wait_s == pytest.approx(0.05 * a.work_s)
    assert a.step_s == pytest.approx(a.work_s * 1.05)
    assert prediction_json(a)["wait_s"] == pytest.approx(a.wait_s)
    # the comparison shows the wait apart: not in a layer, not in the executor's own time
    measured = Measured(2, 3, a.step_s, a.step_s, a.step_s, (), None)
    cmp = compare_prediction(a, measured)
    assert cmp.predicted_wait_s == pytest.approx(a.wait_s)
    assert cmp.predicted_outside_s == pytest.approx(a.dispatch_s, rel=1e-6, abs=1e-12)


def test_no_wait_on_one_rank_or_across_nodes(tmp_path):
    one = _prepared(tmp_path, 1, {"wait/p1": Entry(0.04, 0.05, 0.2, 21, 0, 0)})
    assert session.predict(one).wait_s == 0.0
    two = _prepared(tmp_path, 2, {"wait/p2": Entry(0.04, 0.05, 0.2, 21, 0, 0)})
    apart = replace(two, machine=replace(two.machine, devices_per_node=1, nodes=2))
    assert session.predict(apart).wait_s == 0.0


def test_the_probe_on_one_rank_waits_only_at_its_own_barriers():
    got = measure(MPI.COMM_SELF, steps=2, warmup=1)
    assert len(got) == 2 and all(math.isfinite(x) and x >= 0 for x in got)


@pytest.mark.mpi
def test_the_probe_under_mpiexec_gives_a_table_entry():
    entries, why = rank_wait.time_wait(1, 2)
    assert why == ""
    entry = entries[wait_key(2)]
    assert entry.count == 21 and 0.0 <= entry.min_s <= entry.median_s < 1.0


def test_a_failing_probe_leaves_no_entry_and_says_why(monkeypatch):
    monkeypatch.setattr(rank_wait.sys, "executable", "false")
    entries, why = rank_wait.time_wait(1, 2)
    assert entries == {} and "probe failed" in why
    assert rank_wait.time_wait(1, 1) == ({}, "")
