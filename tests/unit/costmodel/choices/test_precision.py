"""Training precisions (costmodel.choices.precision) and memory as frameworks hold it (networks.analysis).

Memory per parameter, counted by hand from the policy (Micikevicius et al., ICLR 2018, section 3):
fp32 with momentum SGD: weight 4 + gradient 4 + momentum 4; mixed precision: 16-bit weight 2 +
16-bit gradient 2 + float32 master 4 + float32 state 4 per optimiser slot.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from costmodel.choices.training import TrainingChoices
from costmodel.calls.layer_calls import PASSES
from costmodel.compute.roofline import Roofline, local_cost
from costmodel.calls.algorithms import default_algorithms
from costmodel.machine.loading import load_machine
from costmodel.parallel.shard import local_layer
from costmodel.choices.optimizer import Optimizer
from costmodel.choices.precision import PRECISIONS, mixed_precision, with_precision
from costmodel.step.prediction import predict_step
from costmodel.parallel.strategy import make_strategy
from costmodel.frameworks.uniform import uniform_strategies
from networks.analysis import kept_bytes, saved_outputs
from networks.errors import DnnplanError
from networks.loader import load_network
from profiler.context import compute_model, resolve

A100 = load_machine("dgx-a100")
GIB = 2**30

# published parameter counts: torchvision resnet50 (25,557,032); GPT-2 small with the LM head
# tied to the token embedding (124,439,808, Hugging Face "gpt2")
PARAMS = {"resnet50": 25_557_032, "gpt2": 124_439_808}


def _memory(name: str, precision: str, optimizer: str, batch: int = 4):
    net = with_precision(load_network(name), precision)
    strategies, _ = uniform_strategies(net, 1, batch, "data")
    pred = predict_step(net, batch, strategies, default_algorithms(net), A100,
                        compute_model(A100, precision=precision), optimizer)
    mems = [x.layer.memory for x in pred.layers]
    return {k: sum(getattr(m, k) for m in mems) for k in ("weights", "grads", "master", "optimizer")}


@pytest.mark.parametrize("name, optimizer, slots", [("resnet50", "momentum", 1), ("gpt2", "adam", 2)])
def test_mixed_precision_memory_per_parameter_matches_a_hand_count(name, optimizer, slots):
    p = PARAMS[name]
    assert load_network(name).num_params == p
    for precision in ("fp16", "bf16"):
        got = _memory(name, precision, optimizer)
        assert got == {"weights": 2 * p, "grads": 2 * p, "master": 4 * p, "optimizer": 4 * slots * p}
    for precision in ("fp32", "tf32"):
        got = _memory(name, precision, optimizer)
        assert got == {"weights": 4 * p, "grads": 4 * p, "master": 0, "optimizer": 4 * slots * p}
    # ZeRO's accounting (Rajbhandari et al., SC20, section 3.1): 16 bytes a parameter with Adam
    if optimizer == "adam":
        assert sum(_memory(name, "fp16", optimizer).values()) == 16 * p


def test_saved_outputs_follow_what_each_backward_needs(tmp_path):
    spec = tmp_path / "chain.yaml"
    spec.write_text("""
name: chain
inputs:
  x: {shape: [3, 8, 8]}
layers:
  - {name: c1, op: conv2d, filters: 4, kernel: 3, padding: 1}
  - {name: b1, op: batchnorm2d}
  - {name: r1, op: relu}
  - {name: c2, op: conv2d, filters: 4, kernel: 3, padding: 1}
  - {name: sum, op: add, inputs: [c2, r1]}
  - {name: p, op: global_avgpool}
  - {name: f, op: flatten}
  - {name: fc, op: linear, features: 10}
  - {name: loss, op: softmax_cross_entropy}
