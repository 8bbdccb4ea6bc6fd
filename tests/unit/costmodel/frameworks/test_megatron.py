"""Megatron tensor parallelism (costmodel.frameworks.megatron), the vocabulary-parallel embedding, head and
loss, attention's kernels one by one, recomputation in predict, block-aligned pipeline stages."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.calls.algorithms import RECOMPUTE, recompute_algorithms
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.calls.attention import attention_core_kernels
from costmodel.calls.layer_calls import kernel_calls
from costmodel.layer.cost import layer_estimate
from costmodel.parallel.shard import local_layer
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.step.pipeline import block_stages
from costmodel.choices.precision import with_precision
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.errors import DnnplanError
from networks.loader import load_network

A100 = load_machine("dgx-a100")
runner = CliRunner()


def _gpt2(precision="fp32"):
    return with_precision(load_network("gpt2"), precision)


def test_megatron_layout_pairs_column_and_row_parallel_layers():
    net = _gpt2()
    strategies, fallbacks = megatron_strategies(net, 8, 8, 4)
    label = {name: s.label for name, s in strategies.items()}
    assert not fallbacks
    assert label["embed"] == "N=2,C=4"  # vocabulary-parallel
    assert label["h0.attn"] == "N=2,F=4"  # heads
    assert label["h0.fc"] == "N=2,F=4"  # column
    assert label["h0.gelu"] == "N=2,C=4"  # keeps the feature split
    assert label["h0.proj"] == "N=2,C=4"  # row
    assert label["h0.ln1"] == label["h0.add2"] == "N=2,R=4"
    assert label["lm_head"] == "N=2,F=4" and label["loss"] == "N=2,C=4"
    sp, _ = megatron_strategies(net, 8, 8, 4, sequence_parallel=True)
    assert sp["h0.ln1"].label == sp["h0.mlp_drop"].label == "N=2,H=4"
    # Megatron's sequence parallelism: the tensor-parallel layers reduce-scatter into the sequence shards
    assert sp["h0.fc"].label == "N=2,F=4,SP" and sp["h0.proj"].label == "N=2,C=4,SP"
    assert sp["h0.attn"].label == "N=2,F=4,SP" and sp["embed"].label == "N=2,C=4,SP"
    assert sp["h0.gelu"].label == "N=2,C=4" and sp["loss"].label == "N=2,C=4"  # nothing to scatter
    plain, _ = megatron_strategies(net, 8, 8, 4, sequence_parallel=True, scatter=False)
    assert plain["h0.fc"].label == "N=2,F=4" and plain["h0.ln1"].label == "N=2,H=4"


def test_four_allreduces_per_block_as_shoeybi_et_al_count():
    """Shoeybi et al. 2019, section 3: two all-reduces in the forward and two in the backward per
    transformer layer, each of the whole activation (batch x sequence x width)."""
    net = _gpt2()
    strategies, _ = megatron_strategies(net, 4, 4, 4)
    block = [layer for layer in net.layers if layer.name.startswith("h0.")]
    comms = [c for layer in block for c in layer_estimate(layer, strategies[layer.name], 4, A100,
                                                          Roofline(A100)).comms if c.phase != "sync"]
    assert sorted((c.phase, c.collective) for c in comms) == [("bwd", "allreduce")] * 2 + [("fwd", "allreduce")] * 2
    assert all(c.nbytes == 4 * 1024 * 768 * 4 and c.group == 4 for c in comms)


def test_vocabulary_parallel_embedding_head_and_loss():
    net = _gpt2()
    layers = {layer.name: layer for layer in net.layers}
    s = make_strategy(4, {"C": 4})
    emb = layer_estimate(layers["embed"], s, 2, A100, Roofline(A100))
    assert emb.memory.weights == (-(-50257 // 4) * 768 + 1024 * 768) * 4  # the token table's rows split
    assert [(c.phase, c.collective, c.nbytes) for c in emb.comms if c.phase == "fwd"] == \
        [("fwd", "allreduce", 2 * 1024 * 768 * 4)]
    loss = layer_estimate(layers["loss"], s, 2, A100, Roofline(A100))
    # three numbers a row (maximum, sum of exponentials, the label's logit), all-reduced
    assert [(c.collective, c.nbytes) for c in loss.comms] == [("allreduce", 3 * 2 * 1024 * 4)]
    head = local_layer(layers["lm_head"], make_strategy(4, {"F": 4}), 2)
    assert head.out_shape == (1024, -(-50257 // 4))


def test_attention_backward_runs_four_gemms_of_the_core():
    n, h, s, dh = 2, 12, 1024, 64
    fwd = attention_core_kernels(n, h, s, s, dh, 2, False)
    bwd = attention_core_kernels(n, h, s, s, dh, 2, True)
    gemm = 2 * n * h * s * s * dh
    assert [f for f, _, g in fwd if g] == [gemm] * 2 and [f for f, _, g in bwd if g] == [gemm] * 4
    layer = _gpt2().layer("h0.attn")
    local = local_layer(layer, make_strategy(1, {}), n)
    core = [c for c in kernel_calls(local, "bwd_data") if c.kernel == "attention.bwd"][0]
    assert core.flops == 4 * gemm + 5 * n * h * s * s


def test_attention_is_priced_kernel_by_kernel_never_below_its_totals():
    """Materialised attention: each kernel on its own roofline costs at least one roofline of the
    sums (max is subadditive), and the score matrix read and written by each kernel makes the core
    memory-bound at dh 64."""
    net = _gpt2("bf16")
    local = local_layer(net.layer("h0.attn"), make_strategy(1, {}), 8)
    roof = Roofline(A100)
    for pass_ in ("fwd", "bwd_data"):
        calls = kernel_calls(local, pass_, "materialized")
        whole = roof._time(sum(c.flops for c in calls), sum(c.bytes for c in calls), "bfloat16", "tensor_16bit")
        assert roof.pass_s(local, pass_, "materialized") >= whole * (1 - 1e-12)
    e = 8 * 12 * 1024 * 1024
    floor = 2 * e * 2 / A100.device.mem_bandwidth_bytes_per_s  # the softmax reads and writes the scores
    assert roof.pass_s(local, "fwd", "materialized") > floor
    for pass_ in ("fwd", "bwd_data"):  # FlashAttention never writes them
        assert roof.pass_s(local, pass_, "flash") < roof.pass_s(local, pass_, "materialized")


def test_recompute_modes_and_the_forward_collectives_they_repeat():
    net = _gpt2()
    assert recompute_algorithms(net, "none") == {}
    sel = recompute_algorithms(net, "selective")
    assert set(sel) == {layer.name for layer in net.layers if layer.op == "attention"}
    full = recompute_algorithms(net, "full")
    assert set(full) == {layer.name for layer in net.layers if "." in layer.name}
    assert set(full.values()) == {RECOMPUTE}
    with pytest.raises(DnnplanError, match="recomputation"):
        recompute_algorithms(net, "some")
    layer, s = net.layer("h0.proj"), make_strategy(4, {"C": 4})
    plain = layer_estimate(layer, s, 4, A100, Roofline(A100))
    again = layer_estimate(layer, s, 4, A100, Roofline(A100), RECOMPUTE)
    assert len([c for c in again.comms if c.phase == "bwd"]) == len([c for c in plain.comms if c.phase == "bwd"]) + 1
    assert again.bwd_data_s == pytest.approx(plain.bwd_data_s + plain.fwd_compute_s)


def test_block_stages_cut_whole_blocks_as_megatron():
    net = _gpt2()
    cuts = block_stages(net, 4)
    assert [len({layer.name.split(".")[0] for layer in stage if "." in layer.name}) for stage in cuts] == [3] * 4
    assert cuts[0][0].name == "embed" and cuts[-1][-1].name == "loss"
    assert [layer.name for stage in cuts for layer in stage] == [layer.name for layer in net.layers]
    assert block_stages(net, 5) is None  # 12 blocks do not divide into 5
    assert block_stages(load_network("resnet50"), 2) is None  # its blocks differ


def test_predict_tensor_on_the_command_line():
    got = runner.invoke(app, ["predict", "gpt2", "-p", "8", "-b", "8", "--tensor", "4", "--precision", "bf16",
                              "--recompute", "selective", "--sequence-parallel", "--json"])
    assert got.exit_code == 0, got.output
    out = json.loads(got.stdout)
    assert out["fallbacks"] == [] and out["step_s"] > 0
    by = {x["name"]: x["strategy"] for x in out["layers"]}
    assert by["h0.fc"] == "N=2,F=4,SP" and by["h0.ln1"] == "N=2,H=4"  # Megatron: reduce-scatter variant
    bad = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tensor", "3"])
    assert bad.exit_code == 2 and "does not divide 8 devices" in bad.output
    both = runner.invoke(app, ["predict", "gpt2", "-p", "8", "--tensor", "4", "--strategy", "filter"])
    assert both.exit_code == 2 and "--tensor" in both.output
    piped = runner.invoke(app, ["predict", "gpt2", "-p", "8", "-b", "16", "--tensor", "2", "--pipeline", "4",
                                "--micro-batches", "8", "--json"])
    assert piped.exit_code == 0, piped.output
    stages = json.loads(piped.stdout)["stages"]
    assert [(s["first_layer"], s["last_layer"]) for s in stages] == \
        [("embed", "h2.add2"), ("h3.ln1", "h5.add2"), ("h6.ln1", "h8.add2"), ("h9.ln1", "loss")]


def test_a_micro_batch_too_small_for_the_data_ranks_keeps_the_tensor_split():
    """16 samples a micro-batch over 32 data ranks of tensor 4 (128 devices): each layer keeps its
    tensor split over the 16 sample groups the micro-batch has, the rest replicas (N=16,F=4,R=2), as
    reported; it fell back to data parallelism alone (N=16,R=8), every device holding the whole
    model (Llama 3 70B at tensor 8 on 256 H100s: 131 GiB of weights a device, 106 s a step)."""
    net = _gpt2()
    strategies, fallbacks = megatron_strategies(net, 128, 16, 4)
    model = lambda label: [d for d in label.split(",") if d[0] not in "NR"]  # noqa: E731
    assert fallbacks and all(model(f.used) == model(f.wanted) for f in fallbacks)  # the model split kept
    label = {name: s.label for name, s in strategies.items()}
    assert label["h0.attn"] == "N=16,F=4,R=2" and label["embed"] == "N=16,C=4,R=2"
    whole, _ = megatron_strategies(net, 64, 16, 4)  # 16 data ranks: every layer takes its split
    assert {name: s.label for name, s in whole.items()}["h0.attn"] == "N=16,F=4"
