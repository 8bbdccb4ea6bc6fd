"""DeepSpeed's ds_config.json read back (pure): :func:`read`, the reader of :mod:`planner.launch_import`.

Every key is named as DeepSpeed reads it at deepspeedai/DeepSpeed v0.19.5, the release
:mod:`planner.export.deepspeed` writes for (``deepspeed/runtime/constants.py``,
``deepspeed/runtime/zero/config.py``, ``deepspeed/runtime/activation_checkpointing/config.py``); each
is read (:data:`READ`), listed as ignored with the reason (:data:`IGNORED`), or refused as unknown.

The JSON states data parallelism and ZeRO; the model, and any tensor, pipeline, sequence or expert
parallelism, are the script's. So the network is ``--network``, every device is a data-parallel rank,
and a ``pipeline`` or ``tensor_parallel`` section is refused (dnnplan does not read the script).
What DeepSpeed does with the keys, read in the same source, is kept:

- the batch: ``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x
  devices`` (runtime/config.py ``_batch_assertion``); with all three the devices are what they
  leave, with the batch and the micro-batch the accumulation is what the devices leave
  (``--devices``), with the micro-batch and the accumulation the batch is their product with the
  devices, with the batch alone or with the accumulation the micro-batch is what the devices
  leave (DeepSpeed's ``_set_batch_related_parameters``; :func:`with_world_size`);
- ZeRO: ``zero_optimization.stage`` (a bare true or false: stage 1 or 0, as config.py reads it);
  ``overlap_comm`` (DeepSpeed's default: on at stage 3 only) is overlap ``data``, else ``none``;
  ``reduce_bucket_size`` (elements; default 5e8) the gradient bucket in MiB at the gradients' type;
  offloading, ZeRO++'s hierarchical partitions and MiCS are not priced;
- precision: ``bf16`` (or its old name ``bfloat16``) or ``fp16`` enabled, not both (DeepSpeed
  refuses it); neither is fp32;
- the optimiser: Adam or AdamW (adam); SGD with a ``momentum`` above 0 (momentum) or without (sgd);
  others are not priced;
- ``activation_checkpointing``: the script recomputes every transformer layer (full), the section's
  presence is what says it (the export writes it so); CPU checkpointing is not priced;
- a key given twice in one object is refused, as DeepSpeed loads the file refusing duplicate keys.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from costmodel.choices.training import TrainingChoices
from costmodel.machine.model import MAX_DEVICES
from networks.errors import DnnplanError, did_you_mean, short
from planner.export.deepspeed import GRAD_BYTES
from planner.launch_import.launch_config import Ignored, LaunchConfig
from planner.launch_import.value_kinds import BOOL, typed, whole_at_least

#: the keys read, by section ("" the top level)
READ = {
    "": {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "bf16",
         "bfloat16", "fp16", "zero_optimization", "activation_checkpointing"},
    "optimizer": {"type", "params"},
    "bf16": {"enabled"}, "bfloat16": {"enabled"}, "fp16": {"enabled"},
    "zero_optimization": {"stage", "overlap_comm", "reduce_bucket_size", "offload_optimizer", "offload_param",
                          "cpu_offload", "cpu_offload_param", "zero_hpz_partition_size", "mics_shard_size"},
    "activation_checkpointing": {"cpu_checkpointing"},
}
#: keys that do not change the step dnnplan prices, by the reason ("*": the whole section)
IGNORED = {
    "logging, monitoring and checkpoints: outside the training step": {
        "": {"steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state", "tensorboard", "wandb",
             "csv_monitor", "comet", "flops_profiler", "comms_logger", "checkpoint", "elasticity", "autotuning",
             "timers", "aio", "data_efficiency", "curriculum_learning"}},
    "the learning rate and the optimiser's settings: a step's work does not depend on them": {
        "": {"scheduler", "gradient_clipping", "prescale_gradients", "gradient_predivide_factor",
             "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer"}},
    "the loss scaling and the mixed precision's settings: dnnplan prices the step's work alike": {
        "fp16": {"auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                 "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"},
        "bf16": {"immediate_grad_update", "check_grad_overflow"},
        "bfloat16": {"immediate_grad_update", "check_grad_overflow"}},
    "the gradients' precision in their reduction: dnnplan prices it in the weights'": {
        "": {"communication_data_type"}},
    "an implementation switch (bucketing, partitioning's bookkeeping, checkpointing's): dnnplan prices the "
    "collectives' volumes alike": {
        "zero_optimization": {"contiguous_gradients", "reduce_scatter", "allgather_partitions", "allgather_bucket_size",
                              "use_multi_rank_bucket_allreduce", "load_from_fp32_weights", "elastic_checkpoint",
                              "sub_group_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                              "stage3_model_persistence_threshold", "stage3_max_live_parameters",
                              "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
                              "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters",
                              "round_robin_gradients", "memory_efficient_linear", "prefetch_bucket_size",
                              "param_persistence_threshold", "max_live_parameters", "max_reuse_distance"},
        "activation_checkpointing": {"partition_activations", "contiguous_memory_optimization", "number_checkpoints",
                                     "synchronize_checkpoint_boundary", "profile"}},
    "read by DeepSpeed and used nowhere else (runtime/config.py sets it; no other file reads it)": {
        "": {"disable_allgather"}},
}
#: sections the script's parallelism configures, refused with the reason
SCRIPT_SECTIONS = {"pipeline": "the pipeline's stages are the script's (PipelineModule(num_stages=...))",
                   "tensor_parallel": "AutoTP's tensor parallelism is not read yet",
                   "sequence_parallel_size": "Ulysses sequence parallelism is not read yet"}
#: DeepSpeed's default reduce_bucket_size (zero/config.py), in elements
DEFAULT_REDUCE_BUCKET = 500_000_000
#: the largest reduce_bucket_size read (elements): 4 TB in float32, past any GPU's memory
MAX_REDUCE_BUCKET = 10 ** 12
ADAM_TYPES = ("adam", "adamw")
#: Hugging Face Trainer's placeholder, which transformers fills in from its own arguments before DeepSpeed reads it
AUTO = "\"auto\" is filled in by Hugging Face's Trainer from its arguments: write the value it runs with"
HINT = "see docs/export.md, \"Importing a launch configuration\", for the keys dnnplan reads"


class DuplicateKey(Exception):
    """A key an object of the JSON gives twice (``key``)."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """An object of the JSON, refusing a key given twice as DeepSpeed does (deepspeed/runtime/config_utils.py
    ``dict_raise_error_on_duplicate_keys``, the ``object_pairs_hook`` runtime/config.py loads the file with)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


