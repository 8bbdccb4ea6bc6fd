"""One planning call's layers and collectives priced once (planner.problem.priced_layers) change no
number: every layer estimate under every ZeRO stage and micro-batch, with one memo shared by all,
is the one priced afresh; the pipeline search's every pair bound, its choice, cut, step and proven
gap are those of a search with none kept, for each ZeRO stage in turn on one memo (as the ZeRO
choice runs them); and a worker starts with none kept."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from costmodel.choices.optimizer import Optimizer
from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import MAX_CANDIDATES, MAX_MODEL_DEGREE, candidate_strategies, divisors
from costmodel.layer.cost import layer_estimate
from planner.pipeline.search import search_pipeline
from planner.problem.build import signature
from planner.problem.priced_layers import PricedLayers
from planner.problem.priced_once import priced_once
from planner.problem.solve import Settings
from profiler import context

from tests.support.paths import ZOO
from tests.support.pipeline_summary import search_summary

SETTINGS = Settings(gap=0.0, choices=TrainingChoices(optimizer="adam", precision="fp16"))


def test_every_layer_estimate_is_the_same_with_one_memo_over_zero_stages_and_batches():
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), 16, 16, "dgx-h100", None,
                          choices=TrainingChoices(precision="bf16"))
    memo: dict = {}
    asked = 0
    for layer in ctx.network.layers:
        sig = signature(layer)
        for batch in (2, 4, 16):
            for strat in candidate_strategies(sig, 16, batch, MAX_MODEL_DEGREE, MAX_CANDIDATES):
                for zero in (0, 1, 2, 3):
                    opt = Optimizer("adam", zero)
                    for consumers, saved in ((1, True), (2, False)):
                        kept = layer_estimate(sig, strat, batch, ctx.machine, ctx.compute, "", opt,
                                              consumers=consumers, output_saved=saved, memo=memo)
                        fresh = layer_estimate(sig, strat, batch, ctx.machine, ctx.compute, "", opt,
                                               consumers=consumers, output_saved=saved)
                        assert kept == fresh, (layer.name, strat, batch, zero)
                        asked += 1
    assert asked > 500 and memo  # many estimates, and the memo did keep what they share
    assert any(key[0] == "shard" for key in memo if isinstance(key[0], str))


@pytest.mark.parametrize("name, limit_gib", [("gpt-tiny", 0.0025), ("tiny-moe", 0.01), ("tiny-llama", 0.01)])
def test_the_pipeline_search_is_the_same_with_layers_priced_once(name, limit_gib):
    ctx = context.resolve(str(ZOO / f"{name}.yaml"), 8, 8, "dgx-a100", None, choices=TrainingChoices(precision="fp16"))
    compute = priced_once(ctx.compute)
    priced = PricedLayers()
    for zero in (0, 1, 3):  # one memo over the ZeRO stages, as planner.first_plan shares it
        got = [search_summary(search_pipeline(ctx.network, 8, 8, ctx.machine, compute, 2.0 ** 30 * limit_gib,
                                        dataclasses.replace(SETTINGS.with_zero(zero), priced=kept),
                                        micro_counts=divisors(8), prove_s=None, schedule="auto"))
               for kept in (None, priced)]
        assert got[1] == got[0], zero
        assert len(got[0][-1]) > 4  # several pairs bounded
    assert priced.estimates and priced.collectives


def test_a_worker_starts_with_nothing_kept():
    priced = PricedLayers()
    priced.collectives[("allreduce", 8, 1, 2, "mpi", False)] = 1.0
    priced.estimates[("x",)] = [(1.0, 0.0, 0.0, 0.0, 0.0)]
    back = pickle.loads(pickle.dumps(priced))
    assert isinstance(back, PricedLayers) and not back.collectives and not back.estimates
