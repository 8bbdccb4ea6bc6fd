"""Sequence parallelism inside context parallelism, as Megatron-Core runs them together: the
sequence split ``c`` ways by context, each context rank's ``S / c`` positions split ``t`` ways over
the tensor group for the norms, and SP's all-gather and reduce-scatter on those local positions
(costmodel.frameworks.megatron, costmodel.parallel.shard.sequence_scatter, costmodel.parallel.strategy.composite)."""

from __future__ import annotations

import numpy as np
import pytest

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.layer.edge import edge_estimate
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import input_layout, output_layout
from costmodel.parallel.layout import block, max_block_extents, reshard_peaks
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.precision import with_precision
from costmodel.layer.edge_table import reshard_maxima
from costmodel.parallel.strategy import make_strategy
from networks.spec import parse_network

H100 = load_machine("dgx-h100")
SEQ, WIDTH, FFN, P, T, C, BATCH = 4096, 1024, 4096, 32, 4, 4, 2  # data 2


def _block_net():
    spec = (f"name: tiny\ninputs:\n  x: {{shape: [{SEQ}, {WIDTH}], dtype: float32}}\nlayers:\n"
            "  - {name: norm1, op: rmsnorm, inputs: x}\n"
            "  - {name: attn, op: attention, heads: 16, kv_heads: 4, head_dim: 64, causal: true, bias: false}\n"
            "  - {name: add1, op: add, inputs: [x, attn]}\n"
            "  - {name: norm2, op: rmsnorm}\n"
            f"  - {{name: fc1, op: linear, features: {FFN}, bias: false}}\n"
            "  - {name: act, op: gelu}\n"
            f"  - {{name: fc2, op: linear, features: {WIDTH}, bias: false}}\n"
            "  - {name: add2, op: add, inputs: [add1, fc2]}\n")
    return with_precision(parse_network(spec, "tiny"), "bf16")


@pytest.fixture(scope="module")
def net_and_strategies():
    net = _block_net()
    strategies, fallbacks = megatron_strategies(net, P, BATCH, T, True, context=C)
    assert not fallbacks
    return net, {layer.name: layer for layer in net.layers}, strategies


def test_the_norms_split_the_local_sequence_over_the_tensor_group(net_and_strategies):
    _, _, s = net_and_strategies
    assert s["norm1"].degree("H") == s["norm2"].degree("H") == C * T
    for name in ("attn", "fc1", "fc2"):
        assert s[name].seq_scatter and s[name].degree("H") == C
    assert s["fc1"].degree("F") == s["fc2"].degree("C") == T


def test_composite_coordinates_are_the_norms_blocks():
    """A rank's H*F coordinate (h t + f) is its coordinate in a layer that splits H = c t alone."""
    inner = make_strategy(P, {"N": 2, "H": C, "F": T})
    alone = make_strategy(P, {"N": 2, "H": C * T})
    assert np.array_equal(inner.coords_all("H*F"), alone.coords_all("H"))
    assert [inner.coord(r, "H*F") for r in range(P)] == list(alone.coords_all("H"))
    with pytest.raises(ValueError):  # something split between the two: not one digit pair
        make_strategy(P, {"H": 2, "C": 2, "F": 2}).coords_all("H*F")


def test_sp_collectives_move_the_local_sequence_over_the_tensor_group(net_and_strategies):
    _, layers, s = net_and_strategies
    local = BATCH // 2 * SEQ // C * WIDTH * 2  # one data rank's samples, one context rank's positions, bf16
    for name, expected in (("fc1", {("input_gather", "fwd", "allgather"), ("input_grad", "bwd", "reduce_scatter")}),
                           ("fc2", {("partial_sum", "fwd", "reduce_scatter"), ("output_grad", "bwd", "allgather")})):
        est = layer_estimate(layers[name], s[name], BATCH, H100, Roofline(H100))
        comms = {(c.purpose, c.phase, c.collective): c for c in est.comms if c.phase != "sync"}
        assert set(comms) == expected
        for c in comms.values():
            assert (c.nbytes, c.group) == (local, T)  # not the whole sequence, not the c t ranks


def test_the_norm_feeds_the_column_parallel_layer_without_a_reshard(net_and_strategies):
    _, layers, s = net_and_strategies
    norm_out = output_layout(layers["norm2"], s["norm2"], BATCH)
    fc1_in = input_layout(layers["fc1"], s["fc1"], BATCH, 0)
    for r in range(P):
        assert block(norm_out, r) == block(fc1_in, r)
    assert reshard_peaks(norm_out, fc1_in)[0] == 0
    assert reshard_maxima([(norm_out, fc1_in)])[0][0] == 0  # the vectorised table agrees
    edge = edge_estimate(layers["norm2"], s["norm2"], layers["fc1"], s["fc1"], 0, BATCH, H100)
    assert edge.fwd_s == edge.bwd_s == 0
    fc2_out = output_layout(layers["fc2"], s["fc2"], BATCH)
    assert max_block_extents(fc2_out) == (BATCH // 2, SEQ // (C * T), WIDTH)
    # the plain layout (the all-gathered input) would move: the composite is what makes it free
    assert reshard_peaks(norm_out, input_layout(layers["fc1"], s["fc1"].plain, BATCH, 0))[0] > 0


def test_a_norm_holds_its_share_of_the_local_sequence(net_and_strategies):
    _, layers, s = net_and_strategies
    est = layer_estimate(layers["norm1"], s["norm1"], BATCH, H100, Roofline(H100))
    replicated = make_strategy(P, {"N": 2, "H": C})
    old = layer_estimate(layers["norm1"], replicated, BATCH, H100, Roofline(H100))
    shard = BATCH // 2 * SEQ // (C * T) * WIDTH * 2
    assert est.memory.activations == pytest.approx(old.memory.activations / T)
    assert est.memory.activations >= shard  # at least its output shard, bf16
    assert est.fwd_compute_s < old.fwd_compute_s