class Config:
    """The JSON's keys, read and checked one by one, with the line each stands on."""

    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        try:
            self.data = json.loads(text, object_pairs_hook=no_duplicates)
        except json.JSONDecodeError as err:
            raise DnnplanError(f"not JSON: {err.msg}", file=path, line=err.lineno,
                               hint="write the DeepSpeed config as JSON") from None
        except (RecursionError, ValueError) as err:  # deep nesting; a number past Python's 4,300-digit limit
            deep = isinstance(err, RecursionError)
            raise DnnplanError("not a DeepSpeed config: " + ("it nests too deeply" if deep else
                                                              "a number has more digits than Python reads (4,300)"),
                               file=path, hint="write the DeepSpeed config as JSON" if deep else
                               "write each number as the run takes it") from None
        except DuplicateKey as twice:
            found = list(re.finditer(rf'"{re.escape(twice.key)}"\s*:', text))
            raise DnnplanError(f"{short(twice.key)} given twice: DeepSpeed refuses a config with duplicate keys",
                               file=path, line=text.count("\n", 0, found[1].start()) + 1 if len(found) > 1 else None,
                               hint="give it once") from None
        if not isinstance(self.data, dict):
            raise DnnplanError(f"not a DeepSpeed config: a JSON {type(self.data).__name__}, not an object",
                               file=path, hint="write {\"train_batch_size\": ..., ...}")
        self.ignored: dict[str, str] = {}

    def line_of(self, where: str) -> int | None:
        """The line of ``where`` (``section.key``: the key after its section's), as the file writes it."""
        start = 0
        for key in where.split("."):
            match = re.compile(rf'"{re.escape(key)}"\s*:').search(self.text, start)
            if match is None:
                return None
            start = match.start()
        return self.text.count("\n", 0, start) + 1

    def refuse(self, where: str, message: str, hint: str | None = None) -> DnnplanError:
        return DnnplanError(f"{where}: {message}", file=self.path, line=self.line_of(where), hint=hint)

    def section(self, name: str) -> dict:
        value = self.data.get(name, {})
        if not isinstance(value, dict):
            raise self.refuse(name, f"takes an object, got {short(value)}", hint=f"write \"{name}\": {{...}}")
        return value

    def integer(self, where: str, value: Any, least: int = 1) -> int:
        hint = AUTO if value == "auto" else f"write \"{where.split('.')[-1]}\": N"
        return int(typed(value, whole_at_least(least), lambda message: self.refuse(where, message, hint=hint)))

    def flag(self, where: str, value: Any) -> bool:
        hint = AUTO if value == "auto" else "write true or false"
        return typed(value, BOOL, lambda message: self.refuse(where, message, hint=hint))


