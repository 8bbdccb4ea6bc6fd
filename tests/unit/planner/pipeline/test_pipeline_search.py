"""The pipeline search (planner.pipeline.search): its cut search and its outer search are exact
over their domain, checked by brute force (the Lagrangian stage solve it uses:
tests/unit/planner/solvers/test_solvers.py; the bound on a pair's every cut: test_stage_bound.py)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import candidate_strategies, divisors
from networks.errors import DnnplanError
from costmodel.step.pipeline import INTERLEAVED, stage_network
from costmodel.memory.pipeline import device_hold
from planner.pipeline import interleave
from planner.pipeline.cuts import best_cut, cut_lower
from planner.pipeline.triples import AUTO, bounded, chunk_counts, highest_peak, micro_sizes, physics_floor
from planner.problem.solve import Settings
from planner.pipeline.pair_search import PairSearch, kept
from planner.pipeline.search import search_pipeline
from planner.pipeline.stack import roles
from planner.pipeline.stack import uniform_stack
from planner.pipeline.stage_solver import StageSolver
from profiler import context

from tests.support.paths import ZOO
from tests.support.pipeline_cases import PROVE, SETTINGS, compositions, gpt4, moe4, step_1f1b


@pytest.mark.parametrize("seed", range(20))
def test_the_cut_search_equals_brute_force_on_random_stage_costs(seed):
    rng = np.random.default_rng(seed)
    n, stages, m = int(rng.integers(3, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 9))
    stages = min(stages, n)
    table = {(s, k): (None if rng.random() < 0.1 else (float(k * rng.uniform(1, 2)), float(rng.uniform(0, 3))))
             for s in range(stages) for k in range(1, n + 1)}
    got = best_cut(n, stages, m, lambda s, k: table[(s, k)], range(1, n - stages + 2))
    best = None
    for cut in compositions(n, stages):
        costs = [table[(s, k)] for s, k in enumerate(cut)]
        if any(c is None for c in costs):
            continue
        step = step_1f1b([c[0] for c in costs], [c[1] for c in costs], m)
        best = step if best is None else min(best, step)
    if best is None:
        assert got is None
    else:
        assert got is not None and got[0] == pytest.approx(best, rel=1e-12)
        costs = [table[(s, k)] for s, k in enumerate(got[1])]
        assert sum(got[1]) == n and step_1f1b([c[0] for c in costs], [c[1] for c in costs], m) == pytest.approx(got[0])


@pytest.mark.slow
@pytest.mark.parametrize("make, limit", [(gpt4, 2.0 ** 30 * 0.0033), (moe4, 2.0 ** 20 * 0.95)])
def test_brute_force_over_every_stage_split_and_degree_finds_nothing_better(tmp_path, make, limit):
    """A 4-block GPT on 8 devices: every pipeline degree, micro-batch count and stage split, and
    every interleaving (2 stages of 2 chunks of 1 block, Megatron's equal chunks), each stage or
    device solved exactly on its own layers, against the search weighing interleaving on every pair
    (its stage solves exact too). Also with grouped-query attention and experts, whose strategy space
    holds context (a split sequence) and expert splits."""
    p, batch = 8, 8
    ctx = context.resolve(make(tmp_path), p, batch, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    net, stack = ctx.network, uniform_stack(ctx.network)
    assert stack is not None and stack.n == 4
    if make is moe4:
        space = {s.label for op in ("attention", "moe") for layer in net.layers if layer.op == op
                 for s in candidate_strategies(layer, p, batch)}
        assert any("H=" in s for s in space) and any("E=" in s for s in space)
    # limit: 3.4 MiB (0.95 MiB) a device, so one stage does not fit and the search must cut
    got = search_pipeline(net, batch, p, ctx.machine, ctx.compute, limit, SETTINGS, exact=True,
                          micro_counts=divisors(batch), schedule=AUTO)
    sends = PairSearch(stack, batch, p, ctx.machine, ctx.compute, limit, SETTINGS)
    best, per = _interleaved_brute_force(ctx, stack, p, batch, limit, sends)
    for stages in (s for s in divisors(p) if s <= stack.n):
        for m in divisors(batch):
            per[(stages, m)] = None
            solver = StageSolver(p // stages, batch // m, m + stages - 1, ctx.machine, ctx.compute, SETTINGS, limit,
                                 exact=True)
            for cut in compositions(stack.n, stages):
                ts, os_, start = [], [], 0
                for s, k in enumerate(cut):
                    stage, _ = stage_network(net, stack.layers(start, k, roles(stages)[s]), s)
                    sol = solver.solve(("own", s, cut), stage, kept(stages, s, m), sends.tied(stages, s, stage))
                    start += k
                    if sol is None:
                        break
                    ts.append(sol.micro_s + sends.p2p_s(stages, s, batch // m))
                    os_.append(sol.once_s + sol.tied_s)  # with the tied table's sum on the first and last stage
                else:
                    step = step_1f1b(ts, os_, m)
                    best = step if best is None else min(best, step)
                    per[(stages, m)] = min(step, per[(stages, m)] or step)
    assert best is not None and got.stages > 1  # the limit makes it pipeline
    assert any(len(k) == 3 and v is not None for k, v in per.items())  # and interleaved plans fit
    for (stages, m, *v), step in per.items():  # every (S, m, V)'s lower bound holds, and says when none fits
        bound, fits, _ = sends.bound(stages, m, *v)
        assert (step is None) if not fits else (step is None or bound <= step * (1 + 1e-12))
    assert all(sends.bound(*k)[0] > 0 for k in per)
    assert got.prediction.step_s <= best * (1 + 1e-9)
    assert got.prediction.step_s == pytest.approx(best, rel=1e-9)
    # the search as `dnnplan plan` runs it (pairs compared by Lagrangian stage solves), proving to the end
    relaxed = search_pipeline(net, batch, p, ctx.machine, ctx.compute, limit, PROVE, micro_counts=divisors(batch),
                              prove_s=None, schedule=AUTO)
    assert relaxed.stats["proven_gap"] == 0
    assert relaxed.prediction.step_s == pytest.approx(best, rel=1e-9)


def _interleaved_brute_force(ctx, stack, p: int, batch: int, limit: float, sends) -> tuple[float | None, dict]:
    """Every interleaved (S, m, V) on Megatron's equal chunks, each device solved exactly on its own
    layers (not one canonical device for all middle ones): the best step, and each triple's."""
    best, per = None, {}
    for stages in (s for s in divisors(p) if 1 < s <= stack.n):
        for m in divisors(batch):
            for v in chunk_counts(stack.n, stages, m, INTERLEAVED):
                weight = m + (stages - 1) / v
                solver = StageSolver(p // stages, batch // m, weight, ctx.machine, ctx.compute, SETTINGS, limit,
                                     exact=True)
                ts, os_ = [], []
                for s in range(stages):
                    net, _ = stage_network(ctx.network, stack.device_layers(stages, v, s), s)
                    kept_s = device_hold(stages, s, m, v, stack.device_chunks(stages, v, s))  # chunk by chunk
                    sol = solver.solve(("device", s), net, kept_s, sends.tied(stages, s, net))
                    if sol is None:
                        break
                    ts.append(sol.micro_s + interleave.sends_s(ctx.machine, p, stages, v, s, sends.boundary,
                                                               batch // m))
                    os_.append(sol.once_s + sol.tied_s)
                per[(stages, m, v)] = None if len(ts) < stages else interleave.step_s(ts, os_, m, v)
                if per[(stages, m, v)] is not None:
                    best = per[(stages, m, v)] if best is None else min(best, per[(stages, m, v)])
    return best, per


@pytest.mark.slow
def test_the_proof_closes_the_pairs_that_could_still_win(tmp_path):
    """Memory-bound stages leave Lagrangian gaps: without time to prove, the search says how much
    faster another pair could be; given the time, it closes every pair whose bound is below its
    step and says the choice is optimal, no slower than before."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.0012  # gaps up to 51% in the stages the pairs are compared with
    quick = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, prove_s=0)
    full = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, PROVE, prove_s=None)
    assert quick.stats["worst_stage_gap"] > 0 and quick.stats["closed_pairs"] <= 1  # the chosen pair alone
    assert quick.stats["proven_gap"] > 0
    assert full.stats["proven_gap"] == 0 and full.prediction.step_s <= quick.prediction.step_s * (1 + 1e-12)
    for c in full.candidates:
        assert c.lower_s <= (c.step_s or float("inf")) * (1 + 1e-12)
        assert c.skipped or c.closed or c.lower_s >= full.prediction.step_s * (1 - 1e-12)


def test_the_pairs_likeliest_to_win_are_bounded_first_and_set_the_step_for_the_rest():
    """``bounded`` with ``settle``: with no step held, the pairs of least floor bounded whole, the
    others against the least bound of theirs; with one held, each pair's first partial bound first
    (its largest layer: here half its bound), then the pairs of least such bound against the step
    held, the others against the least bound of theirs, no higher than it (a pair whose first
    partial bound reaches the step held keeps it: so bounded against it); side by side, every pair
    against the step held at once. A pair bounded out on
    part of its layers keeps that partial bound as its floor (whether anything fits not known) and
    comes after the pairs bounded whole."""
    whole = {(1, 1): 9.0, (1, 2): 5.0, (2, 1): 7.0, (2, 2): 4.5, (4, 1): 20.0, (4, 2): 6.0}
    asked = []

    def bound(s, m, v, above=None):
        asked.append(((s, m), above))
        full = whole[(s, m)]
        if above is not None and full >= above:
            return full / 2 if full / 2 >= above else above, None, full / 2
        return full, True, full

    combos = [(1.0 + s / 10 + m / 100, s, m, 1) for s, m in whole]
    got = bounded(bound, combos, settle=2)
    assert [a for _, a in asked[:2]] == [None, None]  # the two of least floor: (1, 1), (1, 2)
    assert {k for k, _ in asked[:2]} == {(1, 1), (1, 2)}
    assert all(a == 5.0 for _, a in asked[2:])  # the others against (1, 2)'s bound
    assert [(c[1], c[2], c[4]) for c in got[:3]] == [(2, 2, True), (1, 2, True), (1, 1, True)]
    # bounded out on part of their layers: their partial bounds, after the others
    assert [(c[0], c[1], c[2], c[4]) for c in got[3:]] == [(5.0, 2, 1, None), (5.0, 4, 2, None), (10.0, 4, 1, None)]
    asked.clear()
    held = bounded(bound, combos, settle=2, above=6.5)
    assert sorted(k for k, a in asked[:6] if a == 0.0) == sorted(whole)  # each pair's first partial bound
    assert asked[6:8] == [((2, 2), 6.5), ((1, 2), 6.5)]  # the two of least first partial bound
    # the others against (2, 2)'s bound, but (4, 1), whose first partial bound (10) reaches the step held
    assert [k for k, _ in asked[8:]] == [(4, 2), (2, 1), (1, 1)] and all(a == 4.5 for _, a in asked[8:])
    assert [(c[0], c[1], c[2], c[4]) for c in held] == [
        (4.5, 2, 2, True), (5.0, 1, 2, True), (4.5, 1, 1, None), (4.5, 2, 1, None), (4.5, 4, 2, None),
        (10.0, 4, 1, None)]
    # side by side, every pair at once against the step held
    asked.clear()
    side = bounded(bound, combos, many=lambda given, above: ((i, bound(*c[1:], above)) for i, c in enumerate(given)),
                   settle=2, above=6.5)
    assert sorted(k for k, _ in asked) == sorted(whole) and all(a == 6.5 for _, a in asked)
    assert [(c[1], c[2], c[4]) for c in side[:2]] == [(2, 2, True), (1, 2, True)]
    # without settle every pair is bounded whole, in order of its bound
    assert [(c[1], c[2], c[4]) for c in bounded(bound, combos)] == [
        (2, 2, True), (1, 2, True), (4, 2, True), (2, 1, True), (1, 1, True), (4, 1, True)]


def test_the_search_prices_its_choice_as_the_pipeline_model_does():
    ctx = context.resolve("gpt-tiny", 4, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    got = search_pipeline(ctx.network, 8, 4, ctx.machine, ctx.compute, None, SETTINGS)
    pred = got.prediction
    assert got.stages * pred.stages[0].ranks == 4 and sum(got.cut) == 2
    assert pred.micro_batches == got.micro_batches and 8 % got.micro_batches == 0
    ts = [s.per_micro_s for s in pred.stages]
    assert pred.step_s == pytest.approx(sum(ts) + (got.micro_batches - 1) * max(ts)
                                        + max(s.once_s for s in pred.stages))
    assert all(not c.skipped or c.bound_s >= pred.step_s for c in got.candidates)


@pytest.mark.parametrize("seed", range(40))
def test_the_cut_lower_bound_holds_for_every_cut(seed):
    """Stage costs growing with their blocks, each stage's objective known only to within a gap:
    no cut's step is below the bound, whatever the largest size the bound was told (``hi``)."""
    rng = np.random.default_rng(seed)
    n, stages, m = int(rng.integers(2, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 9))
    stages, weight = min(stages, n), m + min(stages, n) - 1
    t0, o0 = rng.uniform(0, 2, stages), rng.uniform(0, 3, stages)
    dt, do = rng.uniform(0.01, 2, (stages, n)) ** 2, rng.uniform(0, 1, (stages, n))
    cost = {(s, k): (t0[s] + dt[s, :k].sum(), o0[s] + do[s, :k].sum()) for s in range(stages) for k in range(1, n + 1)}
    too_big = int(rng.integers(2, n + 2))  # stages of this many blocks or more do not fit
    gaps = rng.uniform(0, 0.5, (stages, n + 1)) * (rng.random() < 0.5)  # half the cases exact
    best = None
    for cut in compositions(n, stages):
        if max(cut) >= too_big:
            continue
        costs = [cost[(s, k)] for s, k in enumerate(cut)]
        step = step_1f1b([c[0] for c in costs], [c[1] for c in costs], m)
        best = step if best is None else min(best, step)

    def lower(s, k):
        return None if k >= too_big else (weight * cost[(s, k)][0] + cost[(s, k)][1]) * (1 - gaps[s, k])

    for hi in range(1, n - stages + 2):
        got = cut_lower(n, stages, m, lower, hi)
        assert got >= 0 and (best is None or got <= best * (1 + 1e-12))  # any bound holds when none fits
    exact = cut_lower(n, stages, m, lambda s, k: None if k >= too_big else weight * cost[(s, k)][0] + cost[(s, k)][1],
                      n - stages + 1)
    if best is None:  # told every size, the bound proves that no cut fits
        assert exact == float("inf")
    elif stages == 1:  # one stage: the bound is its objective, the step itself
        assert exact == pytest.approx(best, rel=1e-12)


def _average_cut_lower(n: int, stages: int, lower, hi: int) -> float:
    """The bound before the slowest stage was weighed: the least over cuts (stages of at most ``hi``
    blocks) of the stages' brackets averaged."""
    sums = [sum(lower(s, k) for s, k in enumerate(cut)) for cut in compositions(n, stages)
            if max(cut) <= hi and all(lower(s, k) is not None for s, k in enumerate(cut))]
    return min(sums, default=float("inf")) / stages


@pytest.mark.parametrize("seed", range(40))
def test_the_cut_lower_bound_is_never_below_the_stages_average(seed):
    """Random stage brackets (some sizes unknown, counted 0, some not fitting): the bound weighing
    the slowest stage is at least the averaged one over the same cuts."""
    rng = np.random.default_rng(seed)
    n, stages, m = int(rng.integers(2, 9)), int(rng.integers(1, 4)), int(rng.integers(1, 9))
    stages = min(stages, n)
    table = {(s, k): None if rng.random() < 0.1 else 0.0 if rng.random() < 0.1 else float(rng.uniform(0, 5) * k)
             for s in range(stages) for k in range(1, n + 1)}
    hi = n - stages + 1
    got = cut_lower(n, stages, m, lambda s, k: table[(s, k)], hi)
    assert got >= _average_cut_lower(n, stages, lambda s, k: table[(s, k)], hi) * (1 - 1e-12)


def test_the_cut_lower_bound_weighs_the_slowest_stage():
    """4 blocks on 2 stages, 8 micro-batches, the last stage carrying a head heavier than two blocks
    (bracket ``k + 2.5`` against ``k``, no cut balances them), each bracket exact: a cut's step is
    ``(m - 1) max + sum`` of them over ``w``, least at (3, 1): 31 / 9, which the bound finds; the
    averaged bound says 3.25."""
    n, stages, m = 4, 2, 8
    weight = m + stages - 1

    def lower(s, k):  # T = bracket / w, O = 0: a cut's step is its bound
        return float(k + 2.5 * (s == 1))

    steps = [sum(lower(s, k) for s, k in enumerate(cut)) / weight + (m - 1) * max(lower(s, k) for s, k in
                                                                                     enumerate(cut)) / weight
             for cut in compositions(n, stages)]
    assert min(steps) == pytest.approx(31 / 9)
    assert cut_lower(n, stages, m, lower, n - 1) == pytest.approx(min(steps), rel=1e-12)
    assert _average_cut_lower(n, stages, lower, n - 1) == pytest.approx(3.25)


def test_micro_batch_sizes_include_megatrons_per_replica_ones():
    # Narayanan et al. Table 1, 529.6B: 2520 GPUs, 35 stages of 72, tensor 8 inside a node, 9
    # replicas with micro-batches of 1: a micro-batch of 9 samples over the stage
    assert micro_sizes(72, 8) == {1, 2, 4, 8, 9, 18, 36, 72}
    assert micro_sizes(12, 8) == {1, 2, 4, 8}  # no whole node groups: the plain sizes
    assert micro_sizes(64, 1) == {1, 2, 4, 8}
    # one stage on every device (accumulation without a pipeline): 1 to 8 samples a device too
    assert micro_sizes(8, 8, alone=True) == {1, 2, 4, 8, 16, 32, 64}


def test_a_network_that_is_no_uniform_stack_is_refused_in_one_line():
    ctx = context.resolve("lenet5", 2, 8, "local", None)
    with pytest.raises(DnnplanError, match="not a stack of identical blocks"):
        search_pipeline(ctx.network, 8, 2, ctx.machine, ctx.compute, None, Settings())


def test_dnnplan_plan_pipeline_auto_prints_and_writes_json(tmp_path):
    import json

    from typer.testing import CliRunner

    from dnnplan.cli import app
    runner = CliRunner()
    args = ["plan", "gpt-tiny", "-p", "4", "-b", "8", "--machine", "dgx-a100", "--precision", "fp16",
            "--optimizer", "adam", "--pipeline", "auto"]
    got = runner.invoke(app, args + ["--json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout, parse_constant=lambda name: pytest.fail(f"{name} in --json: not strict JSON"))
    assert out["search"]["proven_gap"] >= 0
    assert all(c["lower_s"] <= c["step_s"] * (1 + 1e-12) for c in out["tried"] if c["step_s"] is not None)
    assert out["devices"] == 4 and len(out["stages"]) * out["stages"][0]["ranks"] == 4
    assert sum(out["cut_blocks"]) == 2 and 0 < out["mfu"] < 1 and out["search"]["tried"] >= 1
    text = runner.invoke(app, args)
    assert text.exit_code == 0 and "layout: " in text.stdout and "optim" in text.stdout, text.stdout
    bad = runner.invoke(app, args[:-1] + ["3x"])
    assert bad.exit_code == 2 and "--pipeline takes 'auto'" in bad.output
    out_file = runner.invoke(app, args + ["--out", str(tmp_path / "p.yaml")])
    assert out_file.exit_code == 0 and "wrote" in out_file.output, out_file.output
    assert "pipeline:" in (tmp_path / "p.yaml").read_text()
    swept = runner.invoke(app, args[:-1] + ["2", "--sweep", "2,4"])  # auto is swept (tests/cli/plan/test_plan_sweep_machines.py)
    assert swept.exit_code == 2 and "cannot be swept" in swept.output
    gone = runner.invoke(app, args + ["--schedule", "zigzag"])
    assert gone.exit_code == 2 and "unknown --schedule" in gone.output


def test_the_chosen_pairs_stages_have_their_gaps_closed(tmp_path):
    """Pairs are compared with Lagrangian stage solves; the chosen one is searched again with each
    memory-bound stage's gap closed, which gives what the ILP gives on that pair."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.003  # one stage of 8 micro-batches: the bisection leaves a 55% gap there
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, stage_counts=(1,),
                          micro_counts=(8,))
    assert got.stats["relaxed_stage_solves"] >= 1 and got.stats["open_stage_solves"] == 0
    assert got.stats["worst_stage_gap"] > 0.1  # what the pair was compared with
    exact = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, exact=True,
                            stage_counts=(got.stages,), micro_counts=(got.micro_batches,))
    assert got.prediction.step_s == pytest.approx(exact.prediction.step_s, rel=1e-9)


def _summary(choice) -> tuple:
    return (choice.stages, choice.micro_batches, choice.chunks, choice.cut, choice.prediction.step_s,
            choice.stats["proven_gap"], choice.stats["closed_pairs"],
            tuple((c.stages, c.micro_batches, c.chunks, c.bound_s, c.step_s, c.lower_s, c.skipped, c.closed)
                  for c in choice.candidates))


def test_closing_a_pairs_gaps_takes_its_searchs_bisections_and_answers_as_afresh(tmp_path, monkeypatch):
    """The solver that closes a searched pair's gaps takes that search's bisections where it would
    start them from the same multiplier (the same problem and answer), and its solves without the
    memory limit: fewer bisections and stage solves, and the choice, cut, step, proof and every
    pair's bounds of a solver that solves afresh."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    limit = 2.0 ** 30 * 0.0012  # memory-bound stages: Lagrangian gaps, closed by the proof
    args = (ctx.network, 8, 8, ctx.machine, ctx.compute, limit, Settings(gap=0.0, choices=SETTINGS.choices))
    import planner.pipeline.stage_solver as stage_solver
    bisections = [0]
    real = stage_solver.solve_lagrange

    def counted(*a, **k):
        bisections[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(stage_solver, "solve_lagrange", counted)
    taken = search_pipeline(*args, micro_counts=divisors(8), prove_s=None)
    with_taken, bisections[0] = bisections[0], 0
    init = StageSolver.__init__
    monkeypatch.setattr(StageSolver, "__init__", lambda self, *a, **k: init(self, *a[:11]))  # none searched before
    afresh = search_pipeline(*args, micro_counts=divisors(8), prove_s=None)
    assert taken.stats["closed_pairs"] > 0 and taken.stats["relaxed_stage_solves"] > 0
    assert with_taken < bisections[0] and taken.stats["stage_solves"] < afresh.stats["stage_solves"]
    assert _summary(taken) == _summary(afresh)


def test_the_physics_floor_is_the_peak_the_layers_run_at_and_below_every_pairs_optimum():
    """A bf16 transformer on H100s is floored at the bf16 peak (not the FP8 one it never runs at),
    in fp8 at the FP8 peak; the floor stays below each pair's exact optimum."""
    bf16 = context.resolve(str(ZOO / "tiny-llama.yaml"), 8, 8, "dgx-h100", None,
                           choices=TrainingChoices(precision="bf16"))
    fp8 = context.resolve(str(ZOO / "tiny-llama.yaml"), 8, 8, "dgx-h100", None,
                          choices=TrainingChoices(precision="fp8"))
    peaks = bf16.machine.device.peak_flops
    assert highest_peak(bf16.network, bf16.machine) == peaks["bfloat16"] < max(peaks.values())
    assert highest_peak(fp8.network, fp8.machine) == peaks["float8"]
    floor = physics_floor(bf16.network, 8, 8, bf16.machine)
    settings = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="bf16"))
    for stages, m in ((1, 1), (1, 8), (2, 2), (2, 8)):  # its 2 blocks: at most 2 stages
        got = search_pipeline(bf16.network, 8, 8, bf16.machine, bf16.compute, None, settings, exact=True,
                              stage_counts=(stages,), micro_counts=(m,), prove_s=None)
        assert 0 < floor(stages, m, 1) <= got.prediction.step_s



def test_a_pair_past_its_share_is_left_for_the_next_until_a_plan_is_in_hand(tmp_path, monkeypatch):
    """Until a plan is in hand, a pair whose search runs past FIRST_SHARE of the time left is left
    (a candidate skipped for time, at its bound) and the next pair searched: the search answers."""
    from planner.pipeline.pair_search import PairSearch
    from planner.pipeline.choice import OutOfTime
    from planner.solvers import Budget

    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    real, calls = PairSearch.best, []

    def slow_first(self, stages, m, close=False, chunks=1, below=None):
        calls.append((stages, m, chunks, self.pair_deadline is not None))
        if len(calls) == 1:
            raise OutOfTime  # as past its share
        return real(self, stages, m, close, chunks, below)

    monkeypatch.setattr(PairSearch, "best", slow_first)
    settings = Settings(budget=Budget(600.0), choices=TrainingChoices(optimizer="adam", precision="fp16"))
    got = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, None, settings, schedule="1f1b")
    first = calls[0]
    assert first[3] and len(calls) > 1  # the first pair had a share; the search went on
    left = [c for c in got.candidates if c.key == first[:3]]
    assert left and left[0].skipped == "time" and left[0].lower_s == left[0].bound_s
    assert got.prediction.step_s > 0 and (got.stages, got.micro_batches, got.chunks) != first[:3]