""")
    net = load_network(str(spec))
    saved = saved_outputs(net)
    # c1: batch norm needs its input; b1: relu needs only its own output (so it runs in place over
    # b1); r1: relu's own backward and c2's; c2: only the add reads it; sum: pooling keeps nothing;
    # f: the linear layer needs its input; fc: the loss keeps its log-probabilities instead
    assert saved == {"c1": True, "b1": False, "r1": True, "c2": False, "sum": False, "p": False,
                     "f": True, "fc": False, "loss": False}
    n = 2
    assert kept_bytes(net.layer("c1"), n, True) == n * 4 * 8 * 8 * 4
    assert kept_bytes(net.layer("b1"), n, False) == 2 * 4 * 4  # mean and inverse deviation, float32
    assert kept_bytes(net.layer("loss"), n, False) == n * 10 * 4  # log-probabilities


def test_resnet50_at_nvidias_v100_batch_fits_16_gb():
    """NVIDIA trains ResNet-50 v1.5 at 112 images per V100 16GB in FP32 and 256 in AMP
    (DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5, README): both fit."""
    v100 = load_machine("dgx1-v100")
    for precision, batch in (("fp32", 112), ("fp16", 256)):
        net = with_precision(load_network("resnet50"), precision)
        strategies, _ = uniform_strategies(net, 1, batch, "data")
        pred = predict_step(net, batch, strategies, default_algorithms(net), v100,
                            compute_model(v100, precision=precision))
        assert 0.5 * v100.device.mem_capacity_bytes < pred.memory_peak_bytes < v100.device.mem_capacity_bytes


def test_16_bit_activations_halve_the_kept_bytes_of_convolutions():
    layer32 = load_network("resnet50").layer("layer3.5.conv2")
    layer16 = with_precision(load_network("resnet50"), "fp16").layer("layer3.5.conv2")
    assert layer16.dtype == "float16"
    assert 2 * kept_bytes(layer16, 8, True) == kept_bytes(layer32, 8, True)


def test_tensor_cores_price_gemm_like_layers_at_their_peak():
    dev = A100.device
    layer = load_network("resnet50").layer("layer3.5.conv2")
    local = local_layer(layer, make_strategy(1, {}), 64)
    cost = local_cost(local)
    for precision, key in (("fp32", "float32"), ("tf32", "tf32")):
        model = compute_model(A100, precision=precision)
        kind = "tensor_tf32" if key == "tf32" else "cuda_cores"
        expect = max(cost.flops[0] / (dev.peak_flops[key] * dev.efficiency_of(kind)),
                     (cost.bytes_read[0] + cost.bytes_written[0]) / (dev.mem_bandwidth_bytes_per_s
                                                                   * dev.efficiency_of("memory")))
        assert model.pass_s(local, "fwd", "direct") == pytest.approx(expect, rel=1e-12)
    # a memory-bound op is not sped up by tensor cores
    bn = local_layer(load_network("resnet50").layer("bn1"), make_strategy(1, {}), 64)
    assert compute_model(A100, precision="tf32").pass_s(bn, "fwd", "") == Roofline(A100).pass_s(bn, "fwd", "")


def test_every_pass_is_faster_in_16_bits_but_never_twice_the_bandwidth():
    net32, net16 = load_network("resnet50"), with_precision(load_network("resnet50"), "fp16")
    fp32, fp16 = Roofline(A100), compute_model(A100, precision="fp16")
    halved = 0
    for a, b in zip(net32.layers, net16.layers):
        if a.op == "softmax_cross_entropy":
            continue
        la, lb = local_layer(a, make_strategy(1, {}), 32), local_layer(b, make_strategy(1, {}), 32)
        for pass_ in PASSES:
            t32, t16 = fp32.pass_s(la, pass_, "direct" if a.op == "conv2d" else ""), \
                fp16.pass_s(lb, pass_, "direct" if a.op == "conv2d" else "")
            assert t16 <= t32
            i = PASSES.index(pass_)
            cost = local_cost(la)
            nbytes, flops = cost.bytes_read[i] + cost.bytes_written[i], cost.flops[i]
            dev = A100.device
            memory_s = nbytes / (dev.mem_bandwidth_bytes_per_s * dev.efficiency_of("memory"))
            if a.op not in ("conv2d", "linear") and memory_s > flops / (dev.peak_flops["float32"]
                                                                        * dev.efficiency_of("cuda_cores")):
                assert t16 == pytest.approx(t32 / 2, rel=1e-9)  # memory-bound: half the bytes, half the time
                halved += 1
    assert halved > 100


def test_precision_errors_are_one_line():
    with pytest.raises(DnnplanError, match="no tf32 peak"):
        resolve("resnet50", 8, None, "dgx1-v100", choices=TrainingChoices(precision="tf32"))
    with pytest.raises(DnnplanError, match="float32 kernel profiles"):
        resolve("lenet5", 1, None, "local", choices=TrainingChoices(precision="fp16"))
    with pytest.raises(DnnplanError, match="unknown --precision"):
        resolve("lenet5", 1, None, "dgx-a100", choices=TrainingChoices(precision="fp4"))
    with pytest.raises(DnnplanError, match="no float8 peak, so it cannot train in fp8"):
        resolve("lenet5", 1, None, "dgx-a100", choices=TrainingChoices(precision="fp8"))
    assert set(PRECISIONS) == {"fp32", "tf32", "fp16", "bf16", "fp8"}


def test_plan_file_keeps_its_precision_and_the_executor_refuses_it(tmp_path):
    out = tmp_path / "p.yaml"
    run = [sys.executable, "-m", "dnnplan"]
    made = subprocess.run(run + ["plan", "lenet5", "--devices", "2", "--precision", "bf16", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "precision: bf16" in out.read_text()
    again = subprocess.run(run + ["predict", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    refused = subprocess.run(run + ["execute", str(out), "--ranks", "2"], capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2
    assert "bf16 training" in refused.stderr and "Traceback" not in refused.stderr


def _per_device(name: str, p: int, zero: int, reduce_each_micro: bool | None = None) -> tuple[dict, list]:
    net = with_precision(load_network(name), "fp16")
    strategies, _ = uniform_strategies(net, p, 8 * p, "data")
    pred = predict_step(net, 8 * p, strategies, default_algorithms(net), A100,
                        compute_model(A100, precision="fp16"), Optimizer("adam", zero, reduce_each_micro=reduce_each_micro))
    mems = [x.layer.memory for x in pred.layers]
    return ({k: sum(getattr(m, k) for m in mems) for k in ("weights", "grads", "master", "optimizer")},
            [c for x in pred.layers for c in x.layer.comms])


def test_zero_stages_shard_memory_as_the_zero_paper_counts():
    """Rajbhandari et al., SC20, Figure 1: with mixed-precision Adam (K = 12 bytes of master weights
    and state a parameter) over Nd data-parallel ranks, a device holds (2 + 2 + K) Psi at stage 0,
    2 Psi + 2 Psi + K Psi / Nd at stage 1, 2 Psi + (2 + K) Psi / Nd at stage 2 and (2 + 2 + K) Psi / Nd
    at stage 3; the paper's example, Psi = 7.5e9 on 64 GPUs: 120, 31.4, 16.6 and 1.9 GB."""
    def zero_bytes(psi, nd, stage, k=12):
        return [(2 + 2 + k) * psi, 4 * psi + k * psi / nd, 2 * psi + (2 + k) * psi / nd,
                (2 + 2 + k) * psi / nd][stage]
    assert [round(zero_bytes(7.5e9, 64, s) / 1e9, 1) for s in range(4)] == [120.0, 31.4, 16.6, 1.9]
    psi, nd = PARAMS["gpt2"], 64
    for stage in range(4):
        got, comms = _per_device("gpt2", nd, stage)
        assert sum(got.values()) == pytest.approx(zero_bytes(psi, nd, stage), rel=1e-4), stage
        kinds = sorted({(c.purpose, c.phase, c.collective) for c in comms if c.purpose in ("grad_sync", "param_gather")})
        # stages 2 and 3 hold the gradients sharded, so they reduce-scatter them in the backward
        # pass (every micro-batch's, as DeepSpeed and FSDP do); stages 0 and 1 once a step
        expect = {0: [("grad_sync", "sync", "allreduce")],
                  1: [("grad_sync", "sync", "reduce_scatter"), ("param_gather", "sync", "allgather")],
                  2: [("grad_sync", "bwd", "reduce_scatter"), ("param_gather", "sync", "allgather")],
                  3: [("grad_sync", "bwd", "reduce_scatter"), ("param_gather", "bwd", "allgather"),
                      ("param_gather", "fwd", "allgather")]}
        assert kinds == sorted(expect[stage]), stage