def read(text: str, path: str) -> LaunchConfig:
    """The configuration of DeepSpeed's JSON ``text`` (the file at ``path``; module docstring); one
    line naming the key and the file for a mistake."""
    config = Config(text, path)
    check_keys(config)
    precision = read_precision(config)
    devices, micro, batch, steps = batching(config)
    raw = config.data.get("zero_optimization", {})
    zero = {"stage": int(raw)} if isinstance(raw, bool) else config.section("zero_optimization")
    stage = zero_stage(config, zero)
    overlap = overlap_mode(config, zero, stage, precision)
    recompute = "none"
    if "activation_checkpointing" in config.data:
        checkpointing = config.section("activation_checkpointing")
        if config.flag("activation_checkpointing.cpu_checkpointing", checkpointing.get("cpu_checkpointing", False)):
            raise config.refuse("activation_checkpointing.cpu_checkpointing", "checkpoints in host memory, which "
                                "is not priced", hint="set it false")
        recompute = "full"
    choices = TrainingChoices(precision=precision, optimizer=optimizer(config), zero=stage, overlap=overlap)
    devices_from = ("train_batch_size / (train_micro_batch_size_per_gpu x gradient_accumulation_steps)"
                    if devices else "the JSON states no world size (the launcher's --num_gpus, --num_nodes)")
    return LaunchConfig(path=path, framework="deepspeed", network=None, shape=None, devices=devices,
                        devices_from=devices_from, batch=batch, micro_batch=micro, accumulation=steps,
                        recompute=recompute,
                        choices=choices, ignored=tuple(Ignored(k, r) for k, r in config.ignored.items()))


def check_keys(config: Config) -> None:
    """Every key one DeepSpeed reads: read, or ignored with its reason; one line for another."""
    reasons = {(section, key): reason for reason, sections in IGNORED.items()
               for section, keys in sections.items() for key in keys}
    for key, value in config.data.items():
        if key in SCRIPT_SECTIONS:
            raise config.refuse(key, SCRIPT_SECTIONS[key], hint="predict the data-parallel run, or give Megatron-LM's "
                                "arguments for model parallelism")
        check_key(config, "", key, reasons)
        if key in READ and key != "optimizer" and isinstance(value, dict):
            for inner in value:
                check_key(config, key, inner, reasons)


def check_key(config: Config, section: str, key: str, reasons: dict) -> None:
    where = f"{section}.{key}" if section else key
    if (section, key) in reasons:
        config.ignored[where] = reasons[section, key]
    elif key not in READ.get(section, ()):
        known = [f"{s}.{k}" if s else k for s, keys in READ.items() for k in keys]
        near = did_you_mean(where, known + [f"{s}.{k}" if s else k for s, k in reasons])
        raise config.refuse(where, "unknown key: not one dnnplan reads of DeepSpeed's config (it may change what "
                            "runs)", hint=f"did you mean {near}?" if near else f"remove it to predict without it; "
                                          f"{HINT}")


def read_precision(config: Config) -> str:
    enabled = [name for name in ("bf16", "bfloat16", "fp16")
               if name in config.data and config.flag(f"{name}.enabled", config.section(name).get("enabled", False))]
    if "fp16" in enabled and len(enabled) > 1:
        raise config.refuse("fp16", "enabled with bf16: DeepSpeed runs one of them", hint="enable one")
    return "fp16" if enabled == ["fp16"] else "bf16" if enabled else "fp32"


def batching(config: Config) -> tuple[int | None, int, int | None, int | None]:
    """(devices the three batch keys leave or None, the micro-batch a device, the step's batch or None,
    the accumulation steps where the batch is not given, else None: the batch is then the micro-batch
    x the steps x the devices, as DeepSpeed sets it), checked as DeepSpeed checks them."""
    batch_key, micro_key = "train_batch_size", "train_micro_batch_size_per_gpu"
    steps_key = "gradient_accumulation_steps"
    batch = config.integer(batch_key, config.data[batch_key]) if batch_key in config.data else None
    steps = config.integer(steps_key, config.data[steps_key]) if steps_key in config.data else None
    if micro_key not in config.data:
        if batch is None:  # DeepSpeed's _configure_train_batch_size refuses it
            raise DnnplanError(f"neither {batch_key} nor {micro_key} is given: DeepSpeed needs one", file=config.path,
                               hint=f"add \"{micro_key}\": N")
        # DeepSpeed sets it to the batch over the accumulation (1 where not given) and the world size
        # (runtime/config.py _set_batch_related_parameters): :func:`with_world_size`, once it is known
        return None, None, batch, steps or 1
    micro = config.integer(micro_key, config.data[micro_key])
    if batch is None:  # DeepSpeed sets it to micro x steps x the world size (runtime/config.py _set_batch_related_parameters)
        return None, micro, None, steps
    if batch % micro:
        raise config.refuse(batch_key, f"{batch} is not a multiple of {micro_key} {micro}", hint="make it one")
    if steps is None:
        return None, micro, batch, None
    if batch % (micro * steps):
        raise config.refuse(batch_key, f"{batch} is not {micro_key} {micro} x {steps_key} {steps} x the devices "
                            "(DeepSpeed checks it)", hint="make the three agree")
    devices = batch // (micro * steps)
    if devices > MAX_DEVICES:
        raise config.refuse(batch_key, f"{short(batch)} over {micro_key} {micro} x {steps_key} {steps} leaves more "
                            f"devices than dnnplan plans for (at most 2^20 = {MAX_DEVICES})",
                            hint="give the batch the run takes")
    return devices, micro, batch, None


