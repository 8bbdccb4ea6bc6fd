"""A shard is priced once per data-parallel replica (costmodel.parallel.shard.one_replica): a strategy
whose sample split moves nothing of its own prices the same shard, kernels, collectives, kept bytes
and workspace as the same strategy without that split over ``p / n`` ranks at ``batch / n``
samples; a split with collectives of its own (batch-norm statistics, a vocabulary-parallel loss)
keeps its strategy."""

from __future__ import annotations

import pytest

import costmodel.layer.cost as cost
from costmodel.choices.moe_dispatch import with_moe_dispatch
from costmodel.choices.training import TrainingChoices
from costmodel.comm.spans import pipeline_view
from costmodel.layer.candidates import MAX_CANDIDATES, MAX_MODEL_DEGREE, algorithms, candidate_strategies
from costmodel.parallel.axes import N
from costmodel.parallel.shard import one_replica
from costmodel.parallel.strategy import make_strategy
from planner.problem.build import signature
from profiler import context

from tests.support.paths import ZOO

CASES = [("tiny-llama", "bf16", "alltoall"), ("tiny-moe", "bf16", "alltoall"), ("tiny-moe", "bf16", "flex"),
         ("tiny-gqa", "bf16", "alltoall"), ("resnet18", "fp32", "alltoall")]


def _kept(layer, strategy, batch, domain=None, copies=()):
    return strategy, batch


@pytest.mark.parametrize("name,precision,dispatch", CASES)
def test_a_replica_prices_the_shard_its_strategy_prices(monkeypatch, name, precision, dispatch):
    p, batch = 64, 128
    ctx = context.resolve(str(ZOO / f"{name}.yaml"), batch, p, "dgx-h100", None,
                          choices=TrainingChoices(precision=precision))
    net = with_moe_dispatch(ctx.network, dispatch) if dispatch != "alltoall" else ctx.network
    cases = []
    for layer in net.layers:
        sig = signature(layer)
        for strat in candidate_strategies(sig, p, batch, MAX_MODEL_DEGREE, MAX_CANDIDATES):
            for algorithm in algorithms(sig, True, ctx.machine)[:2]:
                cases.append((sig, strat, cost.resolve_algorithm(sig, algorithm, ctx.machine)))
    reduced = 0
    for sig, strat, algorithm in cases:
        replica, samples = one_replica(sig, strat, batch)
        if replica != strat:
            reduced += 1
            assert replica.degree(N) == 1 and replica.p * strat.degree(N) == p and samples * strat.degree(N) == batch
        got = cost._sharded(sig, strat, batch, ctx.machine, ctx.compute, algorithm, "mpi", 2, True, None)
        with monkeypatch.context() as m:
            m.setattr(cost, "one_replica", _kept)  # as _sharded looks it up
            whole = cost._sharded(sig, strat, batch, ctx.machine, ctx.compute, algorithm, "mpi", 2, True, None)
        assert got == whole, (sig.name, sig.op, strat.label, algorithm)
    assert reduced > len(cases) // 4  # most candidates split the samples


def test_replicas_that_lie_across_link_domains_unlike_the_first_keep_their_strategy(monkeypatch):
    """GB200 NVL72 (72-GPU domains), 144 ranks as 9 replicas of 16: replica 4 (ranks 64-79) crosses
    domains 0 and 1, so a replica's shard is not every replica's; the strategy is kept, and the price
    is the whole strategy's, its tensor groups the slowest. 8 replicas of 18 (dividing 72) reduce."""
    p, batch = 144, 144
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), batch, p, "gb200-nvl72", None,
                          choices=TrainingChoices(precision="bf16"))
    sig = signature(next(layer for layer in ctx.network.layers if layer.op == "linear"))
    for degrees, reduces in (((("N", 9), ("F", 16)), False), ((("N", 8), ("F", 18)), True)):
        strat = make_strategy(p, dict(degrees))
        replica, _ = one_replica(sig, strat, batch, ctx.machine.domain_size)
        assert (replica != strat) == reduces, degrees
        got = cost._sharded(sig, strat, batch, ctx.machine, ctx.compute, "gemm", "mpi", 2, True, None)
        with monkeypatch.context() as m:
            m.setattr(cost, "one_replica", _kept)
            whole = cost._sharded(sig, strat, batch, ctx.machine, ctx.compute, "gemm", "mpi", 2, True, None)
        assert got == whole, degrees


@pytest.mark.parametrize("op,name", [("batchnorm2d", "resnet18"), ("softmax_cross_entropy", "tiny-llama")])
def test_a_sample_split_with_collectives_of_its_own_keeps_its_strategy(op, name):
    ctx = context.resolve(str(ZOO / f"{name}.yaml"), 128, 64, "dgx-h100", None,
                          choices=TrainingChoices(precision="fp32"))
    sig = signature(next(layer for layer in ctx.network.layers if layer.op == op))
    split = [s for s in candidate_strategies(sig, 64, 128, MAX_MODEL_DEGREE, MAX_CANDIDATES) if s.degree(N) > 1]
    assert split
    for strat in split:
        assert one_replica(sig, strat, 128) == (strat, 128)


def test_a_stage_whose_replicas_lie_unlike_in_later_stages_keeps_its_strategy(monkeypatch):
    """Eight pipeline stages of 32 GB200s (72-GPU domains): under the view a stage is priced on
    (costmodel.comm.spans.pipeline_view), 2 replicas of 16 ranks lie across racks in stage 2 (ranks
    64-95), so the strategy is kept; 8 replicas of 4 sit inside one domain in every stage and reduce.
    Either way the price is the whole strategy's."""
    p, batch = 32, 32
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), batch, p, "gb200-nvl72", None,
                          choices=TrainingChoices(precision="bf16"))
    view = pipeline_view(ctx.machine, p * 8, 8)
    sig = signature(next(layer for layer in ctx.network.layers if layer.op == "linear"))
    for degrees, reduces in (((("N", 2), ("F", 16)), False), ((("N", 8), ("F", 4)), True)):
        strat = make_strategy(p, dict(degrees))
        replica, _ = one_replica(sig, strat, batch, view.domain_size, view.copies)
        assert (replica != strat) == reduces, degrees
        assert one_replica(sig, strat, batch, view.domain_size)[0] != strat  # stage 0 alone reduces both
        got = cost._sharded(sig, strat, batch, view, ctx.compute, "gemm", "mpi", 2, True, None)
        with monkeypatch.context() as m:
            m.setattr(cost, "one_replica", _kept)
            whole = cost._sharded(sig, strat, batch, view, ctx.compute, "gemm", "mpi", 2, True, None)
        assert got == whole, degrees
