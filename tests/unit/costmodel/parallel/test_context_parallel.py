"""Context parallelism: attention over a sequence split across a group (the ``H`` degree), its keys
and values exchanged by a ring or an all-gather (costmodel/comm/context.py), the causal load
balance of the two-chunk ordering (costmodel/calls/flash.py), the weight gradients summed over the
sequence group, and the activations split by the sequence. Byte counts against the layout algebra."""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.compute.roofline import Roofline
from costmodel.comm.context import context_comms, kv_bytes
from costmodel.machine.loading import load_machine
from costmodel.calls.flash import visited
from costmodel.layer.comms import kv_comms
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import local_layer
from costmodel.parallel.layout import AxisSplit, Layout, reshard_peaks
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy
from networks.spec import parse_network

H100 = load_machine("dgx-h100")


def _attn(seq: int, width: int = 512, heads: int = 8, kv: int = 2, extra: str = ""):
    text = "\n".join(["name: t", "inputs:", f"  x: {{shape: [{seq}, {width}]}}", "layers:",
                      f"  - {{name: attn, op: attention, heads: {heads}, kv_heads: {kv}, causal: true, bias: false{extra}}}",
                      "  - {name: fc, op: linear, features: 5}", "  - {name: loss, op: softmax_cross_entropy}"])
    return with_precision(parse_network(text, "<t>"), "bf16").layer("attn")