def with_world_size(config: LaunchConfig, devices: int) -> LaunchConfig:
    """``config`` (a DeepSpeed JSON without ``train_micro_batch_size_per_gpu``) on ``devices``: the
    micro-batch a device DeepSpeed sets, ``train_batch_size / (gradient_accumulation_steps x
    devices)``; one line naming the file where they do not divide."""
    if config.micro_batch is not None:
        return config
    steps = config.accumulation or 1
    if config.batch % (steps * devices):
        raise DnnplanError(f"train_batch_size {config.batch} is not gradient_accumulation_steps {steps} x {devices} "
                           "devices x a micro-batch (DeepSpeed checks it)", file=config.path,
                           hint="give train_micro_batch_size_per_gpu, or a batch the devices divide")
    return replace(config, micro_batch=config.batch // (steps * devices), accumulation=None)


def zero_stage(config: Config, zero: dict) -> int:
    stage = zero.get("stage", 0)
    if stage not in (0, 1, 2, 3) or isinstance(stage, bool):
        raise config.refuse("zero_optimization.stage", f"takes 0, 1, 2 or 3, got {short(stage)}",
                            hint="write \"stage\": 0 to 3")
    for key in ("offload_optimizer", "offload_param", "cpu_offload", "cpu_offload_param"):
        if zero.get(key) not in (None, False, {}) and (not isinstance(zero.get(key), dict)
                                                       or zero[key].get("device", "none") != "none"):
            raise config.refuse(f"zero_optimization.{key}", "offloads to host memory or NVMe, which is not priced",
                                hint="leave it out to predict on the devices")
    for key, off in (("zero_hpz_partition_size", 1), ("mics_shard_size", -1)):
        if zero.get(key, off) != off:
            raise config.refuse(f"zero_optimization.{key}", f"{short(zero[key])}: hierarchical partitions (ZeRO++ "
                                "hpZ, MiCS) are not priced", hint=f"leave {key} out")
    return stage


def overlap_mode(config: Config, zero: dict, stage: int, precision: str) -> str:
    """``data@MiB`` when DeepSpeed overlaps its collectives (the bucket in MiB), else ``none``."""
    overlap = zero.get("overlap_comm", stage == 3)
    if overlap is not None:
        config.flag("zero_optimization.overlap_comm", overlap)
    if not overlap:
        return "none"
    elements = config.integer("zero_optimization.reduce_bucket_size",
                              zero.get("reduce_bucket_size", DEFAULT_REDUCE_BUCKET))
    if elements > MAX_REDUCE_BUCKET:
        raise config.refuse("zero_optimization.reduce_bucket_size", f"more than {MAX_REDUCE_BUCKET:.0e} elements: a "
                            "bucket larger than any GPU's memory", hint=f"give DeepSpeed's default, "
                                                                        f"{DEFAULT_REDUCE_BUCKET:.0e}, or the size the run takes")
    return f"data@{elements * GRAD_BYTES[precision] / 2 ** 20:g}"


def optimizer(config: Config) -> str:
    section = config.section("optimizer")
    kind = section.get("type", "Adam")
    if not isinstance(kind, str):
        raise config.refuse("optimizer.type", f"takes a name, got {short(kind)}", hint="write \"type\": \"Adam\"")
    params = section.get("params", {})
    if not isinstance(params, dict):
        raise config.refuse("optimizer.params", f"takes an object, got {short(params)}", hint="write \"params\": {...}")
    for key in params:
        if key != "momentum":
            config.ignored[f"optimizer.params.{key}"] = "the optimiser's settings: a step's work does not depend " \
                                                        "on them"
    if kind.lower() in ADAM_TYPES:
        return "adam"
    if kind == "SGD":
        momentum = params.get("momentum", 0)
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
            raise config.refuse("optimizer.params.momentum", f"takes a number, got {short(momentum)}",
                                hint="write \"momentum\": 0.9")
        return "momentum" if momentum else "sgd"
    raise config.refuse("optimizer.type", f"{short(kind)} is not an optimiser dnnplan prices",
                        hint="write Adam, AdamW or SGD")