def test_zero_stages_that_reduce_once_a_step_hold_their_gradients_whole():
    """A stage 2 or 3 run that accumulates its gradients over the micro-batches and reduces them once
    a step (PyTorch FSDP's ``no_sync``: "FSDP will accumulate the full model gradients (instead of
    gradient shards) until the eventual sync") holds 2 Psi of gradients, as stage 1 does; its
    weights and optimiser state stay sharded as the stage shards them."""
    psi, nd = PARAMS["gpt2"], 64
    for stage in (2, 3):
        sharded, _ = _per_device("gpt2", nd, stage)
        whole, _ = _per_device("gpt2", nd, stage, reduce_each_micro=False)
        assert whole["grads"] == pytest.approx(2 * psi, rel=1e-4), stage
        assert sharded["grads"] == pytest.approx(2 * psi / nd, rel=1e-2), stage
        assert {k: whole[k] for k in ("weights", "master", "optimizer")} == \
            {k: sharded[k] for k in ("weights", "master", "optimizer")}, stage


def test_plan_file_keeps_its_optimizer_and_zero_stage_and_the_executor_refuses_them(tmp_path):
    out = tmp_path / "z.json"
    run = [sys.executable, "-m", "dnnplan"]
    made = subprocess.run(run + ["plan", "lenet5", "--devices", "4", "--optimizer", "adam", "--zero", "3",
                                 "--out", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    data = json.loads(made.stdout)
    assert (data["optimizer"], data["zero"]) == ("adam", 3)
    again = subprocess.run(run + ["predict", str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["step_s"] == pytest.approx(data["step_s"], rel=1e-12)
    assert {c["collective"] for x in json.loads(again.stdout)["layers"] for c in x["comm"]} >= {
        "reduce_scatter", "allgather"}
    refused = subprocess.run(run + ["execute", str(out), "--ranks", "4"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "adam, ZeRO-3" in refused.stderr and "Traceback" not in refused.stderr


def test_model_flop_utilisation_is_the_networks_flops_over_the_peak_it_trains_at():
    from networks.analysis import summarize
    from planner.problem.solve import Settings, make_plan
    net = with_precision(load_network("resnet50"), "tf32")
    plan = make_plan(net, "resnet50", 256, 1, A100, compute_model(A100, precision="tf32"),
                     settings=Settings(choices=TrainingChoices(precision="tf32")), with_baselines=False)
    s = summarize(net, 256)
    assert plan.mfu == pytest.approx((s.flops_fwd + s.flops_bwd) / (plan.step_s * 156e12), rel=1e-12)
    assert 0 < plan.mfu < 1  # nothing below physics: no step is priced faster than its FLOPs at peak


def test_memory_parts_add_up_to_the_peak_and_reach_the_plan_output(tmp_path):
    for stage in (0, 3):
        net = with_precision(load_network("gpt2"), "bf16")
        strategies, _ = uniform_strategies(net, 8, 64, "data")
        pred = predict_step(net, 64, strategies, default_algorithms(net), A100, compute_model(A100, precision="bf16"),
                            Optimizer("adam", stage))
        assert sum(pred.memory_parts.values()) == pred.memory_peak_bytes
        assert pred.memory_parts["master"] == pytest.approx(4 * PARAMS["gpt2"] / (8 if stage else 1), rel=1e-4)
    shown = subprocess.run([sys.executable, "-m", "dnnplan", "plan", "gpt2", "--devices", "8", "--precision", "bf16",
                            "--optimizer", "adam"], capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0 and "memory per device: weights" in shown.stdout and "master weights" in shown.stdout


def test_a_transformer_on_a_gpu_datasheet_defaults_to_the_16_bit_format_its_tensor_cores_run():
    """TrainingChoices.for_network: bf16 where the device has a bfloat16 peak, fp16 where it has
    only float16 (V100), nothing where it has neither or no peaks are given (a CPU, a profile
    table); a named precision and a network without attention keep theirs."""
    gpt, cnn = load_network("gpt-tiny"), load_network("resnet18")
    a100, v100 = (load_machine(m).device.peak_flops for m in ("dgx-a100", "dgx1-v100"))
    assert (mixed_precision(a100), mixed_precision(v100), mixed_precision({"float32": 1e12})) == ("bf16", "fp16", None)
    assert TrainingChoices().for_network(gpt, a100).precision == "bf16"
    assert TrainingChoices().for_network(gpt, v100).precision == "fp16"
    assert TrainingChoices().for_network(gpt).precision == "fp32"  # no datasheet peaks: a CPU or a table
    named = TrainingChoices.from_flags(precision="fp32")
    assert named.for_network(gpt, a100).precision == "fp32"
    assert TrainingChoices().for_network(cnn, a100) == TrainingChoices()
    assert resolve("gpt-tiny", 4, None, "dgx-h100", network_defaults=True).choices.precision == "bf16"
    assert resolve("gpt-tiny", 2, None, "local", network_defaults=True).choices.precision == "fp32"
    assert resolve("gpt-tiny", 4, None, "dgx-h100").choices.precision == "fp32"  # the flags alone: execute, validate