@pytest.mark.parametrize("c", [2, 4, 8])
def test_the_exchanged_keys_and_values_are_what_the_layout_algebra_moves(c):
    batch, seq, dh, kv = 2, 1024, 64, 2
    layer = _attn(seq)
    strat = make_strategy(c, {"H": c})
    local = local_layer(layer, strat, batch)
    mine = batch * (seq // c) * 2 * kv * dh * 2  # local keys and values, 16-bit
    assert kv_bytes(local, 2) == mine
    # every rank needs every key: the (samples, sequence, 2 kv dh) tensor from sequence shards to whole
    shape = (batch, seq, 2 * kv * dh)
    own = Layout(shape, strat, (None, AxisSplit("H", c, seq), None))
    need = Layout(shape, strat, (None, None, None))
    received = reshard_peaks(own, need)[0] * 2
    assert received == (c - 1) * mine
    comms = context_comms(layer, strat, local, 2, H100, (1.0, 1.0))  # a slow core hides the ring
    assert [(x[1], x[2], x[3]) for x in comms] == [("fwd", "ring", (c - 1) * mine), ("bwd", "ring", 2 * (c - 1) * mine)]
    assert all(x[5] == 0.0 and x[6] > 0 for x in comms)  # exposed nothing, the link busy
    # on a CPU machine the executor is dnnplan's, which all-gathers: priced so though the ring hides
    cpu = dataclasses.replace(H100, device=dataclasses.replace(H100.device, kind="cpu", flash=False))
    assert [x[2] for x in context_comms(layer, strat, local, 2, cpu, (1.0, 1.0))] == ["allgather", "reduce_scatter"]
    fast = context_comms(layer, strat, local, 2, H100, (0.0, 0.0))  # nothing to hide under
    gather = [x for x in fast if x[2] != "ring"]
    if gather:  # the all-gather of c kv gathered, the reduce-scatter of the gradients
        assert [(x[1], x[2], x[3]) for x in gather] == [("fwd", "allgather", c * mine), ("bwd", "reduce_scatter", c * mine)]


def test_the_two_chunk_order_balances_causal_work_across_the_ranks():
    # 128 positions over 4 ranks in chunks of 16 (one tile each): rank i holds chunks i and 7 - i
    # and visits key tiles 0..i and 0..7-i: 9 tiles of 16 x 16 whatever i (36 in all, the causal 8 x 8)
    assert visited(32, 128, True, 16, 16)[2] == 9 * 256
    # the straggler is the mean: the four ranks' tiles make the whole sequence's causal area (36 tiles),
    # where, in order, the last rank's two chunks would visit 7 + 8 = 15 tiles, 1.67 times the mean
    assert 4 * visited(32, 128, True, 16, 16)[2] == visited(128, 128, True, 16, 16)[2] == 36 * 256


def test_context_parallel_attention_splits_work_memory_and_sums_weight_gradients_over_the_group():
    seq, batch = 8192, 1
    layer = _attn(seq, 4096, 32, 8)
    roof = Roofline(H100)
    whole = layer_estimate(layer, make_strategy(8, {"F": 8}), batch, H100, roof)
    split = layer_estimate(layer, make_strategy(16, {"H": 2, "F": 8}), batch, H100, roof)
    assert split.memory.activations == pytest.approx(whole.memory.activations / 2, rel=1e-3)
    assert split.fwd_compute_s < 0.6 * whole.fwd_compute_s  # half the queries, half their keys' tiles
    syncs = [c for c in split.comms if c.purpose == "grad_sync"]
    assert [c.group for c in syncs] == [2]  # the weights' gradients over the sequence group
    kv = [c for c in split.comms if c.purpose == "kv"]
    assert {c.phase for c in kv} == {"fwd", "bwd"} and all(c.seconds <= c.link_time for c in kv)


def test_a_network_can_name_its_frameworks_exchange():
    """Llama 3 all-gathers keys and values (Dubey et al. 2024, section 3.3.2) even where the ring
    would hide under the core: ``context_exchange`` prices the one the framework runs."""
    batch, seq, c = 2, 1024, 4
    strat = make_strategy(c, {"H": c})
    layer = _attn(seq, extra=", context_exchange: allgather")
    mine = batch * (seq // c) * 2 * 2 * 64 * 2
    comms = context_comms(layer, strat, local_layer(layer, strat, batch), 2, H100, (1.0, 1.0))
    assert [(x[1], x[2], x[3]) for x in comms] == [("fwd", "allgather", c * mine), ("bwd", "reduce_scatter", c * mine)]
    assert all(x[5] > 0 for x in comms)  # in the critical path
    ring = _attn(seq, extra=", context_exchange: ring")
    assert {x[2] for x in context_comms(ring, strat, local_layer(ring, strat, batch), 2, H100, (0.0, 0.0))} == {"ring"}
    with pytest.raises(Exception, match="context_exchange"):
        _attn(seq, extra=", context_exchange: gossip")


def test_the_algorithms_of_a_shard_share_one_exchange_and_price_as_alone():
    """kv_comms with a memo prices the exchange once per shard (its algorithms differ in the core's
    seconds alone) and gives what it gives without one, for cores that hide the ring, part of it
    and none of it."""
    layer, strat = _attn(4096), make_strategy(8, {"H": 8})
    local = local_layer(layer, strat, 2)
    memo: dict = {}
    for kernel in ("flash", "materialized"):
        for passes in ((1.0, 2.0), (1e-5, 3e-5), (0.0, 0.0)):
            assert kv_comms(layer, strat, local, H100, "mpi", kernel, passes, memo) == \
                kv_comms(layer, strat, local, H100, "mpi", kernel, passes)
    assert [k[0] for k in memo].count("kv-exchange") == 1


def test_the_frameworks_exchange_is_priced_where_the_layer_names_none():
    """Megatron-LM rings a split sequence's keys and values (--cp-comm-type p2p, its default) and
    torchtitan all-gathers them (context_parallel_rotate_method "allgather"): under each, that
    exchange is priced even where the other is cheaper; the default framework takes the cheaper,
    and a layer's own context_exchange comes first."""
    from costmodel.frameworks.kernels import framework_kernels
    from costmodel.frameworks.loading import load_framework

    layer, strat = _attn(4096, extra=""), make_strategy(8, {"H": 8})
    kinds, exposed = {}, {}
    for name in ("megatron", "pytorch", "ideal"):
        compute = framework_kernels(Roofline(H100), load_framework(name), H100)
        kv = [c for c in layer_estimate(layer, strat, 2, H100, compute).comms if c.purpose == "kv"]
        kinds[name], exposed[name] = {c.collective for c in kv}, sum(c.seconds for c in kv)
    assert kinds["megatron"] == {"ring"} and kinds["pytorch"] == {"allgather", "reduce_scatter"}
    assert exposed["ideal"] == min(exposed["megatron"], exposed["pytorch"])  # the cheaper of the two
    pinned = _attn(4096, extra=", context_exchange: allgather")
    megatron = framework_kernels(Roofline(H100), load_framework("megatron"), H100)
    assert {c.collective for c in layer_estimate(pinned, strat, 2, H100, megatron).comms
            if c.purpose == "kv"} == {"allgather", "reduce_scatter"}


def test_all_gathered_keys_and_values_are_held_while_the_pass_runs():
    """Where a split sequence's keys and values are all-gathered, the other ranks' (c - 1) kv are a
    transient buffer of the layer's pass; around a ring they are not (one chunk in flight)."""
    from costmodel.frameworks.kernels import framework_kernels
    from costmodel.frameworks.loading import load_framework

    c, batch = 8, 2
    layer, strat = _attn(4096), make_strategy(c, {"H": c})
    mine = kv_bytes(local_layer(layer, strat, batch), 2)
    held = {}
    for name in ("megatron", "pytorch"):
        compute = framework_kernels(Roofline(H100), load_framework(name), H100)
        held[name] = layer_estimate(layer, strat, batch, H100, compute).memory.buffers
    assert held["pytorch"] - held["megatron"] == (c - 1) * mine
