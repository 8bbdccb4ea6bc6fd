"""A plan's collectives timed in their step's context before the run (executor.probes.comm_context,
profiler.probes.comm_context): the job under mpiexec, a failing job, and how the prediction uses them."""

from __future__ import annotations

import pytest

from costmodel.step.collective_calls import CommCall, step_collectives
from costmodel.compute.profile_table import Entry
from executor.session import execute as session
from executor.runtime.stage import run_strategies
from profiler.probes import comm_context
from networks.loader import load_network
from planner.plan.plan_file import write_plan

from tests.support.cases import make_plan


@pytest.mark.mpi
def test_the_job_under_mpiexec_times_each_collective_once_a_round():
    calls = [CommCall("allreduce", 4096, 2, "warm"), CommCall("alltoallv", 8192, 2, "cold")]
    entries, why = comm_context.time_collectives(calls, 2, 1)
    assert why == "" and set(entries) == {c.key for c in calls}
    for c in calls:
        e = entries[c.key]
        assert e.count == 9 and 0.0 < e.min_s <= e.median_s < 1.0 and e.bytes == c.nbytes


def test_a_failing_job_leaves_no_entry_and_says_why(monkeypatch):
    monkeypatch.setattr(comm_context.sys, "executable", "false")
    entries, why = comm_context.time_collectives([CommCall("allreduce", 64, 2, "warm")], 2, 1)
    assert entries == {} and "failed" in why
    assert comm_context.time_collectives([CommCall("allreduce", 64, 2, "warm")], 1, 1) == ({}, "")
    assert comm_context.time_collectives([], 2, 1) == ({}, "")


def test_step_context_prices_each_collective_by_its_entry(tmp_path):
    net = load_network("lenet5")
    plan = make_plan(net, 16, 2, "filter")
    path = tmp_path / "plan.yaml"
    write_plan(plan, str(path))
    prep = session.prepare(str(path), 2, 1, None)
    pred = session.predict(prep)
    calls = step_collectives(prep.net, 16, run_strategies(prep.plan), pred, prep.plan.algorithms())
    assert calls
    entries = {c.key: Entry(1e-3, (i + 1) * 1e-3, 0.1, 9, 0, c.nbytes) for i, c in enumerate(calls)}
    timed = session.in_step_context(prep, entries)
    assert dict(timed.machine.measured) == {c.measured_key: (i + 1) * 1e-3 for i, c in enumerate(calls)}
    assert timed.profile_step_s == pytest.approx(pred.step_s)
    again = session.predict(timed)
    comms = [c.seconds for row in again.layers for c in row.layer.comms if c.group > 1 and c.nbytes > 0]
    assert comms and all(s in {(i + 1) * 1e-3 for i in range(len(calls))} for s in comms)
    # no collective's key reaches the compute model's table of kernels
    assert not any(k.startswith("comm:") for k in timed.compute.table.entries)
    assert session.in_step_context(prep, {}) is prep
