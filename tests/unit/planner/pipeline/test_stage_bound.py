"""The lower bound on a pipeline pair's every cut (planner.pipeline.bound): below each pair's exact
optimum, with the slowest stage weighed, each stage holding its own micro-batches, the layers after
the blocks in the form they take in a last stage, partial against a step held (from floors every
ZeRO stage shares, then the stage's own prices), and a proof where no cut fits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.step.pipeline import INTERLEAVED, stage_network
from networks.errors import DnnplanError
from planner.pipeline.bound import _Forms, _ends, stage_bound
from planner.pipeline.pair_search import PairSearch, kept
from planner.pipeline.search import search_pipeline
from planner.pipeline.stack import roles
from planner.pipeline.stack import LAST, uniform_stack
from planner.pipeline.stage_solver import StageSolver, stage_builder
from planner.problem.build import node_keys, node_of, weighed_cost
from planner.problem.priced_layers import PricedLayers
from planner.problem.solve import Settings
from profiler import context

from tests.support.pipeline_cases import SETTINGS, compositions, gpt4, moe4, step_1f1b


def test_the_stage_bound_weighs_the_slowest_stage_and_stays_below_each_pairs_optimum(tmp_path):
    """The 4-block GPT on 8 devices: its first and last stage carry the embedding and the head, which
    no cut of 4 stages (one block each) or of 2 interleaved devices (two each) moves off them, and
    2 stages balance only to within a block; so weighing the slowest stage's bracket bounds above
    the stages' mean bracket (the bound's third number), and still
    below the pair's exact optimum over every cut."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    stack, limit = uniform_stack(ctx.network), 2.0 ** 30
    search = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS)
    for stages, m, v in [(4, 8, 1), (2, 8, 1), (2, 8, 2)]:
        bound, fits, mean = search.bound(stages, m, v)
        exact = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, exact=True,
                                stage_counts=(stages,), micro_counts=(m,),
                                schedule=INTERLEAVED if v > 1 else "1f1b")
        assert fits and mean * 1.001 < bound <= exact.prediction.step_s * (1 + 1e-12)


