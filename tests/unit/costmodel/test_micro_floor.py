"""A layer's per-micro-batch floor (costmodel.layer.cost.micro_floor_s) is below its per-micro-batch
seconds (``total_s`` less the gradient sync and update) under every optimiser and ZeRO stage, PyTorch
FSDP's kernels and gradients reduced every micro-batch included, in every overlap mode and at a
framework's overlap efficiency below one; it equals them where the weights add nothing to the
passes (ZeRO-0 with no overlap); and the node floor the pipeline bound starts from
(planner.problem.build.Builder.micro_floor) is below every candidate of that node under every ZeRO
stage."""

from __future__ import annotations

import pytest

from costmodel.choices.optimizer import Optimizer
from costmodel.choices.training import TrainingChoices
from costmodel.comm.overlap import Overlap
from costmodel.layer.candidates import MAX_CANDIDATES, MAX_MODEL_DEGREE, algorithms, candidate_strategies
from costmodel.layer.cost import layer_estimate, micro_floor_s
from planner.problem.build import Builder, node_keys, node_of
from planner.problem.priced_layers import PricedLayers
from planner.problem.build import signature
from profiler import context

from tests.support.paths import ZOO

OPTIMIZERS = [Optimizer("adam", zero) for zero in (0, 1, 2, 3)] + [
    Optimizer("adam", 3, reduce_bytes=4, reduce_each_micro=True, torch_fsdp=True),
    Optimizer("adam", 2, reduce_each_micro=True)]
OVERLAPS = [Overlap("none"), Overlap("data"), Overlap("all", experts=True),
            Overlap("all", efficiency=(("data", 0.6), ("tensor", 0.5), ("experts", 0.7)))]


def _micro_s(est) -> float:
    return est.total_s - est.grad_sync_s - est.update_s


#: the two sums add the same terms in other orders (rounding only)
RTOL = 1e-9


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
def test_no_optimiser_prices_a_layer_below_its_floor_and_zero_0_without_overlap_meets_it(name):
    ctx = context.resolve(str(ZOO / f"{name}.yaml"), 16, 16, "dgx-h100", None,
                          choices=TrainingChoices(precision="bf16"))
    memo: dict = {}
    checked, met = 0, 0
    for layer in ctx.network.layers:
        sig = signature(layer)
        for strat in candidate_strategies(sig, 16, 4, MAX_MODEL_DEGREE, MAX_CANDIDATES)[:12]:
            for algorithm in algorithms(sig, True, ctx.machine):
                for overlap in OVERLAPS:
                    for front in (False, True):
                        floor = micro_floor_s(sig, strat, 4, ctx.machine, ctx.compute, algorithm, "mpi", 2, True,
                                              overlap, front, memo)
                        for opt in OPTIMIZERS:
                            est = layer_estimate(sig, strat, 4, ctx.machine, ctx.compute, algorithm, opt, "mpi", 2,
                                                 True, overlap, front, memo=memo)
                            assert floor <= _micro_s(est) * (1 + RTOL), (layer.name, strat, algorithm, overlap, opt)
                            checked += 1
                            if opt.zero == 0 and overlap.mode == "none":
                                assert floor == pytest.approx(_micro_s(est), rel=RTOL)
                                met += 1
    assert checked > 2000 and met > 100


def test_the_node_floor_is_below_every_candidate_under_every_zero_stage():
    ctx = context.resolve(str(ZOO / "tiny-llama.yaml"), 16, 16, "dgx-h100", None,
                          choices=TrainingChoices(precision="bf16"))
    priced = PricedLayers()
    builders = [Builder(4, 16, ctx.machine, ctx.compute, opt, recompute=True, overlap="all", priced=priced)
                for opt in OPTIMIZERS]
    keys = node_keys(builders[0], ctx.network)
    tight = 0
    for key in dict.fromkeys(keys):
        floor = builders[0].micro_floor(key)
        least = []
        for b in builders:
            assert b.micro_floor(key) == floor  # one floor whatever the ZeRO stage
            vals = node_of(b, key).vals
            least.append(float((vals[:, 0] - vals[:, 3]).min()))
        assert floor <= min(least) * (1 + RTOL), key[0].name
        tight += floor == pytest.approx(min(least), rel=1e-9)
    assert len(priced.floors) == len(dict.fromkeys(keys)) and tight >= 1
