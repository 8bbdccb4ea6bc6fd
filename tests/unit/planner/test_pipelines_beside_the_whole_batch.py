"""Where the whole batch at once fits, the planner weighs pipelines too (planner.stage_plan): under
that plan's step as the ceiling, a pipeline (or gradient accumulation) is the answer when faster,
and the whole batch's plan is called optimal only where no pipelined plan can beat it. Where the
devices outnumber the batch's samples the pipelines are weighed first and the whole batch under
their step; a bound either search proves covers its own plans only (planner.solvers.budget.Partial)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import planner.first_plan as first
import planner.problem.baselines as baselines_module
import planner.problem.solve as solve_module
import planner.solvers as solver_module
import planner.stage_plan as stage_plan
from costmodel.choices.training import TrainingChoices
from dnnplan.cli import app
from networks import durations
from planner.pipeline.search import NotFaster, SearchOutOfTime, search_pipeline
from planner.problem.solve import Binding, Settings, Slower, make_plan
from planner.solvers import Budget, Ceiling, partial
from profiler import context

runner = CliRunner()
ARGS = ["plan", "tiny-llama", "-p", "4", "-b", "64", "--machine", "dgx-h100", "--precision", "bf16", "--zero", "1",
        "--time-limit", "60", "--json"]


def _json(*extra: str) -> dict:
    got = runner.invoke(app, [*ARGS, *extra])
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout.strip().splitlines()[-1])


def test_a_pipeline_faster_than_the_whole_batch_is_the_answer_and_says_why():
    """tiny-llama on 4 H100s: the whole batch fits (its tensors take KiB), and its data-parallel
    gradient sync costs more than the kernels; accumulation without one is faster."""
    whole = _json("--pipeline", "off")
    answer = _json()
    assert whole["solver"]["memory_binding"] is False and not whole.get("pipeline")
    assert answer["pipeline"] and answer["step_s"] < whole["step_s"]
    text = runner.invoke(app, ARGS[:-1]).output
    assert f"the whole batch at once fits at {durations.seconds(whole['step_s'], 4)} a step, and a pipeline is faster" in \
        " ".join(text.split())


def _tiny(monkeypatch, raised: Exception):
    """tiny-llama's ZeRO-1 answer with the pipeline search replaced by one that raises ``raised``."""
    ctx = context.resolve("tiny-llama", 4, 64, "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    calls = []

    def search(*args, **kwargs):
        calls.append(kwargs["ceiling"])
        raise raised

    monkeypatch.setattr(stage_plan, "search_pipeline", search)
    settings = Settings(budget=Budget(60), choices=TrainingChoices(optimizer="adam", precision="bf16", zero=1))
    answer = first.first_plan(ctx.network, "tiny-llama", 64, 4, ctx.machine, ctx.compute, None, settings,
                              machine_ref="dgx-h100", fingerprint=None, zero_given=True)
    return answer, calls


def test_pipelines_proven_no_faster_leave_the_whole_batch_optimal(monkeypatch):
    answer, calls = _tiny(monkeypatch, NotFaster("none beats it", lower_s=1.0))
    assert answer.pipeline is None and calls == [pytest.approx(answer.plan.step_s)]
    assert answer.plan.solver["status"] == "optimal" and not answer.plan.solver.get("gap")


@pytest.mark.parametrize("error", [NotFaster, SearchOutOfTime])
def test_pipelines_left_unsearched_count_in_the_gap_by_their_bound(monkeypatch, error):
    """A pair the time limit left unsearched may still beat the whole batch: the answer is not
    called optimal, its gap the share its bound leaves."""
    ctx_step = _tiny(monkeypatch, NotFaster("", lower_s=1.0))[0].plan.step_s
    answer, _ = _tiny(monkeypatch, error("out of time", lower_s=0.75 * ctx_step))
    assert answer.pipeline is None and answer.plan.solver["status"] == "feasible"
    assert answer.plan.solver["gap"] == pytest.approx(0.25)


def test_the_zero_stage_choice_weighs_each_stages_pipelines_after_the_stages():
    """Without --zero each stage's whole batch is planned first and its pipelines after every stage
    has a plan (under the fastest step held): the answer equals the fastest of the stages planned
    one by one with their pipelines, and no stage's lower bound is above its step."""
    free = [a for a in ARGS if a not in ("--zero", "1")]
    chosen = json.loads(runner.invoke(app, free).stdout.strip().splitlines()[-1])
    each = [_json_args([*free, "--zero", str(z)]) for z in (0, 1, 3)]
    assert chosen["pipeline"] and chosen["step_s"] == pytest.approx(min(e["step_s"] for e in each), rel=1e-9)
    weighed = chosen["zero_choice"]["weighed"]
    assert all(w["lower_s"] <= w["step_s"] * (1 + 1e-9) for w in weighed if w["step_s"] is not None)
    assert "uncovered_zero" not in chosen.get("search", {})


def _json_args(args: list[str]) -> dict:
    got = runner.invoke(app, args)
    assert got.exit_code == 0, got.output
    return json.loads(got.stdout.strip().splitlines()[-1])


#: tiny-llama on 8 H100s at batch 4 under 0.15 MiB a device: the devices outnumber the samples and the
#: memory limit binds the whole batch (its optimum without the limit needs 0.22 MiB)
FEW = dict(net="tiny-llama", batch=4, p=8, limit=0.15 * 2.0 ** 20)


def _few(monkeypatch=None):
    ctx = context.resolve(FEW["net"], FEW["p"], FEW["batch"], "dgx-h100", None, False,
                          TrainingChoices(precision="bf16"))
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    calls = []
    if monkeypatch is not None:
        def recorded(*args, **kwargs):
            calls.append(kwargs)
            return make_plan(*args, **kwargs)
        monkeypatch.setattr(stage_plan, "make_plan", recorded)
    answer = first.first_plan(ctx.network, FEW["net"], FEW["batch"], FEW["p"], ctx.machine, ctx.compute, FEW["limit"],
                              Settings(budget=Budget(60), choices=choices), machine_ref="dgx-h100", fingerprint=None,
                              zero_given=True)
    return ctx, Settings(choices=choices), answer, calls


def test_where_the_devices_outnumber_the_samples_and_memory_binds_pipelines_come_first():
    """The pipelined plans are weighed first, then the whole batch under their step: the answer is
    the faster of the two searched alone, and says why."""
    ctx, settings, answer, _ = _few()
    whole = make_plan(ctx.network, FEW["net"], FEW["batch"], FEW["p"], ctx.machine, ctx.compute, FEW["limit"], settings)
    piped = search_pipeline(ctx.network, FEW["batch"], FEW["p"], ctx.machine, ctx.compute, FEW["limit"], settings)
    assert whole.solver["memory_binding"] is True and piped.prediction.step_s < whole.step_s
    assert answer.pipeline is not None
    assert answer.pipeline.prediction.step_s == pytest.approx(piped.prediction.step_s, rel=1e-9)
    assert answer.why.startswith("the devices outnumber the batch's samples (8 > 4): the pipelined plans weighed first")


def test_the_whole_batch_after_the_pipelines_is_planned_under_their_step(monkeypatch):
    """Its optimum without the limit is asked for first (Binding: the limit binds), then the whole
    batch under the pipeline's step, which ends it at that optimum (Slower)."""
    _, _, answer, calls = _few(monkeypatch)
    assert [c.get("unbound_only", False) for c in calls] == [True, False]
    assert calls[1]["ceiling"] == pytest.approx(answer.pipeline.prediction.step_s)


def test_where_the_whole_batch_fits_unbound_it_is_planned_first_as_before(monkeypatch):
    """The same devices and batch without the tight limit: the whole batch's optimum fits, so it is
    the plan the pipelines are weighed beside (under its step), once."""
    ctx = context.resolve(FEW["net"], FEW["p"], FEW["batch"], "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    calls = []

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return make_plan(*args, **kwargs)

    monkeypatch.setattr(stage_plan, "make_plan", recorded)
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    first.first_plan(ctx.network, FEW["net"], FEW["batch"], FEW["p"], ctx.machine, ctx.compute, None,
                     Settings(budget=Budget(60), choices=choices), machine_ref="dgx-h100", fingerprint=None,
                     zero_given=True)
    assert len(calls) == 1 and calls[0]["unbound_only"] is True and calls[0].get("ceiling") is None


def test_a_whole_batch_under_a_ceiling_it_cannot_beat_ends_at_its_bound():
    """make_plan's ``ceiling``: its optimum without the memory limit (here the plan itself, the
    limit not binding) at or above the ceiling ends the search (Slower); below it, the plan is the
    one planned without a ceiling."""
    ctx = context.resolve("tiny-llama", 4, 64, "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    settings = Settings(choices=TrainingChoices(optimizer="adam", precision="bf16"))
    plan = make_plan(ctx.network, "tiny-llama", 64, 4, ctx.machine, ctx.compute, None, settings)
    assert plan.solver["memory_binding"] is False
    with pytest.raises(Slower) as err:
        make_plan(ctx.network, "tiny-llama", 64, 4, ctx.machine, ctx.compute, None, settings, ceiling=plan.step_s)
    assert err.value.lower_s == pytest.approx(plan.step_s, rel=1e-9)
    again = make_plan(ctx.network, "tiny-llama", 64, 4, ctx.machine, ctx.compute, None, settings,
                      ceiling=plan.step_s * 1.01)
    assert again.step_s == pytest.approx(plan.step_s, rel=1e-12)


def test_a_bound_over_part_of_the_plans_is_passed_on_no_higher_than_the_rest_may_take():
    budget = Budget(None)
    part = partial(budget, 2.0)
    part.bound(3.0)
    assert (budget.lower_s, part.lower_s) == (2.0, 3.0)
    assert part.offer(5.0, "a plan", lambda: "it", lower_s=4.0)
    assert (budget.best.step_s, budget.best.lower_s, budget.best.what) == (5.0, 2.0, "a plan")
    assert part.lower_s == 4.0 and part.best is budget.best and partial(None, 2.0) is None


def test_a_budget_under_a_ceiling_expires_once_a_bound_reaches_it():
    budget = Budget(None)
    view = Ceiling(budget, 2.0)
    view.bound(1.5)
    assert not view.expired() and not view.beaten
    view.offer(3.0, "a plan", lambda: "it", lower_s=2.0)
    assert view.expired() and view.beaten and not budget.expired()
    assert budget.best.step_s == 3.0 and budget.lower_s == 2.0


def test_a_binding_whole_batch_under_a_ceiling_ends_when_its_search_bound_reaches_it():
    """The whole batch of tiny-llama on 8 H100s at batch 4 under 0.15 MiB: its optimum without the
    limit is below a ceiling just above it, so the binding limit's search runs, and its first bound
    (the Lagrangian relaxation's) reaches the ceiling: Slower, with that bound, at most the optimum."""
    ctx = context.resolve(FEW["net"], FEW["p"], FEW["batch"], "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    args = (ctx.network, FEW["net"], FEW["batch"], FEW["p"], ctx.machine, ctx.compute)
    free = make_plan(*args, None, Settings(choices=choices)).step_s
    bound = make_plan(*args, FEW["limit"], Settings(choices=choices))
    assert bound.solver["memory_binding"] is True and bound.step_s > free
    ceiling = free * (1 + 1e-6)
    with pytest.raises(Slower) as err:
        make_plan(*args, FEW["limit"], Settings(budget=Budget(60), choices=choices), ceiling=ceiling)
    assert ceiling <= err.value.lower_s <= bound.step_s * (1 + 1e-12)


def test_a_whole_batch_turned_away_prices_no_baselines(monkeypatch):
    """The baselines are priced when a plan or the binding limit's search needs them: not for a
    whole batch whose optimum without the limit does not beat the step held (Slower), nor for one
    whose limit binds where the caller asked for the unbound optimum only (Binding); a plan made
    carries them, priced once, and so does one the binding limit's search makes."""
    priced = []

    def recorded(*args, **kwargs):
        priced.append(args[2])
        return baselines_module.baselines(*args, **kwargs)

    monkeypatch.setattr(solve_module, "baselines", recorded)
    ctx = context.resolve(FEW["net"], FEW["p"], FEW["batch"], "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    args = (ctx.network, FEW["net"], FEW["batch"], FEW["p"], ctx.machine, ctx.compute)
    free = make_plan(*args, None, Settings(choices=choices))
    assert len(priced) == 1 and len(free.baselines) == 2
    assert free.baselines[0].name == "data parallel" and free.baselines[1].name.startswith("best uniform")
    with pytest.raises(Slower):
        make_plan(*args, None, Settings(budget=Budget(60), choices=choices), ceiling=free.step_s)
    with pytest.raises(Binding):
        make_plan(*args, FEW["limit"], Settings(choices=choices), unbound_only=True)
    assert len(priced) == 1
    budget = Budget(60)
    bound = make_plan(*args, FEW["limit"], Settings(budget=budget, choices=choices))
    assert bound.solver["memory_binding"] is True and len(priced) == 2 and len(bound.baselines) == 2


def test_the_optimum_without_the_limit_is_solved_once_a_whole_batch(monkeypatch):
    """Under a budget the optimum without the memory limit is solved first, as the whole batch's
    bound; the exact solve takes it from there, not solving the same problem again (the graph
    reduction is exact and deterministic), and the plan is the one solved without the budget.
    A solver method other than the reduction's solves it again, with that method."""
    methods = []

    def recorded(problem, method="auto", *args, **kwargs):
        if problem.memory_limit is None:
            methods.append(method)
        return solver_module.solve(problem, method, *args, **kwargs)

    monkeypatch.setattr(solve_module, "solve", recorded)
    ctx = context.resolve("tiny-llama", 4, 64, "dgx-h100", None, False, TrainingChoices(precision="bf16"))
    choices = TrainingChoices(optimizer="adam", precision="bf16")
    args = (ctx.network, "tiny-llama", 64, 4, ctx.machine, ctx.compute, None)
    plan = make_plan(*args, Settings(budget=Budget(60), choices=choices))
    assert methods == ["reduced"] and plan.solver["status"] == "optimal"
    assert make_plan(*args, Settings(choices=choices)).step_s == plan.step_s
    methods.clear()
    make_plan(*args, Settings(budget=Budget(60), choices=choices, method="ilp"))
    assert methods == ["reduced", "ilp"]


def test_pipeline_off_weighs_the_zero_stages_on_the_whole_batch_alone():
    """--pipeline off without --zero: the ZeRO stages weighed as without it (`--zero`'s help: the
    planner answers with the fastest), each on plans of the whole batch at once: gpt2 on 8 A100s
    answers ZeRO-1 (its update a shard's), not the ZeRO-0 plan that --pipeline off gave before."""
    base = ["plan", "gpt2", "-p", "8", "--machine", "dgx-a100", "--time-limit", "120", "--json"]
    off = json.loads(runner.invoke(app, [*base, "--pipeline", "off"]).stdout.strip().splitlines()[-1])
    zero0 = json.loads(runner.invoke(app, [*base, "--pipeline", "off", "--zero", "0"]).stdout.strip().splitlines()[-1])
    assert not off.get("pipeline")  # nor accumulation: the whole batch at once
    assert [w["zero"] for w in off["zero_choice"]["weighed"]] == [0, 1, 2, 3]
    assert off["zero"] == 1 and off["step_s"] < zero0["step_s"] and zero0["zero"] == 0


def test_a_gap_left_by_the_proof_tolerance_is_not_blamed_on_the_time_limit():
    """Llama 3 8B on 8 H100s under ZeRO-1: the whole batch's plan, its gap the pipelined plans' that
    could beat it by less than the 1% tolerance, answered in about a second of the 15 s limit. The
    summary said "the search stopped at its 15 s time limit: a longer --time-limit can close the
    gap"; --gap 0 is what closes it (proven optimal)."""
    from dnnplan.render.answer import gap_line

    base = ["plan", "llama3-8b", "-p", "8", "-b", "8", "--machine", "dgx-h100", "--precision", "bf16", "--optimizer",
            "adam", "--zero", "1", "--time-limit", "60", "--json"]
    got = json.loads(runner.invoke(app, base).stdout.strip().splitlines()[-1])
    assert got["solver"]["status"] == "feasible" and got["solver"]["gap_of"] == "tolerance" and not got.get("pipeline")
    line = gap_line(got["solver"])
    assert "--gap 0 searches them" in line and "time limit" not in line
    closed = json.loads(runner.invoke(app, [*base, "--gap", "0"]).stdout.strip().splitlines()[-1])
    assert closed["solver"]["status"] == "optimal" and closed["step_s"] == got["step_s"]
    timed = gap_line({**got["solver"], "gap_of": "time"})
    assert "the search stopped at its 60 s time limit" in timed


def test_why_pipelined_names_a_limit_under_1_gib_as_it_is():
    """The pipeline search's reason: a limit under 1 GiB to three figures (--memory 0.01 read
    "over the 0.0 GiB limit"), the others to a tenth."""
    assert [stage_plan._gib(x * 2.0 ** 30) for x in (0.01, 0.496, 6.66, 80.0)] == ["0.01", "0.496", "6.7", "80.0"]
