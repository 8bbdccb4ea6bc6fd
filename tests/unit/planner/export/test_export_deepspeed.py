"""A plan as DeepSpeed's ds_config.json (planner.export.deepspeed): data-parallel plans, a CNN's as
well as a transformer's, give the batch, accumulation, ZeRO stage, overlap, precision, optimiser and
checkpointing they should, every key one DeepSpeed reads; tensor and pipeline parallelism, which
DeepSpeed sets in the script, are refused naming the layer."""

from __future__ import annotations

import pytest

from networks.errors import DnnplanError
from planner.export.deepspeed import DEEPSPEED_SOURCE, deepspeed_config
from tests.support.export_plans import data_plan, swapped, uniform_plan

#: DeepSpeed's keys, read in deepspeedai/DeepSpeed at tag v0.19.5 (commit
#: cf44300453eb0af79ed84ed8f1cb49d57478bd76): the top level in deepspeed/runtime/constants.py
#: (TRAIN_BATCH_SIZE, TRAIN_MICRO_BATCH_SIZE_PER_GPU, GRADIENT_ACCUMULATION_STEPS, OPTIMIZER,
#: ZERO_ALLOW_UNTESTED_OPTIMIZER, BFLOAT16, FP16, ZERO_OPTIMIZATION "zero_optimization") and
#: deepspeed/runtime/activation_checkpointing/config.py (ACT_CHKPT); an optimizer's TYPE "type" and
#: OPTIMIZER_PARAMS "params", bf16's and fp16's "enabled" (constants.py); zero_optimization's fields of
#: DeepSpeedZeroConfig (deepspeed/runtime/zero/config.py: stage, contiguous_gradients, reduce_scatter,
#: reduce_bucket_size, allgather_partitions, allgather_bucket_size, overlap_comm); activation
#: checkpointing's (ACT_CHKPT_PARTITION_ACTIVATIONS, ..._CONTIGUOUS_MEMORY_OPTIMIZATION,
#: ..._CPU_CHECKPOINTING, ..._NUMBER_CHECKPOINTS, ..._SYNCHRONIZE_CHECKPOINT_BOUNDARY, ..._PROFILE)
DEEPSPEED_KEYS = {
    "": {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
         "zero_allow_untested_optimizer", "bf16", "fp16", "zero_optimization", "activation_checkpointing"},
    "optimizer": {"type", "params"},
    "bf16": {"enabled"},
    "fp16": {"enabled"},
    "zero_optimization": {"stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
                          "allgather_partitions", "allgather_bucket_size", "overlap_comm"},
    "activation_checkpointing": {"partition_activations", "contiguous_memory_optimization", "cpu_checkpointing",
                                 "number_checkpoints", "synchronize_checkpoint_boundary", "profile"},
}
#: optimizer types DeepSpeed builds (deepspeed/runtime/config.py DEEPSPEED_OPTIMIZERS, case-insensitive:
#: "adam") or takes from torch.optim by name (deepspeed/runtime/engine.py: getattr(torch.optim, name))
OPTIMIZER_TYPES = {"Adam", "SGD"}

CASES = {
    "gpt2 zero 3 bf16": dict(name="gpt2", devices=8, batch=32, zero=3, precision="bf16", optimizer="adam"),
    "resnet50 momentum zero 1 fp16": dict(name="resnet50", devices=8, batch=256, zero=1, precision="fp16"),
    "tiny-llama accumulation full recompute sgd zero 2": dict(name="tiny-llama", devices=4, batch=16, micro=2,
                                                               zero=2, optimizer="sgd", recompute="full"),
    "lenet5 fp32 overlap none": dict(name="lenet5", devices=2, batch=8, overlap="none"),
}


def config(name: str, **kwargs) -> dict:
    return deepspeed_config(*data_plan(name, **kwargs))


@pytest.mark.parametrize("case", CASES)
def test_every_key_is_one_deepspeed_reads(case):
    kwargs = dict(CASES[case])
    got = config(kwargs.pop("name"), **kwargs)
    assert set(got) <= DEEPSPEED_KEYS[""], set(got) - DEEPSPEED_KEYS[""]
    for section, keys in got.items():
        if isinstance(keys, dict):
            assert set(keys) <= DEEPSPEED_KEYS[section], (section, set(keys) - DEEPSPEED_KEYS[section])
    assert got["optimizer"]["type"] in OPTIMIZER_TYPES
    assert "v0.19.5" in DEEPSPEED_SOURCE and "cf44300453eb0af79ed84ed8f1cb49d57478bd76" in DEEPSPEED_SOURCE


