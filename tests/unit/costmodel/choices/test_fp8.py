"""FP8 training as Transformer Engine runs it (costmodel.choices.precision, ``fp8``): the transformer
blocks' GEMMs at the device's FP8 peak, bf16 elsewhere, the FP8 weight copies and scaling state in
memory, and one clear line on a machine without an FP8 peak."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from costmodel.compute.roofline import Roofline
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.calls.layer_calls import kernel_calls
from costmodel.parallel.shard import local_layer
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import AMAX_HISTORY, is_fp8, with_precision
from costmodel.step.prediction import model_flops_utilization, predict_step
from costmodel.parallel.strategy import make_strategy
from dnnplan.cli import app
from networks.loader import load_network

H100 = load_machine("dgx-h100")
ROOF = Roofline(H100)
runner = CliRunner()


def _layer(net_name: str, precision: str, name: str):
    return next(layer for layer in with_precision(load_network(net_name), precision).layers if layer.name == name)


def test_h100_fp8_peak_is_twice_bf16_as_its_datasheet():
    # NVIDIA H100 Tensor Core GPU datasheet (SXM): FP8 3,958 and BF16 1,979 TFLOPS with sparsity, half dense
    peaks = H100.device.peak_flops
    assert peaks["float8"] == 1979e12 == 2 * peaks["bfloat16"]
    assert "float8" not in load_machine("dgx-a100").device.peak_flops


def test_fp8_marks_the_blocks_gemms_only():
    net = with_precision(load_network("llama3-8b"), "fp8")
    marked = {layer.name for layer in net.layers if is_fp8(layer)}
    assert {"layers0.attn", "layers0.gate_up", "layers0.down", "layers31.down"} <= marked
    assert not marked & {"embed", "lm_head", "layers0.norm1", "layers0.swiglu", "loss"}
    assert all(layer.dtype == "bfloat16" for layer in net.layers if layer.op != "softmax_cross_entropy")


def test_a_gemm_runs_at_the_fp8_peak():
    # llama3-8b's gate/up projection on one 8192-token sequence: 2 x 8192 x 4096 x 28672 FLOPs forward
    fp8, bf16 = (local_layer(_layer("llama3-8b", p, "layers0.gate_up"), make_strategy(1, {}), 1)
                 for p in ("fp8", "bf16"))
    flops = 2 * 8192 * 4096 * 28672
    e = H100.device.efficiency_of("tensor_16bit")
    assert ROOF.pass_s(fp8, "fwd", "") == pytest.approx(flops / (1979e12 * e), rel=1e-9)
    assert ROOF.pass_s(bf16, "fwd", "") == pytest.approx(2 * ROOF.pass_s(fp8, "fwd", ""), rel=1e-9)


def test_attention_projections_in_fp8_its_core_in_bf16():
    local = local_layer(_layer("llama3-8b", "fp8", "layers0.attn"), make_strategy(1, {}), 1)
    dev = H100.device
    e, bw = dev.efficiency_of("tensor_16bit"), dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory")
    for pass_ in ("fwd", "bwd_data", "bwd_weights"):
        expect = sum(max(c.flops / ((dev.peak_flops["bfloat16"] if c.kernel.startswith("attention.")
                                     else dev.peak_flops["float8"]) * e), c.bytes / bw)
                     for c in kernel_calls(local, pass_, "flash", dev.sram_bytes))
        assert ROOF.pass_s(local, pass_, "flash") == pytest.approx(expect, rel=1e-9), pass_


def test_fp8_memory_by_what_holds_it():
    nets = {p: with_precision(load_network("gpt2"), p) for p in ("bf16", "fp8")}
    preds = {}
    for p, net in nets.items():
        strategies, _ = megatron_strategies(net, 1, 8, 1, False)
        preds[p] = predict_step(net, 8, strategies, default_algorithms(net), H100, ROOF, "adam", overlap="none")
    # per block: attention's q, k, v (3 x 768 x 768) and output (768 x 768) matrices, the MLP's two
    # 768 x 3072: an FP8 copy and its transpose, a byte each; four GEMMs (qkv, out, fc, proj), each
    # with five FP8 tensors' scale, inverse scale and 1024-value amax history in float32
    per_block = 2 * (4 * 768 * 768 + 2 * 768 * 3072) + 4 * 5 * (2 + AMAX_HISTORY) * 4
    fp8, bf16 = preds["fp8"].memory_parts, preds["bf16"].memory_parts
    assert fp8["fp8"] == 12 * per_block and "fp8" not in bf16
    for k in ("weights", "grads", "master", "optimizer", "activations"):
        assert fp8[k] == bf16[k], k
    assert preds["fp8"].step_s < preds["bf16"].step_s


def test_fp8_parameters_keep_no_16bit_copy():
    """Megatron-Core's --fp8-param-gather (Megatron-Bridge's FP8 current-scaling recipe): each FP8
    GEMM weight is its one-byte FP8 copy, beside its transpose; nothing else changes."""
    net = load_network("gpt2")
    preds = {}
    for params in (False, True):
        n = with_precision(net, "fp8", fp8_params=params)
        strategies, _ = megatron_strategies(n, 1, 8, 1, False)
        preds[params] = predict_step(n, 8, strategies, default_algorithms(n), H100, ROOF, "adam", overlap="none")
    elems = 12 * (4 * 768 * 768 + 2 * 768 * 3072)  # the blocks' GEMM weights (test above)
    a, b = preds[False].memory_parts, preds[True].memory_parts
    assert a["weights"] - b["weights"] == elems  # two bytes each become one
    assert a["fp8"] - b["fp8"] == elems  # no copy beside the weight, the transpose kept
    for k in ("grads", "master", "optimizer", "activations"):
        assert a[k] == b[k], k
    assert preds[True].step_s == preds[False].step_s



def test_fp8_parameters_are_gathered_in_fp8():
    """Under --fp8-param-gather the distributed optimizer's all-gather of the updated shards (ZeRO-1)
    moves each FP8 GEMM weight at one byte an element; its bias stays at two, and the gradients'
    reduce-scatter is unchanged. GPT-2's h0.fc (768 x 3072 and 3072 biases) on 8 data-parallel ranks."""
    net = load_network("gpt2")
    got = {}
    for params in (False, True):
        n = with_precision(net, "fp8", fp8_params=params)
        strategies, _ = megatron_strategies(n, 8, 8, 1, False)
        pred = predict_step(n, 8, strategies, default_algorithms(n), H100, ROOF, Optimizer("adam", 1), overlap="none")
        layer = next(x.layer for x in pred.layers if x.layer.name == "h0.fc")
        got[params] = {c.purpose: c.nbytes for c in layer.comms}
    assert got[False]["param_gather"] == 2 * (768 * 3072 + 3072)
    assert got[True]["param_gather"] == 768 * 3072 + 2 * 3072
    assert got[True]["grad_sync"] == got[False]["grad_sync"] == 2 * (768 * 3072 + 3072)

