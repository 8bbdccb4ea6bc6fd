"""DeepSpeed's ds_config.json read back (planner.launch_import.deepspeed): a config as users write
them reads to the world size, batch, ZeRO stage, overlap and choices DeepSpeed would run; what does
not change the step is listed as ignored; every mistake (an unknown key, a bad type, contradictory or
non-dividing batch sizes, a missing micro-batch, the script's parallelism, what dnnplan does not
price) is one line naming the key and the file."""

from __future__ import annotations

import dataclasses
import json

import pytest

from costmodel.calls.algorithms import DEFAULT_CONV_ALGORITHM
from costmodel.frameworks.uniform import data_strategy
from costmodel.machine.loading import load_machine
from networks.errors import DnnplanError
from networks.loader import load_network
from planner.launch_import.deepspeed import read, with_world_size
from planner.launch_import.formats import read_launch
from planner.launch_import.to_plan import launch_plan

#: a ZeRO-3 config as DeepSpeed's tutorials write them: bf16, AdamW with its settings, a scheduler,
#: clipping, logging, the stage-3 tuning knobs
USERS = {
    "train_batch_size": 256,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 2,
    "steps_per_print": 100,
    "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 1000}},
    "bf16": {"enabled": True},
    "zero_optimization": {"stage": 3, "overlap_comm": True, "contiguous_gradients": True,
                          "reduce_bucket_size": 50_000_000, "stage3_prefetch_bucket_size": 50_000_000,
                          "stage3_param_persistence_threshold": 100_000},
    "activation_checkpointing": {"partition_activations": False, "contiguous_memory_optimization": False},
    "wall_clock_breakdown": False,
}


def text(**change) -> str:
    out = dict(USERS)
    for key, value in change.items():
        if value is None:
            out.pop(key)
        else:
            out[key] = value
    return json.dumps(out, indent=2)


def test_a_users_config_reads_to_what_deepspeed_runs():
    got = read_launch(text(), "ds_config.json")
    assert got.framework == "deepspeed" and got.network is None and got.shape is None
    assert (got.devices, got.micro_batch, got.batch) == (32, 4, 256)  # 256 / (4 x 2)
    assert (got.tensor, got.stages, got.recompute) == (1, 1, "full")
    c = got.choices
    # 5e7 bf16 elements are 95.37 MiB
    assert (c.precision, c.optimizer, c.zero, c.overlap) == ("bf16", "adam", 3, f"data@{5e7 * 2 / 2 ** 20:g}")
    ignored = {i.option for i in got.ignored}
    assert {"scheduler", "gradient_clipping", "optimizer.params.lr", "zero_optimization.stage3_prefetch_bucket_size",
            "activation_checkpointing.partition_activations"} <= ignored


def test_the_batch_keys_and_defaults():
    two = read(text(gradient_accumulation_steps=None), "a.json")
    assert (two.devices, two.batch, two.micro_batch) == (None, 256, 4)  # the world size is --devices
    one = read(text(train_batch_size=None, gradient_accumulation_steps=None), "a.json")
    assert (one.batch, one.micro_batch) == (None, 4)
    plain = read(text(zero_optimization={"stage": 1}, bf16=None, optimizer={"type": "SGD", "params": {"momentum": 0.9}},
                      activation_checkpointing=None), "a.json")
    assert (plain.choices.zero, plain.choices.overlap, plain.choices.precision, plain.choices.optimizer) == \
        (1, "none", "fp32", "momentum")  # overlap_comm is DeepSpeed's default: on at stage 3 only
    assert plain.recompute == "none"
    assert read(text(zero_optimization=True), "a.json").choices.zero == 1  # a bare true: stage 1


def line(body: str, path: str = "ds_config.json") -> DnnplanError:
    with pytest.raises(DnnplanError) as err:
        read(body, path)
    message = str(err.value)
    assert "\n" not in message and path in message, message
    return err.value


@pytest.mark.parametrize("body, says", [
    # unknown keys, with the one meant
    (text(train_batch_sizes=256), "did you mean train_batch_size"),
    (text(zero_optimization={"stage": 3, "overlap_com": True}), "zero_optimization.overlap_com: unknown key"),
    # bad types
    (text(zero_optimization={"stage": "3"}), "takes 0, 1, 2 or 3"),
    (text(train_batch_size="256"), "takes an integer"),
    (text(bf16={"enabled": "yes"}), "takes true or false"),
    # contradictory values
    (text(fp16={"enabled": True}), "enabled with bf16"),
    (text(train_batch_size=250), "not a multiple of train_micro_batch_size_per_gpu 4"),
    (text(train_batch_size=260), "x the devices"),
    # missing
    (text(train_micro_batch_size_per_gpu=None, train_batch_size=None), "neither train_batch_size nor "
                                                                         "train_micro_batch_size_per_gpu is given"),
    # the script's parallelism, and what dnnplan does not price
    (text(pipeline={"stages": 4}), "PipelineModule"),
    (text(tensor_parallel={"autotp_size": 4}), "AutoTP"),
    (text(zero_optimization={"stage": 3, "offload_optimizer": {"device": "cpu"}}), "offloads"),
    (text(zero_optimization={"stage": 3, "zero_hpz_partition_size": 8}), "hierarchical partitions"),
    (text(optimizer={"type": "Lamb"}), "'Lamb' is not an optimiser"),
    # not JSON: the line
    (text().replace('"steps_per_print": 100,', '"steps_per_print": 100,,'), "not JSON"),
    # JSON Python's reader cannot hold: nesting past its recursion limit, a number past 4,300 digits
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    (text(zero_optimization={"stage": 3, "reduce_bucket_size": 1e300}), "a bucket larger than any GPU's memory"),
    ('{"train_batch_size": ' + "9" * 5000 + "}", "more digits than Python reads"),
])
def test_a_bad_config_is_one_line_naming_the_key_and_file(body, says):
    err = line(body)
    assert says in str(err), str(err)