def test_the_layers_after_the_blocks_are_bounded_in_the_form_they_take_behind_a_block():
    """GPT-3 175B in 32 stages of 2 H100s under ZeRO-3 (1,024 micro-batches of one sequence): the last
    stage's tied head holds a copy of the table. Standing alone the head would fill the bucket the
    backward makes last, its ZeRO-3 gathers exposed; behind a block, as in every last stage, they
    hide under the passes. The bound counts the layers after the blocks at no more than their least
    cost in a last stage, so the pair's bound stays below the step its search finds."""
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=3)
    ctx = context.resolve("gpt3-175b", 64, 1024, "dgx-h100", None, choices=choices)
    stack, limit, settings = uniform_stack(ctx.network), ctx.machine.device.mem_capacity_bytes, Settings(choices=choices)
    stages, m = 32, 1024
    weight = m + stages - 1
    builder = stage_builder(64 // stages, 1024 // m, ctx.machine, ctx.compute, settings)
    last, _ = stage_network(ctx.network, stack.layers(stack.n - 1, 1, LAST), stages - 1)
    after = {layer.name for layer in stack.after}
    alone, _ = stage_network(ctx.network, list(stack.after), 0)
    head = [k for layer, k in zip(alone.layers, node_keys(builder, alone)) if layer.name == "lm_head"][0]
    assert head[3] and weighed_cost(node_of(builder, head), weight).min() > weighed_cost(
        node_of(builder, (*head[:3], False)), weight).min()  # alone, the head's gathers are exposed
    inside = sum(float(weighed_cost(node_of(builder, key), weight).min())
                 for layer, key in zip(last.layers, node_keys(builder, last)) if layer.name in after)
    assert _ends(builder, stack, weight, stages)[1] <= inside * (1 + 1e-12)
    bound = PairSearch(stack, 1024, 64, ctx.machine, ctx.compute, limit, settings).bound(stages, m)[0]
    found = search_pipeline(ctx.network, 1024, 64, ctx.machine, ctx.compute, limit, settings,
                            stage_counts=(stages,), micro_counts=(m,), schedule="1f1b", prove_s=None)
    assert bound <= found.prediction.step_s


def test_blocks_smaller_than_a_bucket_are_bounded_as_the_layers_behind_the_last_bucket():
    """GPT-2 on 8 A100s under ZeRO-1 (gradient accumulation: one stage of 4 micro-batches): a block
    (14 MB of bf16 weights) is smaller than the 25 MiB bucket the backward makes last, so two blocks
    standing alone would both fill it, every weight's gradient sum exposed. In the network the
    embedding fills it and the blocks' sums hide under the backward: bounded as they are, the pair's
    bound was 1.3% above the step its search finds (and pruned that plan at 6 GiB). Priced as
    behind the last bucket, never slower, the bound stays below it."""
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    ctx = context.resolve("gpt2", 8, 128, "dgx-a100", None, choices=choices)
    stack, limit, settings = uniform_stack(ctx.network), 4.0 * 2**30, Settings(choices=choices)
    bound = PairSearch(stack, 128, 8, ctx.machine, ctx.compute, limit, settings).bound(1, 4)[0]
    found = search_pipeline(ctx.network, 128, 8, ctx.machine, ctx.compute, limit, settings,
                            stage_counts=(1,), micro_counts=(4,), schedule="1f1b", prove_s=None)
    assert bound <= found.prediction.step_s


def _best_cut_step(ctx, stack, p, batch, stages, m, limit, sends) -> float | None:
    """The least step over every cut of ``(S, m)`` under 1F1B within ``limit``, each stage solved
    exactly (None: no cut fits)."""
    solver = StageSolver(p // stages, batch // m, m + stages - 1, ctx.machine, ctx.compute, SETTINGS, limit, exact=True)
    best = None
    for cut in compositions(stack.n, stages):
        ts, os_, start = [], [], 0
        for s, k in enumerate(cut):
            stage, _ = stage_network(ctx.network, stack.layers(start, k, roles(stages)[s]), s)
            start += k
            sol = solver.solve(("own", s, cut), stage, kept(stages, s, m), sends.tied(stages, s, stage))
            if sol is None:
                break
            ts.append(sol.micro_s + sends.p2p_s(stages, s, batch // m))
            os_.append(sol.once_s + sol.tied_s)
        else:
            step = step_1f1b(ts, os_, m)
            best = step if best is None else min(best, step)
    return best


@pytest.mark.slow
def test_each_stage_bounded_holding_its_own_micro_batches_stays_below_the_best_cut(tmp_path):
    """The 4-block GPT on 8 devices, under memory limits from none fitting to all: each stage's
    bound counts the micro-batches it holds (1F1B's first stage ``min(S, m)``, its last one). A pair
    whose bound says nothing fits has no cut that fits (every cut's stages solved exactly), and
    some are proven so only by those counts; every other pair's bound stays below its best cut,
    and for some it is above the bound that counts one micro-batch a stage; with the reshards
    inside a block (``edges``) it stays below the best cut too, and for some above the bound
    without them."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    stack, proofs, tighter, seen, tighter_edges = uniform_stack(ctx.network), 0, 0, set(), 0
    for limit in np.geomspace(2.0 ** 20 * 0.5, 2.0 ** 20 * 8, 9):
        search = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS)
        for stages, m in [(2, 2), (2, 4), (2, 8), (4, 4), (4, 8)]:
            bound, fits, _ = search.bound(stages, m)
            one = stage_bound(search.solver(stages, m).builder, stack, stages, m, limit,
                              tuple(search.sends(stages, m, 1)))
            best = _best_cut_step(ctx, stack, 8, 8, stages, m, limit, search)
            seen.add(fits)
            if not fits:
                assert best is None
                proofs += one.fits is True
            elif best is not None:
                assert one.step_s <= bound * (1 + 1e-12) and bound <= best * (1 + 1e-12)
                edged = search.stage_bound(stages, m, 1, edges=True).step_s  # with the reshards in a block
                assert bound * (1 - 1e-12) <= edged <= best * (1 + 1e-12)
                tighter_edges += edged > bound * (1 + 1e-9)
                tighter += bound > one.step_s * (1 + 1e-9)
    assert seen == {True, False} and proofs > 0 and tighter > 0 and tighter_edges > 0


def test_gpt3s_pairs_whose_first_stages_cannot_hold_their_micro_batches_are_proven_unfit_at_once():
    """GPT-3 175B on 64 H100s under ZeRO-3 at a batch of 1,024: 8 stages x 128 micro-batches (the
    first stage holds 8 micro-batches' activations) took 40 s of stage solves to find that no cut
    fits; its bound says so, while 8 stages x 256 (whose search finds 58.2 s) fits. And 4 stages x
    64, whose first stage holds 4 micro-batches' activations, is bounded above 58.2 s (its search
    finds 73.7 s; one micro-batch a stage bounds it at 57.2 s)."""
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=3)
    ctx = context.resolve("gpt3-175b", 64, 1024, "dgx-h100", None, choices=choices)
    search = PairSearch(uniform_stack(ctx.network), 1024, 64, ctx.machine, ctx.compute,
                     ctx.machine.device.mem_capacity_bytes, Settings(choices=choices))
    assert search.bound(8, 128)[1] is False and search.bound(16, 256)[1] is False
    assert search.bound(8, 256)[1] is True
    assert search.bound(4, 64)[0] > 58.2


def test_a_bound_against_a_step_held_stops_on_part_of_the_layers_and_stays_below_the_whole(tmp_path):
    """Bounded against a step held (``above``), a pair's bound prices a block's layers one at a time
    and stops once their part of the sum reaches it: that partial bound reaches the step, stays at
    most the whole bound, says nothing of memory (None), and priced fewer layers; a step the whole
    bound stays below changes nothing."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    stack, limit = uniform_stack(ctx.network), 2.0 ** 30
    for stages, m in [(1, 1), (1, 8), (2, 8), (4, 8), (4, 1)]:
        whole = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS)
        step, fits, mean = whole.bound(stages, m)
        assert fits
        priced = len(whole.solver(stages, m).builder.nodes)
        for above in (0.0, 0.5 * step):
            held = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS)
            part, known, _ = held.bound(stages, m, 1, above)
            assert known is None and above <= part <= step * (1 + 1e-12)
            assert len(held.solver(stages, m).builder.nodes) < priced
        above = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS)
        assert above.bound(stages, m, 1, 2 * step) == (step, fits, mean)


@pytest.mark.parametrize("make", [gpt4, moe4])
def test_a_bound_against_a_step_held_starts_from_floors_every_zero_stage_shares(tmp_path, make):
    """Against a step held, a pair's bound first sums each layer's floor under any ZeRO stage
    (``Builder.micro_floor``): where that reaches the step, no node is priced under the stage
    bounding it, and the partial bound stays at most the pair's whole bound under every ZeRO stage;
    interleaved too, there at most the triple's exact optimum."""
    ctx = context.resolve(make(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    stack, limit = uniform_stack(ctx.network), 2.0 ** 30
    priced = PricedLayers()
    for stages, m, v in [(1, 8, 1), (2, 8, 1), (4, 4, 1), (2, 8, 2)]:
        wholes = [PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS.with_zero(z)).bound(stages, m, v)[0]
                  for z in (0, 1, 2, 3)]
        above = 0.25 * min(wholes)  # reached on the floors (the tiny layers' update is much of their cost)
        for zero in (3, 0, 2):  # one planning call's pricing, as the ZeRO choice shares it
            held = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, limit,
                           dataclasses.replace(SETTINGS.with_zero(zero), priced=priced))
            part, known, _ = held.bound(stages, m, v, above)
            assert known is None and above <= part <= min(wholes) * (1 + 1e-12)
            assert not held.solver(stages, m, chunks=v).builder.nodes  # nothing priced under this ZeRO stage
        if v > 1:
            exact = search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS, exact=True,
                                    stage_counts=(stages,), micro_counts=(m,), schedule=INTERLEAVED)
            assert part <= exact.prediction.step_s * (1 + 1e-12)
    assert priced.floors


