"""A plan's kernels timed in its step's context before the run (profiler.in_step.before_run), and the
in-run timing after the timed steps rather than between them (executor.runtime.run.in_run_steps)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mpi4py import MPI
from typer.testing import CliRunner

import profiler.in_step.kernels as inrun
from dnnplan.cli import app
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers
from profiler.in_step.before_run import time_in_step

from tests.support.cases import load, make_plan
from tests.support.profile_calls import _two_calls
from tests.support.validate_runs import FakeRuns

runner = CliRunner()


class Companions:
    """What profiler.timing.companions.Companions is asked: the call each is loaded with, and pauses."""

    def __init__(self):
        self.loaded, self.paused = [], 0

    def load(self, call):
        self.loaded.append(call.key)

    def pause(self):
        self.paused += 1


def test_each_call_gets_one_sample_a_round_after_a_warm_up_round_beside_loaded_companions():
    calls = _two_calls()
    comp = Companions()
    rounds = []
    got = time_in_step(calls, {calls[1].key: (calls[0],)}, rounds=3, companions=comp,
                       progress=lambda done, total: rounds.append((done, total)))
    assert set(got) == {c.key for c in calls}
    assert all(e.count == 3 and e.median_s > 0 for e in got.values())  # the warm-up round dropped
    assert comp.loaded == [c.key for c in calls] * 4 and comp.paused == 1
    assert rounds == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_a_call_after_its_predecessors_is_timed_without_the_profilers_cache_pass(monkeypatch):
    """The replay of the calls before it is its context; only a call with none known (a reshard
    copy) gets the profiler's pass over 4 MiB before its sample."""
    calls = _two_calls()
    passed = []
    real = inrun.cold_sampler
    monkeypatch.setattr(inrun, "cold_sampler", lambda run, buf=None: passed.append(1) or real(run, buf))
    timer = inrun.InRunTimer(calls, before={calls[1].key: (calls[0],)})
    timer.round()
    timer.round()
    assert passed == [1]  # built once, for the first call, which has no known predecessor
    assert [len(v) for v in timer.samples.values()] == [2, 2]


def test_in_run_timing_runs_after_untimed_steps_that_follow_the_timed_ones():
    """The timed steps run back to back; the hook runs after each warm-up step, then after each of
    as many untimed steps, whose times are dropped."""
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    seen = []
    timers = Timers()
    res = run_plan(plan, net, MPI.COMM_SELF, steps=3, warmup=2, timers=timers, after_step=seen.append,
                   measure_memory=False)
    assert seen == [-2, -1, 0, 1, 2]
    assert sorted(timers.step_wall) == [-2, -1, 0, 1, 2] and len(res.step_s) == 3
    assert len(res.losses) == 5 and np.isfinite(res.losses).all()
    plain = run_plan(plan, net, MPI.COMM_SELF, steps=3, warmup=2, measure_memory=False)
    assert plain.losses == pytest.approx(res.losses)  # the timed steps are the same steps


@pytest.mark.mpi
def test_execute_predicts_from_the_step_context_unless_told_not_to(tmp_path, monkeypatch):
    """On machine `local`, `execute` times the plan's kernels in its step's context before the run
    and predicts from them, the profile-alone prediction beside; --no-step-context leaves it out."""
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    plan, out = str(tmp_path / "p.yaml"), {k: str(tmp_path / f"{k}.json") for k in ("on", "off")}
    r = runner.invoke(app, ["plan", "lenet5", "--devices", "1", "--batch", "8", "--machine", "local", "--out", plan])
    assert r.exit_code == 0, r.output
    on = runner.invoke(app, ["execute", plan, "--ranks", "1", "--steps", "2", "--json", out["on"]])
    off = runner.invoke(app, ["execute", plan, "--ranks", "1", "--steps", "2", "--no-step-context", "--json",
                              out["off"]])
    assert on.exit_code == 0 and off.exit_code == 0, on.output + off.output
    got = {k: json.loads(open(v).read()) for k, v in out.items()}
    assert got["on"]["profile_predicted_step_s"] > 0 and got["off"]["profile_predicted_step_s"] is None
    assert "profile alone" in on.output and "profile alone" not in off.output
    assert got["on"]["profile_predicted_step_s"] == pytest.approx(got["off"]["predicted"]["step_s"], rel=1e-9)
    assert got["on"]["predicted"]["step_s"] != got["off"]["predicted"]["step_s"]


def _timed(name, step, entries=True):
    from executor.session.step_choice import Timed
    return Timed(name, None, {"k": 1} if entries else {}, step, step * 0.9)


def test_the_fastest_in_step_context_wins_only_when_every_candidate_was_timed_there():
    from executor.session.step_choice import fastest
    planner, data, filt = _timed("planner", 7.2), _timed("data", 6.9), _timed("filter", 11.0)
    assert fastest([planner, data, filt]) is data
    assert fastest([planner, _timed("data", 6.9, entries=False)]) is planner
    assert fastest([_timed("planner", 6.0), data]).name == "planner"


