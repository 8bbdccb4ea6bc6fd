"""Megatron-LM's sequence parallelism (Korthikanti et al. 2022, section 4.2.2) as the ``SP`` variant
of a tensor-parallel split: the row-parallel reduction is a reduce-scatter into sequence shards,
the column-parallel input an all-gather from them (costmodel.parallel.shard.sequence_scatter,
costmodel.comm.tensor), and the planner weighs it like any other candidate."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from costmodel.layer.candidates import candidate_strategies
from costmodel.comm.collectives import allreduce_s, reduce_scatter_s
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.layer.edge import edge_estimate
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import check_fits, local_layer, output_layout
from costmodel.parallel.layout import max_block_extents
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy, parse_degrees
from networks.loader import load_network
from planner.problem.solve import make_plan
from planner.plan.plan_file import plan_from_dict, plan_to_dict

A100 = load_machine("dgx-a100")
T, BATCH, SEQ, WIDTH = 4, 4, 1024, 768  # gpt2 on one node: 4-way tensor groups, 2-way data parallel


@pytest.fixture(scope="module")
def gpt2():
    net = load_network("gpt2")
    return net, {layer.name: layer for layer in net.layers}


def _fwd_bwd(est):
    return {(c.purpose, c.phase, c.collective): c for c in est.comms if c.phase != "sync"}


def test_row_parallel_reduction_is_a_reduce_scatter_cheaper_than_the_allreduce(gpt2):
    _, layers = gpt2
    proj, drop = layers["h0.proj"], layers["h0.mlp_drop"]
    plain, sp = make_strategy(8, {"N": 2, "C": T}), make_strategy(8, {"N": 2, "C": T, "SP": 1})
    n = BATCH // 2 * SEQ * WIDTH * 4  # the local output, fp32: what the all-reduce summed
    old, new = (_fwd_bwd(layer_estimate(proj, s, BATCH, A100, Roofline(A100))) for s in (plain, sp))
    assert set(old) == {("partial_sum", "fwd", "allreduce")}
    assert set(new) == {("partial_sum", "fwd", "reduce_scatter"), ("output_grad", "bwd", "allgather")}
    rs = new[("partial_sum", "fwd", "reduce_scatter")]
    assert (rs.nbytes, rs.group) == (n, T)
    link = A100.link_for_collective("reduce_scatter", n, cold=True)  # inside one DGX node: NVLink
    assert rs.seconds == pytest.approx(reduce_scatter_s(n, T, link))
    # the formula, ring or recursive halving: at least (t-1)/t n over the link's bandwidth
    floor = (T - 1) / T * n * link.beta_s_per_byte
    assert floor < rs.seconds < old[("partial_sum", "fwd", "allreduce")].seconds
    assert old[("partial_sum", "fwd", "allreduce")].seconds == pytest.approx(
        allreduce_s(n, T, A100.link_for_collective("allreduce", n, cold=True)))
    # the output leaves in sequence shards over the tensor group, so the sequence-split dropout
    # after it takes it as it is; the plain split all-reduces, then slices (free) and gathers back
    assert max_block_extents(output_layout(proj, sp, BATCH)) == (BATCH // 2, SEQ // T, WIDTH)
    assert local_layer(proj, sp, BATCH) == local_layer(proj, plain, BATCH)  # the same GEMMs
    consumer = make_strategy(8, {"N": 2, "H": T})
    free = edge_estimate(proj, sp, drop, consumer, 0, BATCH, A100)
    assert free.fwd_s == free.bwd_s == 0
    old_edge = edge_estimate(proj, plain, drop, consumer, 0, BATCH, A100)
    assert old_edge.fwd_s == 0 and old_edge.bwd_s > 0
    total_old = sum(c.seconds for c in old.values()) + old_edge.bwd_s
    assert sum(c.seconds for c in new.values()) < total_old


def test_column_parallel_input_is_gathered_and_its_gradient_reduce_scattered(gpt2):
    _, layers = gpt2
    fc, ln = layers["h0.fc"], layers["h0.ln2"]
    sp = make_strategy(8, {"N": 2, "F": T, "SP": 1})
    comms = _fwd_bwd(layer_estimate(fc, sp, BATCH, A100, Roofline(A100)))
    n = BATCH // 2 * SEQ * WIDTH * 4
    assert {k: (c.nbytes, c.group) for k, c in comms.items()} == {
        ("input_gather", "fwd", "allgather"): (n, T), ("input_grad", "bwd", "reduce_scatter"): (n, T)}
    edge = edge_estimate(ln, make_strategy(8, {"N": 2, "H": T}), fc, sp, 0, BATCH, A100)
    assert edge.fwd_s == edge.bwd_s == 0


def test_the_variant_needs_one_tensor_dimension_and_a_sequence(gpt2):
    _, layers = gpt2
    assert check_fits(layers["h0.attn"], make_strategy(8, {"N": 2, "F": T, "SP": 1}), BATCH) is None
    assert "SP" in check_fits(layers["h0.ln1"], make_strategy(8, {"N": 2, "H": T, "SP": 1}), BATCH)
    assert "SP" in check_fits(layers["h0.fc"], make_strategy(8, {"N": 2, "SP": 1}), BATCH)
    assert "SP" in check_fits(layers["loss"], make_strategy(8, {"N": 2, "C": T, "SP": 1}), BATCH)
    assert parse_degrees("N=2,C=4,SP", 8) == make_strategy(8, {"N": 2, "C": 4, "SP": 1})
    assert make_strategy(8, {"N": 2, "C": 4, "SP": 1}).label == "N=2,C=4,SP"
    twins = [s for s in candidate_strategies(layers["h0.proj"], 8, BATCH) if s.seq_scatter]
    assert twins and all(replace(s, seq_scatter=False) in candidate_strategies(layers["h0.proj"], 8, BATCH)
                         for s in twins)
    assert not any(s.seq_scatter for s in candidate_strategies(layers["h0.gelu"], 8, BATCH))


def test_the_planner_picks_the_reduce_scatter_and_the_plan_file_keeps_it():
    net = with_precision(load_network("gpt2"), "fp16")
    # with the gradient reduction overlapped with backward (the GPU machines' default,
    # costmodel.comm.overlap) data parallelism is fastest where it fits (1.69 GiB a device): under a
    # 1.5 GiB limit the planner splits the blocks, and takes the reduce-scatter variant
    plan = make_plan(net, "gpt2", 8, 8, A100, Roofline(A100), memory_limit_bytes=1.5 * 2 ** 30, with_baselines=False)
    picked = Counter(lp.strategy.label for lp in plan.layers if lp.strategy.seq_scatter)
    assert picked and all(label.endswith(",SP") for label in picked)
    again, _ = plan_from_dict(plan_to_dict(plan), "plan.yaml", check=False)
    assert again.strategies() == plan.strategies()