def test_the_stage_bound_proves_when_nothing_fits(tmp_path):
    """Below one block's least memory no (S, m) fits: the bound says so and the search refuses."""
    ctx = context.resolve(gpt4(tmp_path), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    stack = uniform_stack(ctx.network)
    roomy = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, 2.0 ** 30, SETTINGS)
    assert all(roomy.bound(s, m)[1] for s in (1, 2, 4) for m in (1, 8))
    tight = PairSearch(stack, 8, 8, ctx.machine, ctx.compute, 1e4, SETTINGS)
    assert not any(tight.bound(s, m)[1] for s in (1, 2, 4) for m in (1, 8))
    with pytest.raises(DnnplanError, match="no pipelined plan"):
        search_pipeline(ctx.network, 8, 8, ctx.machine, ctx.compute, 1e4, SETTINGS)


def test_the_reshards_inside_a_block_tighten_the_bound_below_the_pairs_search():
    """llama3.1-405b on 4,096 H100s under ZeRO-1 (batch 512): the reshards between a block's layers
    are 7% of its cost. Counted (``edges``, as the search bounds a pair it is about to search), 8
    stages x 128 micro-batches is bounded above the 6.455 s step of 64 x 512 (its own search finds
    7.556 s), so it is not searched; left out, the bound is 6.454 s."""
    choices = TrainingChoices(optimizer="adam", precision="bf16", zero=1)
    ctx = context.resolve("llama3.1-405b", 4096, 512, "dgx-h100", None, choices=choices)
    stack, limit = uniform_stack(ctx.network), ctx.machine.device.mem_capacity_bytes
    search = PairSearch(stack, 512, 4096, ctx.machine, ctx.compute, limit, Settings(choices=choices))
    loose = search.bound(8, 128)[0]
    tight = search.stage_bound(8, 128, 1, edges=True).step_s
    assert loose < 6.455 < tight <= 7.556


