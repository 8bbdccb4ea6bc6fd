"""Attention's per-head query/key norms (``qk_norm``: Qwen3, OLMo 2): weights, counts by hand, the
head split's gradient sum and the kernels they are priced on (networks/ops/attention.py)."""

from __future__ import annotations

from costmodel.calls.layer_calls import kernel_calls, PASSES
from costmodel.compute.roofline import local_cost
from costmodel.parallel.shard import local_layer
from costmodel.parallel.strategy import make_strategy
from costmodel.comm.weight_sync import grad_dims
from networks.analysis import layer_splits
from networks.spec import parse_network

S, D = 6, 16  # 6 tokens of width 16; 4 query heads and 2 key/value heads of 8 (Dq 32, Dkv 16)


def _attn(qk_norm: bool):
    text = "\n".join(["name: tiny", "inputs:", f"  x: {{shape: [{S}, {D}]}}", "layers:",
                      f"  - {{name: attn, op: attention, heads: 4, kv_heads: 2, head_dim: 8, bias: false, "
                      f"rotary: true, qk_norm: {str(qk_norm).lower()}}}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return parse_network(text, "<tiny>").layer("attn")


def test_two_scales_of_one_head_width():
    plain, normed = _attn(False), _attn(True)
    assert dict(normed.weights) == dict(plain.weights) | {"q_norm": (8,), "k_norm": (8,)}


def test_four_operations_an_element_forward_eight_backward_and_their_inputs_kept():
    plain, normed = _attn(False), _attn(True)
    for degrees, heads, kv in (({}, 4, 2), ({"F": 2}, 2, 1)):  # a head split normalises only its heads
        s = make_strategy(max(1, sum(degrees.values())), degrees)
        a, b = (local_cost(local_layer(x, s, 3)) for x in (plain, normed))
        rows = 3 * S
        qk = rows * (heads + kv) * 8  # q and k elements of the local heads
        assert [y - x for x, y in zip(a.flops, b.flops)] == [4 * qk, 8 * qk, 0]
        assert b.activation_bytes - a.activation_bytes == qk * 4 + rows * (heads + kv) * 4  # fp32 network
        assert a.macs == b.macs


def test_a_head_split_keeps_the_scales_whole_and_sums_their_gradients():
    normed = _attn(True)
    local = local_layer(normed, make_strategy(2, {"F": 2}), 3)
    w = dict(local.weight_shapes)
    assert w["q_norm"] == (8,) and w["k_norm"] == (8,) and w["q_weight"] == (16, D)
    sums = grad_dims(normed, [("F", layer_splits(normed)["F"])])
    assert sums["q_norm"] == sums["k_norm"] == ("F",) and sums["q_weight"] == ()


def test_priced_on_the_layernorm_kernels_over_each_head():
    plain, normed = _attn(False), _attn(True)
    s = make_strategy(2, {"F": 2})
    a = [kernel_calls(local_layer(plain, s, 3), p) for p in PASSES]
    b = [kernel_calls(local_layer(normed, s, 3), p) for p in PASSES]
    heads = parse_network("\n".join(["name: n", "inputs:", f"  x: {{shape: [{S * 3}, 8]}}", "layers:",
                                     "  - {name: n, op: layernorm}", "  - {name: fc, op: linear, features: 5}",
                                     "  - {name: loss, op: softmax_cross_entropy}"]), "<n>").layer("n")
    ln_fwd, ln_bwd, _ = (kernel_calls(local_layer(heads, make_strategy(1, {}), 3), p) for p in PASSES)
    # 3 samples x 6 tokens x 3 local heads (2 query, 1 key) = 54 rows of 8, as the layer-norm kernel's
    assert list(b[0]) == [*a[0][:2], *ln_fwd, *a[0][2:]]
    assert list(b[1]) == [*a[1][:2], *ln_bwd, *a[1][2:]]
    assert b[2] == a[2]