def test_the_batch_multiplies_out_as_deepspeed_checks_it():
    got = config("tiny-llama", devices=4, batch=16, micro=2, zero=2, optimizer="adam", precision="bf16")
    assert (got["train_batch_size"], got["train_micro_batch_size_per_gpu"], got["gradient_accumulation_steps"]) == \
        (16, 2, 2)
    assert got["train_batch_size"] == got["train_micro_batch_size_per_gpu"] * got["gradient_accumulation_steps"] * 4
    assert got["bf16"] == {"enabled": True} and "fp16" not in got
    assert got["zero_optimization"] == {"stage": 2, "overlap_comm": True, "reduce_bucket_size": 25 * 2 ** 20 // 2}
    assert got["optimizer"] == {"type": "Adam"} and "zero_allow_untested_optimizer" not in got


def test_optimisers_precision_overlap_and_checkpointing():
    sgd = config("resnet18", devices=4, batch=64, zero=1, precision="fp16", optimizer="momentum", overlap="data@50")
    assert sgd["optimizer"] == {"type": "SGD", "params": {"momentum": 0.9}} and sgd["zero_allow_untested_optimizer"]
    assert sgd["fp16"] == {"enabled": True}
    assert sgd["zero_optimization"]["reduce_bucket_size"] == 50 * 2 ** 20 // 2
    fp32 = config("lenet5", devices=2, batch=8, overlap="none")
    assert "bf16" not in fp32 and "fp16" not in fp32 and fp32["zero_optimization"]["overlap_comm"] is False
    assert fp32["zero_optimization"]["reduce_bucket_size"] == 25 * 2 ** 20 // 4
    assert fp32["optimizer"] == {"type": "SGD", "params": {"momentum": 0.9}}
    full = config("tiny-llama", devices=4, batch=8, recompute="full", optimizer="adam")
    assert full["activation_checkpointing"] == {"partition_activations": False}
    assert "activation_checkpointing" not in config("tiny-llama", devices=4, batch=8)


@pytest.mark.parametrize("plan, layer, says", [
    (lambda: uniform_plan("gpt-tiny", tensor=2), "embed", "set in the script"),
    (lambda: uniform_plan("gpt-tiny", devices=8, batch=16, stages=2, micro=2, firsts=("embed", "h1.ln1")), "h1.ln1",
     "PipelineModule"),
    (lambda: data_plan("gpt-tiny", devices=4, batch=6), "embed", "does not split"),
    (lambda: data_plan("tiny-llama", devices=4, batch=8, recompute="selective"), "h0.attn", "recomputed selective"),
    (lambda: data_plan("tiny-llama", devices=4, batch=8, precision="fp8"), None, "FP8"),
    (lambda: data_plan("tiny-llama", devices=4, batch=8, precision="tf32"), None, "TF32"),
])
def test_what_deepspeed_json_cannot_say_is_one_line(plan, layer, says):
    with pytest.raises(DnnplanError) as err:
        deepspeed_config(*plan())
    assert err.value.layer == layer and says in err.value.bare, (err.value.layer, err.value.bare)
    assert "\n" not in str(err.value)


def test_attention_other_than_the_machines_default_is_refused():
    plan, net = data_plan("tiny-llama", devices=4, batch=8, machine="dgx-h100")
    unfused = swapped(plan, "h0.attn", algorithm="materialized")
    with pytest.raises(DnnplanError) as err:
        deepspeed_config(unfused, net)
    assert err.value.layer == "h0.attn" and "the script's" in err.value.bare


def test_a_convolution_algorithm_other_than_the_default_is_refused():
    """The JSON names no convolution algorithm, and is read back with each at the default: a CNN's
    plan whose convolution runs another is refused naming it (--nearest takes the default)."""
    plan, net = data_plan("resnet18", devices=4, batch=64, optimizer="momentum")
    direct = swapped(plan, "layer1.0.conv2", algorithm="direct")
    with pytest.raises(DnnplanError) as err:
        deepspeed_config(direct, net)
    assert err.value.layer == "layer1.0.conv2" and "by direct, where" in err.value.bare
    assert "--nearest" in err.value.hint
    assert deepspeed_config(plan, net)["train_batch_size"] == 64
    recomputed, rnet = data_plan("resnet18", devices=4, batch=64, optimizer="momentum", recompute="full")
    with pytest.raises(DnnplanError) as err:  # a file of a CNN that checkpoints is refused when read back
        deepspeed_config(recomputed, rnet)
    assert "resnet18 has no transformer layers" in err.value.bare and "--nearest" in err.value.hint