@pytest.mark.parametrize("seed", range(40))
def test_the_dual_value_over_the_forms_laid_end_to_end_is_the_loop_over_them(seed):
    """bound._Forms.value: each layer's least ``cost + lam memory`` over its forms, ties to the least
    memory at a form's first minimum, summed layer by layer: the same floats as the loop over
    layers and forms (ties made on purpose: integer costs, a form repeated)."""
    rng = np.random.default_rng(seed)

    def loop(cost, memory, lam):
        total, mem = 0.0, 0.0
        for costs, mems in zip(cost, memory):
            best = min((float((c + lam * m).min()), float(m[int(np.argmin(c + lam * m))])) for c, m in zip(costs, mems))
            total, mem = total + best[0], mem + best[1]
        return total, mem

    cost, memory = [], []
    for _ in range(int(rng.integers(1, 16))):
        forms = int(rng.integers(1, 3))
        cs = [rng.integers(0, 4, int(rng.integers(1, 12))).astype(float) if seed % 2 else rng.random(int(rng.integers(1, 12)))
              for _ in range(forms)]
        ms = [rng.integers(0, 4, len(c)).astype(float) * 1e9 for c in cs]
        if forms == 2 and seed % 3 == 0:
            cs[1], ms[1] = cs[0].copy(), ms[0][::-1].copy()
        cs[0][0] = np.inf if seed % 7 == 0 else cs[0][0]  # a candidate that never wins
        cost.append(tuple(cs))
        memory.append(tuple(ms))
    forms = _Forms(cost, memory)
    for lam in (0.0, 1e-12, 1e-9, 0.5, 3.0):
        assert forms.value(lam) == loop(cost, memory, lam)