def test_without_the_batch_the_accumulation_makes_it_with_the_devices():
    """train_batch_size left out: DeepSpeed sets it to the micro-batch x the accumulation x the world
    size (runtime/config.py _set_batch_related_parameters), so 2 micro-batches of 4 on each of 8 devices."""
    config = read_launch(text(train_batch_size=None, activation_checkpointing=None), "ds_config.json")
    assert (config.devices, config.batch, config.accumulation) == (None, None, 2)
    plan = launch_plan(config, load_network("resnet50"), "resnet50", 8, load_machine("dgx-a100"))
    assert (plan.batch, plan.pipeline.micro_batches) == (64, 2)


def test_the_line_of_the_key_is_named():
    body = text(zero_optimization={"stage": "3"})
    err = line(body)
    assert err.line == next(i for i, row in enumerate(body.splitlines(), 1) if '"stage"' in row)
    fp16 = text(fp16={"enabled": "yes"})
    assert line(fp16).line == next(i for i, row in enumerate(fp16.splitlines(), 1) if '"fp16"' in row) + 1


def test_hugging_faces_auto_placeholders_are_named():
    err = line(text(train_micro_batch_size_per_gpu="auto"))
    assert "Hugging Face's Trainer" in err.hint


def test_a_cnn_reads_as_data_parallelism_on_every_layer():
    """A network without transformer layers: every layer split over every device by its samples,
    as the exporter's nearest plan writes it (costmodel.frameworks.uniform.data_strategy), in the
    file's micro-batches, with the default convolution algorithms (the file names none)."""
    config = read_launch(json.dumps({"train_batch_size": 256, "train_micro_batch_size_per_gpu": 16,
                                     "gradient_accumulation_steps": 2}), "ds_config.json")
    net = load_network("resnet50")
    plan = launch_plan(config, net, "resnet50", 8, load_machine("dgx-a100"))
    assert (plan.batch, plan.devices, plan.pipeline.stages, plan.pipeline.micro_batches) == (256, 8, 1, 2)
    assert all(lp.strategy == data_strategy(layer, 8, 128) for lp, layer in zip(plan.layers, net.layers))
    assert {lp.algorithm for lp, layer in zip(plan.layers, net.layers) if layer.op == "conv2d"} == \
        {DEFAULT_CONV_ALGORITHM}
    with pytest.raises(DnnplanError, match="global batch 250 is not a multiple"):
        launch_plan(dataclasses.replace(config, batch=250), net, "resnet50", 8, load_machine("dgx-a100"))


def test_a_key_given_twice_is_refused_as_deepspeed_refuses_it():
    """DeepSpeed loads its config with dict_raise_error_on_duplicate_keys: a key twice is an error,
    not the last value."""
    text = ('{\n  "train_batch_size": 64,\n  "train_micro_batch_size_per_gpu": 2,\n  "train_batch_size": 32,\n'
            '  "gradient_accumulation_steps": 4\n}\n')
    with pytest.raises(DnnplanError) as err:
        read(text, "ds.json")
    assert str(err.value) == "ds.json:4: 'train_batch_size' given twice: DeepSpeed refuses a config with duplicate " \
                             "keys (give it once)"
    with pytest.raises(DnnplanError, match="'stage' given twice"):
        read('{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 1, "stage": 3}}', "ds.json")


def test_a_batch_that_leaves_more_devices_than_dnnplan_plans_for_names_the_key():
    with pytest.raises(DnnplanError) as err:
        read('{\n  "train_batch_size": 1e30,\n  "train_micro_batch_size_per_gpu": 1,\n'
             '  "gradient_accumulation_steps": 1\n}', "ds.json")
    assert str(err.value).startswith("ds.json:2: train_batch_size: ") and "more devices than dnnplan plans for" in \
        str(err.value), str(err.value)


def test_a_key_deepspeed_reads_and_never_uses_is_listed_as_ignored():
    """``disable_allgather``: deepspeed/runtime/config.py at v0.19.5 reads it into its config, and no
    other file of the release reads it."""
    got = read_launch(text(disable_allgather=True), "ds_config.json")
    assert "disable_allgather" in {i.option for i in got.ignored}


def test_without_the_micro_batch_the_devices_leave_it_as_deepspeed_sets_it():
    """DeepSpeed's getting-started config gives train_batch_size alone (docs/_tutorials/getting-started.md
    at v0.19.5): the micro-batch a device is the batch over the accumulation and the world size
    (runtime/config.py _set_batch_related_parameters), once --devices gives it."""
    got = read_launch(text(train_micro_batch_size_per_gpu=None), "ds_config.json")
    assert (got.devices, got.micro_batch, got.batch, got.accumulation) == (None, None, 256, 2)
    on_32 = with_world_size(got, 32)
    assert (on_32.micro_batch, on_32.batch, on_32.accumulation) == (4, 256, None)  # 256 / (2 x 32)
    with pytest.raises(DnnplanError, match=r"ds_config.json: train_batch_size 256 is not gradient_accumulation_steps "
                                           r"2 x 24 devices x a micro-batch"):
        with_world_size(got, 24)
