"""Attention as current models have it: grouped-query attention (``kv_heads``), a head width of
its own (``head_dim``), query/key/value biases apart from the output's (``qkv_bias``), and the
tensor-parallel split of heads that keeps whole key/value groups on a rank (replicating them above
``kv_heads``). Counts by hand from the projections' shapes (networks/ops/attention.py)."""

from __future__ import annotations

import pytest

from costmodel.layer.candidates import candidate_strategies
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.machine.loading import load_machine
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import check_fits, local_layer, weight_layouts
from costmodel.parallel.layout import block
from costmodel.parallel.strategy import make_strategy
from networks.analysis import summarize
from networks.errors import DnnplanError
from networks.spec import parse_network

A100 = load_machine("dgx-a100")


def _net(attention: str, seq: int = 16, width: int = 64):
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{seq}, {width}]}}", "layers:",
                      f"  - {{name: attn, op: attention, {attention}}}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return parse_network(text, "<t>")


def test_grouped_query_parameters_and_macs_by_hand():
    s, d, h, kv, dh = 16, 64, 8, 2, 16
    layer = _net(f"heads: {h}, kv_heads: {kv}, head_dim: {dh}, causal: true").layer("attn")
    dq, dkv = h * dh, kv * dh
    assert dict(layer.weights) == {"q_weight": (dq, d), "kv_weight": (2, dkv, d), "out_weight": (d, dq),
                                   "q_bias": (dq,), "kv_bias": (2, dkv), "out_bias": (d,)}
    assert layer.num_params == d * dq + 2 * dkv * d + dq * d + dq + 2 * dkv + d
    cost = local_cost(local_layer(layer, make_strategy(1, {}), 3))
    proj = 3 * s * (d * (dq + 2 * dkv) + dq * d)  # q, k, v in; out
    core = 2 * 3 * h * s * s * dh  # scores and weighted sum, per query head
    assert cost.macs == proj + core
    assert cost.flops[0] == 2 * (proj + core) + 5 * 3 * h * s * s + 3 * s * (dq + 2 * dkv + d)
    # kept: q, k, v (their own widths), the heads' output, the probabilities
    assert cost.activation_bytes == 4 * 3 * s * (2 * dq + 2 * dkv) + 4 * 3 * h * s * s


def test_multi_head_attention_keeps_the_fused_layout_the_executor_reads():
    layer = _net("heads: 4").layer("attn")
    assert dict(layer.weights) == {"qkv_weight": (3, 64, 64), "out_weight": (64, 64), "qkv_bias": (3, 64),
                                   "out_bias": (64,)}
    assert layer.num_params == 4 * 64 * 64 + 4 * 64
    same = _net("heads: 4, kv_heads: 4, head_dim: 16, qkv_bias: true").layer("attn")
    assert same.weights == layer.weights


def test_gemma_head_width_and_qwen2_biases():
    # Gemma-7B: 16 heads of 256 on a width of 3072 (HF config: hidden_size 3072, head_dim 256, no biases)
    gemma = _net("heads: 16, head_dim: 256, bias: false", seq=8, width=3072).layer("attn")
    assert dict(gemma.weights) == {"qkv_weight": (3, 4096, 3072), "out_weight": (3072, 4096)}
    assert gemma.num_params == 4 * 3072 * 4096
    assert summarize(_net("heads: 16, head_dim: 256, bias: false", 8, 3072), 1).layers[0][1].macs == \
        8 * 3072 * 4096 * 4 + 2 * 16 * 8 * 8 * 256
    # Qwen2: biases on q, k and v, none on the output projection
    qwen = _net("heads: 8, kv_heads: 2, bias: false, qkv_bias: true").layer("attn")
    assert {n for n, _ in qwen.weights} == {"q_weight", "kv_weight", "out_weight", "q_bias", "kv_bias"}


@pytest.mark.parametrize("attention, field", [("heads: 8, kv_heads: 3", "kv_heads"),
                                              ("heads: 6", "heads")])
def test_impossible_head_shapes_are_one_line_naming_the_field(attention, field):
    with pytest.raises(DnnplanError) as err:
        _net(attention)
    assert f"field '{field}'" in str(err.value) and "layer 'attn'" in str(err.value)


def test_the_head_split_keeps_whole_key_value_groups_on_a_rank():
    layer = _net("heads: 8, kv_heads: 2, head_dim: 16").layer("attn")
    two = make_strategy(2, {"F": 2})
    local = local_layer(layer, two, 4)
    assert (local.p["heads"], local.p["kv_heads"]) == (4, 1)  # query heads 0-3 read key/value head 0
    kv = weight_layouts(layer, two)["kv_weight"]
    assert [block(kv, r)[1] for r in range(2)] == [(0, 16), (16, 32)]
    q = weight_layouts(layer, two)["q_weight"]
    assert [block(q, r)[0] for r in range(2)] == [(0, 64), (64, 128)]


def test_above_kv_heads_each_group_is_replicated_and_its_gradient_summed_over_its_replicas():
    layer = _net("heads: 8, kv_heads: 2, head_dim: 16").layer("attn")
    eight = make_strategy(8, {"F": 8})
    kv = weight_layouts(layer, eight)["kv_weight"]
    assert [block(kv, r)[1] for r in range(8)] == [(0, 16)] * 4 + [(16, 32)] * 4
    local = local_layer(layer, eight, 4)
    assert (local.p["heads"], local.p["kv_heads"]) == (1, 1)
    est = layer_estimate(layer, eight, 4, A100, Roofline(A100))
    sums = [c for c in est.comms if c.purpose == "grad_sync"]
    # one allreduce of the local key/value weight and bias over the 4 ranks holding the same group
    # (and, as without groups, the output bias's over the 8 ranks: only one of them adds it)
    assert [(c.group, c.nbytes) for c in sums] == [(8, 64 * 4), (4, (2 * 16 * 64 + 2 * 16) * 4)]
    # 6 ranks over 12 heads and 4 groups: neither whole groups nor whole replicas
    wide = _net("heads: 12, kv_heads: 4, head_dim: 16").layer("attn")
    assert "4 groups of kv_weight" in check_fits(wide, make_strategy(6, {"F": 6}), 4)
    assert check_fits(wide, make_strategy(4, {"F": 4}), 4) is None
    assert check_fits(wide, make_strategy(12, {"F": 12}), 4) is None
    assert {s.degree("F") for s in candidate_strategies(wide, 12, 12)} == {1, 2, 4, 12}  # not 3 or 6
