"""One planning call's kernel times priced once (planner.problem.priced_once) change no number: the
pipeline search's every pair bound, its choice, cut, step and proven gap, and a plan over all the
devices, are those of the unwrapped compute model; and the ZeRO stages' order by the cheap memory
bound (planner.first_plan) gives the fastest stage's plan the other order gives."""

from __future__ import annotations

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import divisors
import planner.first_plan as first_plan_module
from planner.first_plan import _memory_binds, first_plan
from planner.pipeline.search import search_pipeline
from planner.problem.priced_once import PricedOnce, priced_once
from planner.problem.solve import Settings, make_plan
from planner.zero_choice import SHARDED_FIRST
from profiler import context

from tests.support.doubles.on_demand_stub import OnDemandStub
from tests.support.paths import ZOO
from tests.support.pipeline_summary import search_summary

SETTINGS = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="fp16"))


@pytest.mark.parametrize("name, zero, limit_gib", [("gpt-tiny", 0, 0.0025), ("tiny-moe", 1, 0.01),
                                                   ("tiny-llama", 3, 0.01)])
def test_the_pipeline_search_is_the_same_priced_once(name, zero, limit_gib):
    ctx = context.resolve(str(ZOO / f"{name}.yaml"), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    settings = SETTINGS.with_zero(zero)
    once = priced_once(ctx.compute)
    assert isinstance(once, PricedOnce)
    got = {}
    for label, compute in (("plain", ctx.compute), ("once", once), ("again", once)):  # again: all remembered
        got[label] = search_summary(search_pipeline(ctx.network, 8, 8, ctx.machine, compute, 2.0 ** 30 * limit_gib, settings,
                                              micro_counts=divisors(8), prove_s=None, schedule="auto"))
    assert got["once"] == got["plain"] and got["again"] == got["plain"]
    assert len(got["plain"][-1]) > 4  # several pairs bounded
    assert once.asked  # it did remember


def test_a_plan_of_the_whole_batch_is_the_same_priced_once():
    ctx = context.resolve(str(ZOO / "tiny-moe.yaml"), 16, 8, "dgx-h100", None, choices=TrainingChoices(precision="bf16"))
    once = priced_once(ctx.compute)
    plans = [make_plan(ctx.network, "tiny-moe", 16, 8, ctx.machine, c, None, SETTINGS.with_zero(z), machine_ref="dgx-h100",
                       profile_fingerprint=None, suggest=False)
             for z in (0, 1, 3) for c in (ctx.compute, once)]
    for plain, kept in zip(plans[::2], plans[1::2]):
        assert kept.step_s == plain.step_s
        assert kept.layers == plain.layers and kept.baselines == plain.baselines


def test_a_model_that_times_on_demand_is_not_wrapped():
    model = OnDemandStub()
    assert priced_once(model) is model
    once = priced_once(context.resolve(str(ZOO / "mlp.yaml"), 8, 8, "dgx-a100", None).compute)
    assert priced_once(once) is once


def test_zero_3_is_weighed_first_only_where_memory_binds_zero_1():
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), 8, 8, "dgx-h100", None, choices=TrainingChoices(precision="bf16"))
    one = SETTINGS.with_zero(1)
    assert not _memory_binds(ctx.network, 8, 8, ctx.machine, ctx.compute, 80 * 2.0 ** 30, one)
    assert _memory_binds(ctx.network, 8, 8, ctx.machine, ctx.compute, 0.12 * 2.0 ** 20, one)


def test_the_stage_order_gives_the_fastest_stage_either_way(monkeypatch):
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), 8, 8, "dgx-h100", None, choices=TrainingChoices(precision="bf16"))
    limit = 0.12 * 2.0 ** 20  # memory binds ZeRO-1 (its fastest layers alone: 0.128 MiB): ZeRO-3 first
    assert _memory_binds(ctx.network, 8, 8, ctx.machine, ctx.compute, limit, SETTINGS.with_zero(1))

    def plan(zero=None):
        settings = SETTINGS if zero is None else SETTINGS.with_zero(zero)
        a = first_plan(ctx.network, "tiny-llama", 8, 8, ctx.machine, ctx.compute, limit, settings,
                       machine_ref="dgx-h100", fingerprint=None, zero_given=zero is not None)
        return (a.pipeline.prediction.step_s if a.pipeline is not None else a.plan.step_s), a.settings.choices.zero

    # memory holds ZeRO-1 back to accumulating gradients over micro-batches, as here; ZeRO-2, whose
    # gradients are sharded, accumulates only by reducing them in every micro-batch, so ZeRO-1's
    # accumulation is the fastest: the second stage of the sharded-first order, the first of the other
    fastest = min(plan(z) for z in (0, 1, 2, 3))
    assert fastest[1] == 1 and SHARDED_FIRST.index(1) > 0
    sharded_first = plan()
    monkeypatch.setattr(first_plan_module, "_memory_binds", lambda *args: False)  # the order 1, 3, 0, 2
    assert sharded_first == plan() == fastest
