"""--refresh-profile times the calls the plans are weighed on side by side: every call once per
round (profiler.timing.side_by_side), after a first pass of the weighing that only lists them
(planner.problem.full_profile)."""

from __future__ import annotations

import pytest

from costmodel.machine.loading import load_machine
from costmodel.calls.kernel_call import linear_call
from costmodel.calls.layer_calls import reshard_copy_call
from costmodel.compute.profile_table import Entry, with_entries

pytestmark = pytest.mark.usefixtures("dnnplan_cache")


def _calls():
    return [linear_call("linear.fwd", 64, 64, 64, False, "float32", 4),
            reshard_copy_call(4096, 64, "float32", False),
            linear_call("linear.fwd", 32, 48, 16, True, "float32", 4)]


class _FakeCompanions:
    def __init__(self):
        self.log = []

    def load(self, call):
        self.log.append(("load", call.key))

    def pause(self):
        self.log.append(("pause",))


def test_rounds_interleave_the_calls_and_each_sample_runs_beside_companions_on_that_call(monkeypatch):
    import profiler.timing.side_by_side as sbs
    calls = _calls()
    order = []
    monkeypatch.setattr(sbs, "build", lambda call, xp: lambda: order.append(call.key))
    comp = _FakeCompanions()
    got = sbs.time_side_by_side(calls + calls[:1], rounds=3, companions=comp)  # a repeat is one call
    keys = [c.key for c in calls]
    assert list(got) == keys
    assert all(e.count == 3 and e.median_s > 0 for e in got.values())
    # per sample: an untimed run (the cache state its previous sample would leave), then the timed run
    assert order == [k for k in keys for _ in range(2)] * 3
    assert comp.log == [("load", k) for k in keys] * 3 + [("pause",)]


def test_operands_are_kept_within_the_budget_and_rebuilt_each_round_beyond_it(monkeypatch):
    import profiler.timing.side_by_side as sbs
    calls = _calls()
    built = []
    monkeypatch.setattr(sbs, "build", lambda call, xp: built.append(call.key) or (lambda: None))
    sbs.time_side_by_side(calls, rounds=4)
    assert sorted(built) == sorted(c.key for c in calls)
    built.clear()
    first_only = calls[0].bytes
    sbs.time_side_by_side(calls, rounds=4, keep_bytes=first_only)
    assert built.count(calls[0].key) == 1 and all(built.count(c.key) == 4 for c in calls[1:])


def test_side_by_side_times_real_kernels_with_the_profilers_entry():
    from profiler.timing.side_by_side import time_side_by_side
    calls = _calls()
    done = []
    got = time_side_by_side(calls, rounds=3, progress=lambda d, t: done.append((d, t)))
    assert done[-1] == (9, 9) and len(done) == 9
    for c in calls:
        e = got[c.key]
        assert 0 < e.min_s <= e.median_s < 1.0 and e.flops == c.flops and e.bytes == c.bytes


def test_listing_times_nothing_and_retime_replaces_each_entry_once(monkeypatch):
    """calls_of(time_missing=False) lists the calls (a missing one is interpolated, not timed);
    retime times them side by side, puts the entries in the table and the cache file, and a
    refreshing model then leaves them be."""
    from profiler import ondemand
    from profiler.timing import side_by_side
    from profiler.ondemand import local_compute_model
    calls = _calls()
    stale = Entry(7.0, 7.0, 0.0, 4, calls[0].flops, calls[0].bytes)  # never a 64^3 GEMM's time here
    cm = local_compute_model(load_machine("local"), progress=False, refresh=True)
    cm.table = with_entries(cm.table, {calls[0].key: stale})
    cm._rebuild()
    sequential = []
    monkeypatch.setattr(ondemand, "time_call", lambda c, policy: sequential.append(c.key))
    listed = cm.calls_of(lambda: [cm.lookup(c) for c in calls], time_missing=False)
    assert listed == calls and sequential == []
    batches = []
    real = side_by_side.time_side_by_side
    monkeypatch.setattr(side_by_side, "time_side_by_side",
                        lambda todo, *a, **k: batches.append([c.key for c in todo]) or real(todo, *a, **k))
    cm.retime(listed)
    assert batches == [[c.key for c in calls]]
    assert all(cm.lookup(c).seconds < 0.1 for c in calls) and sequential == []
    cm.retime(listed)  # already timed in this process
    assert len(batches) == 1
    cm.save()
    again = local_compute_model(load_machine("local"), progress=False)
    assert again.lookup(calls[0]).seconds == cm.lookup(calls[0]).seconds


