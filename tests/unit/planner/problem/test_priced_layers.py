"""One planning call's layers and collectives priced once (planner.problem.priced_layers) change no
number: every layer estimate under every ZeRO stage and micro-batch, with one memo shared by all,
is the one priced afresh; the pipeline search's every pair bound, its choice, cut, step and proven
gap are those of a search with none kept, for each ZeRO stage in turn on one memo (as the ZeRO
choice runs them); and a worker starts with none kept."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from costmodel.choices.optimizer import Optimizer
from costmodel.choices.training import TrainingChoices
from costmodel.layer.candidates import MAX_CANDIDATES, MAX_MODEL_DEGREE, candidate_strategies, divisors
from costmodel.layer.cost import layer_estimate
from planner.pipeline.search import search_pipeline
from planner.problem.build import Builder, build_with, signature
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
    assert priced.estimates and priced.collectives and priced.matrices and priced.floors


def test_the_zero_stages_builders_share_the_edge_matrices_they_would_price_alike():
    """Reshards depend on the layouts, not the optimiser: the builders of every ZeRO stage at one
    batch and ranks share one planning call's edge matrices, so a later ZeRO stage prices only the
    patterns whose candidates it keeps otherwise (ZeRO-1 and 2 none here), and each problem's edges
    are those a builder with none kept prices."""
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), 8, 8, "dgx-h100", None,
                          choices=TrainingChoices(precision="bf16"))
    priced = PricedLayers()
    shared = [Builder(4, 8, ctx.machine, ctx.compute, Optimizer("adam", zero), priced=priced) for zero in (0, 1, 2, 3)]
    assert all(b.matrices is shared[0].matrices for b in shared)
    for zero, builder in zip((0, 1, 2, 3), shared):
        got = build_with(builder, ctx.network, None)
        fresh = build_with(Builder(4, 8, ctx.machine, ctx.compute, Optimizer("adam", zero)), ctx.network, None)
        assert fresh.reshard_pairs > 0
        if zero == 0:
            assert got.reshard_pairs == fresh.reshard_pairs  # the first prices them
        else:
            assert got.reshard_pairs < fresh.reshard_pairs and (got.reshard_pairs == 0 or zero == 3)
        assert len(got.problem.edges) == len(fresh.problem.edges) > 0
        for a, b in zip(got.problem.edges, fresh.problem.edges):
            assert (a.src, a.dst) == (b.src, b.dst) and np.array_equal(a.cost, b.cost)
    other = Builder(2, 8, ctx.machine, ctx.compute, Optimizer("adam", 0), priced=priced)
    assert other.matrices is not shared[0].matrices  # another micro-batch: its own reshards


def test_a_worker_starts_with_nothing_kept():
    priced = PricedLayers()
    priced.collectives[("allreduce", 8, 1, 2, "mpi", False)] = 1.0
    priced.estimates[("x",)] = [(1.0, 0.0, 0.0, 0.0, 0.0)]
    back = pickle.loads(pickle.dumps(priced))
    assert isinstance(back, PricedLayers) and not back.collectives and not back.estimates