def test_validate_runs_the_plan_chosen_in_step_context_as_the_planners_and_the_solvers_beside(monkeypatch):
    import executor.session.validate as v
    from executor.session import step_choice
    monkeypatch.setattr(step_choice, "weighed", lambda cands, threads=None, profile=None: [
        _timed(name, {"planner": 7.2, "data": 6.9, "filter": 11.0}[name]) for name, _ in cands])
    cands = [("planner", None), ("data", None), ("filter", None)]
    got = v._in_context(cands, v.RunSettings())
    assert [name for name, _, _ in got] == ["planner = data", "solver", "filter"]
    assert all(entries for _, _, entries in got)
    assert [name for name, _, e in v._in_context(cands, v.RunSettings(step_context=False))] == [
        "planner", "data", "filter"]


def test_plan_checks_in_step_context_on_machine_local_only(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))
    r = runner.invoke(app, ["plan", "lenet5", "--devices", "2", "--batch", "16", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["step_context"] is None
    r = runner.invoke(app, ["plan", "lenet5", "--devices", "2", "--batch", "16", "--machine", "local", "--json"])
    got = json.loads(r.stdout)["step_context"]
    assert r.exit_code == 0 and set(got["plans"]) >= {"planner", "data"}
    assert got["chosen"] == min(got["plans"], key=lambda n: got["plans"][n]["step_s"])
    assert all(p["step_s"] > 0 and p["profile_step_s"] > 0 for p in got["plans"].values())
    r = runner.invoke(app, ["plan", "lenet5", "--devices", "2", "--batch", "16", "--machine", "local",
                            "--no-step-context", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["step_context"] is None


def test_a_resumed_validate_keeps_the_plan_the_interrupted_run_ran_as_the_planners(monkeypatch):
    """Weighings minutes apart can differ by a few percent: resuming, the planner's plan is the one
    the interrupted run already ran as the planner's, not the new weighing's winner."""
    import executor.session.validate as v
    from executor.session import step_choice
    from executor.session.step_choice import Timed
    steps = {"planner": 7.2, "data": 6.9}
    monkeypatch.setattr(step_choice, "weighed", lambda cands, threads=None, profile=None: [
        Timed(name, plan, {"k": 1}, steps[name], 1.0) for name, plan in cands])
    monkeypatch.setattr(v, "plan_layers", lambda plan: {"p": plan})
    cands = [("planner", "solver's"), ("data", "data's")]
    fresh = v._in_context(cands, v.RunSettings())
    assert [(n, p) for n, p, _ in fresh] == [("planner = data", "data's"), ("solver", "solver's")]
    ran = [{"name": "planner", "plan": {"p": "solver's"}}]
    assert [(n, p) for n, p, _ in v._in_context(cands, v.RunSettings(), ran)] == [
        ("planner", "solver's"), ("data", "data's")]
    ran = [{"name": "planner = data", "plan": {"p": "data's"}}]
    assert [n for n, _, _ in v._in_context(cands, v.RunSettings(), ran)] == ["planner = data", "solver"]


def test_validate_times_each_runs_step_context_just_before_that_run(monkeypatch):
    """The weighing before the runs picks the planner's plan; each run is then predicted from its
    calls timed in step context again just before it (the machine drifts while other plans run),
    as `dnnplan execute` predicts; without step context nothing is timed."""
    import executor.session.validate as v
    from executor.session import step_choice
    from executor.session.step_choice import Timed
    monkeypatch.setattr(step_choice, "weighed", lambda cands, threads=None, profile=None: [
        Timed(name, plan, {"weighed": name}, 1.0, 1.0) for name, plan in cands])
    timed, used = [], []
    monkeypatch.setattr(v, "step_context_entries", lambda prep: timed.append(len(timed)) or {"run": len(timed)})
    monkeypatch.setattr(v, "in_step_context", lambda prep, entries: used.append(entries) or prep)
    monkeypatch.setattr(v, "measure_both", FakeRuns())
    ctx = v.resolve("lenet5", 2, 8, "dgx-a100", None, False)
    report = v.validate(ctx, "lenet5", "dgx-a100", v.RunSettings(steps=1, warmup=0, check=False, repeats=2))
    runs = len(report.rows)
    assert runs >= 4 and len(timed) == runs and used == [{"run": k + 1} for k in range(runs)]
    timed.clear(), used.clear()
    v.validate(ctx, "lenet5", "dgx-a100", v.RunSettings(steps=1, warmup=0, check=False, step_context=False))
    assert not timed and used and all(e == {} for e in used)


def test_each_layers_call_is_priced_as_timed_where_the_step_makes_it():
    """executor.probes.step_kernels: the prediction's calls are timed in their median context and, for a
    call the step makes after other calls elsewhere, in each of those too; the entries returned
    are the calls' own and one per layer that makes such a call (its occurrence key), never the
    extra calls' own keys."""
    from types import SimpleNamespace

    from costmodel.compute.profile_table import Entry
    from costmodel.compute.call_context import InContext, is_occurrence_key, occurrences, step_calls_by_layer
    from executor.runtime.stage import run_strategies
    from executor.probes.step_kernels import kernels_in_step

    net = load("tinyres")
    plan = make_plan(net, 8, 1, "data")
    asked = {}

    def time_in_step(calls, before, updates=()):
        asked.update(calls=calls, before=before)
        return {c.key: Entry(1e-3, 1e-3 * (i + 1), 0.1, 5, c.flops, c.bytes) for i, c in enumerate(calls)}
    compute = SimpleNamespace(time_in_step=time_in_step)
    prep = SimpleNamespace(net=net, plan=plan, compute=compute)
    tagged = step_calls_by_layer(net, plan.batch, run_strategies(plan), plan.algorithms())
    wanted = list(dict.fromkeys(c for _, c in tagged if not c.kernel.startswith("sgd.")))
    got = kernels_in_step(prep, wanted)
    extra, before, where = occurrences(tagged)
    assert extra and all(isinstance(c, InContext) for c in asked["calls"][len(wanted):])
    assert [c.key for c in asked["calls"][len(wanted):]] == [c.key for c in extra]
    assert all(asked["before"][c.key] == before[c.key] for c in extra)
    timed = {c.key: i for i, c in enumerate(asked["calls"])}
    assert set(got) == {c.key for c in wanted} | set(where)
    for occ, key in where.items():
        assert is_occurrence_key(occ) and got[occ].median_s == pytest.approx(1e-3 * (timed[key] + 1))


def test_plans_weighed_together_time_a_call_in_the_same_context_once():
    """executor.probes.step_kernels.Shared: the second plan weighed beside the first is timed only for
    the calls the first did not make after the same calls (and always for its updates, timed as
    its own sequence); the calls it shares are priced by the first plan's very entries, and a
    collective the first timed is not timed again."""
    from dataclasses import replace
    from types import SimpleNamespace

    from costmodel.step.collective_calls import CommCall
    from costmodel.compute.profile_table import Entry
    from costmodel.compute.call_context import step_calls_by_layer
    from executor.runtime.stage import run_strategies
    from executor.probes.step_kernels import Shared, collectives_in_step, context_signature, kernels_in_step

    net = load("lenet5")
    data = make_plan(net, 8, 2, "data")
    cut = [layer.name for layer in net.layers].index("fc1")
    mixed = replace(data, layers=data.layers[:cut] + make_plan(net, 8, 2, "filter").layers[cut:])
    asked = []

    def time_in_step(calls, before, updates=()):
        asked.append((list(calls), dict(before), list(updates)))
        return {c.key: Entry(1e-3, 1e-3 * len(asked), 0.1, 5, c.flops, c.bytes) for c in calls}

    def time_collectives_in_step(calls, ranks):
        asked.append(list(calls))
        return {c.key: Entry(1e-5, 1e-5 * len(asked), 0.1, 5, 0, c.nbytes) for c in calls}

    compute = SimpleNamespace(time_in_step=time_in_step, time_collectives_in_step=time_collectives_in_step)
    shared, got = Shared(), []
    for plan in (data, mixed):
        prep = SimpleNamespace(net=net, plan=plan, compute=compute)
        tagged = step_calls_by_layer(net, plan.batch, run_strategies(plan), plan.algorithms())
        got.append(kernels_in_step(prep, list(dict.fromkeys(c for _, c in tagged)), shared))
    (first, first_before, _), (second, second_before, updates) = asked
    assert updates and all(u in second for u in updates)
    done = {context_signature(c, first_before.get(c.key, ())): c.key for c in first}
    again = [c for c in second if c not in updates]
    assert again and all(context_signature(c, second_before.get(c.key, ())) not in done for c in again)
    reused = [k for k, e in got[1].items() if e.median_s == pytest.approx(1e-3)]
    assert reused and all(got[1][k] is got[0][k] for k in reused)
    assert any(k.startswith("conv2d") for k in reused) and not any(k.startswith("sgd") for k in reused)
    collectives = [CommCall("allreduce", 4096, 2, "cold"), CommCall("allgather", 8192, 2, "cold")]
    one = collectives_in_step(SimpleNamespace(plan=data, compute=compute), collectives[:1], shared)
    two = collectives_in_step(SimpleNamespace(plan=mixed, compute=compute), collectives, shared)
    assert asked[-1] == collectives[1:] and two[collectives[0].key] is one[collectives[0].key]