def test_refreshed_weighs_twice_on_retimed_kernels_only_when_refreshing():
    from planner.problem.full_profile import refreshed

    class Model:
        def __init__(self, refresh):
            self.refresh, self.log = refresh, []

        def calls_of(self, fn, time_missing=True):
            self.log.append(("list", time_missing))
            fn()
            return ["a", "b"]

        def retime(self, calls):
            self.log.append(("retime", calls))

        def install(self, entries):  # the rest of the OnDemand interface, unused here
            pass

        def time_in_step(self, calls, before, updates=()):
            return {}

        def time_collectives_in_step(self, calls, ranks):
            return {}

        def retime_dispatch(self):
            pass

        def save(self):
            pass

    weighed = []
    m = Model(True)
    assert refreshed(m, lambda: weighed.append(1) or len(weighed)) == 2
    assert m.log == [("list", False), ("retime", ["a", "b"])] and len(weighed) == 2
    weighed.clear()
    m = Model(False)
    assert refreshed(m, lambda: weighed.append(1) or len(weighed)) == 1
    assert m.log == []
    assert refreshed(object(), lambda: "roofline") == "roofline"


def test_a_weighing_that_filled_the_profile_is_weighed_again_on_it():
    """On a fresh cache the first weighing times kernels on first lookup: it is weighed once more on
    the completed table, after ``again`` (issue 55: lenet5 on two ranks priced one plan twice)."""
    from planner.problem.full_profile import refreshed
    from tests.support.doubles.on_demand_stub import OnDemandStub

    m, log = OnDemandStub(), []

    def weigh():
        log.append(len(m.table.entries))  # what the weighing saw in the table
        m.table.entries.setdefault("conv1", 1.0)  # timed on first lookup
        return log[-1]

    assert refreshed(m, weigh, again=lambda: log.append("again")) == 1  # the second weighing's answer
    assert log == [0, "again", 1]
    log.clear()
    assert refreshed(m, weigh) == 1 and log == [1]  # the profile already complete: once


def test_a_companion_builds_each_call_once_however_often_it_is_reloaded(tmp_path, monkeypatch):
    import profiler.timing.harness as harness
    from profiler.timing.companions import Companions
    log = tmp_path / "builds"
    real = harness.build

    def logged(call, xp, shared=None):
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(call.key + "\n")
        return real(call, xp, shared)

    monkeypatch.setattr(harness, "build", logged)  # the companion is forked with it
    calls = _calls()[:2]
    comp = Companions(1)
    try:
        for _ in range(3):
            for c in calls:
                comp.load(c)
        comp.pause()
    finally:
        comp.close()
    assert sorted(log.read_text().split()) == sorted(c.key for c in calls)


def test_plan_refresh_profile_lists_then_retimes_every_call_once_and_times_none_one_by_one(monkeypatch):
    """`dnnplan plan --machine local --refresh-profile` end to end: the kernels the planner weighs
    are timed in one side-by-side batch, none on its own, and the plan is made on those timings."""
    import json

    from typer.testing import CliRunner

    import profiler.probes.dispatch
    from dnnplan.cli import app
    from profiler import ondemand
    from profiler.timing import side_by_side
    from profiler.timing.harness import summarize
    batches, sequential = [], []
    monkeypatch.setattr(side_by_side, "time_side_by_side", lambda todo, *a, **k: batches.append(list(todo)) or {
        c.key: summarize([1e-3], c.flops, c.bytes) for c in todo})
    monkeypatch.setattr(ondemand, "time_call", lambda c, policy: sequential.append(c.key))
    monkeypatch.setattr(profiler.probes.dispatch, "time_dispatch", lambda threads, ranks: ({}, "not timed in this test"))
    r = CliRunner().invoke(app, ["plan", "lenet5", "--machine", "local", "--refresh-profile", "--json"])
    assert r.exit_code == 0, r.output
    assert len(batches) == 1 and sequential == []
    kernels = {c.kernel for c in batches[0]}
    assert {"conv2d.fwd", "conv2d.bwd_data", "conv2d.bwd_weights", "linear.fwd", "maxpool2d.bwd"} <= kernels
    plan = json.loads(r.stdout[r.stdout.index("{"):])
    assert plan["network"] == "lenet5" and len(plan["layers"]) == 13


def test_a_companion_ended_by_a_stop_signal_is_no_error_of_the_timing_and_the_next_start_is_fresh():
    """A stop signal sent to the command's process group (`timeout -s TERM`, a batch scheduler) ends
    the companions with the command; the timing's pause then found their pipes reset and the
    command ended "the system refused: Connection reset by peer" (exit 74) instead of as stopped
    (143). The pause ends the others, and the profiler starts new ones for its next call
    (profiler.ondemand's ``_start_companions``: a set with none left)."""
    import os
    import signal

    from profiler.timing.companions import Companions

    comp = Companions(1)
    try:
        comp.load(_calls()[0])
        os.kill(comp.procs[0].pid, signal.SIGTERM)
        comp.procs[0].join(timeout=10)
        comp.pause()  # no ConnectionResetError, no EOFError
        assert comp.conns == [] and comp.procs == []
    finally:
        comp.close()