def test_mfu_of_fp8_against_the_16bit_peak():
    net = load_network("gpt2")
    assert model_flops_utilization(net, 8, 1.0, 8, H100, "float8") == \
        model_flops_utilization(net, 8, 1.0, 8, H100, "bfloat16")


def test_a_machine_without_fp8_refuses_in_one_line():
    got = runner.invoke(app, ["predict", "llama3-8b", "-p", "8", "--machine", "dgx-a100", "--precision", "fp8"])
    assert got.exit_code == 2
    assert "has no float8 peak, so it cannot train in fp8" in got.output and "Traceback" not in got.output
    said = " ".join(got.output.split())  # a shipped machine: another to name, not its file to edit
    assert "--machine dgx-b200, dgx-h100" in said and "add the datasheet figure" not in said
    ok = runner.invoke(app, ["predict", "gpt2", "-p", "8", "-b", "16", "--machine", "dgx-h100", "--precision", "fp8",
                             "--optimizer", "adam", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["memory_parts_bytes"]["fp8"] > 0


def test_no_kernel_set_runs_fp8_and_both_say_so_in_one_line(tmp_path):
    plan = tmp_path / "fp8.yaml"
    made = runner.invoke(app, ["plan", "gpt-tiny", "-p", "2", "--machine", "dgx-h100", "--precision", "fp8",
                               "--optimizer", "momentum", "--out", str(plan)])
    assert made.exit_code == 0, made.output
    ran = runner.invoke(app, ["execute", str(plan), "--ranks", "2"])
    assert ran.exit_code == 2 and "no FP8 GEMMs" in ran.output and "Traceback" not in ran.output
    timed = runner.invoke(app, ["profile", "lenet5", "--precision", "fp8"])
    assert timed.exit_code == 2 and "priced from the GPU datasheet" in timed.output
    # an unknown precision is answered with the ones profile times, not with fp8, which it refuses
    unknown = runner.invoke(app, ["profile", "lenet5", "--precision", "fp9"])
    assert unknown.exit_code == 2 and "unknown --precision 'fp9'" in unknown.output
    assert "bf16" in unknown.output and "fp8" not in unknown.output


def test_fp8_on_a_network_without_fp8_gemms_is_said_to_change_nothing():
    """ResNet-50 has no transformer block for Transformer Engine to run in FP8: the flag is named as
    changing nothing (its step is bf16's), not taken in silence."""
    got = runner.invoke(app, ["predict", "resnet50", "-p", "8", "--machine", "dgx-h100", "--precision", "fp8"])
    assert got.exit_code == 0 and "--precision fp8 changes nothing: resnet50 has no transformer block" in \
        " ".join(got.output.split())
    gpt = runner.invoke(app, ["predict", "gpt2", "-p", "8", "-b", "16", "--machine", "dgx-h100", "--precision", "fp8"])
    assert gpt.exit_code == 0 and "changes nothing" not in gpt.output
