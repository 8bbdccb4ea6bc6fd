"""torchtitan's job TOML read back (pure): :func:`read`, the reader of :mod:`planner.launch_import`.

Every section and key is named as torchtitan's 0.2 releases read them (``torchtitan/config/job_config.py``
at pytorch/torchtitan v0.2.2, the release :mod:`planner.export.torchtitan` writes for); each key is
read (:data:`planner.launch_import.torchtitan_options.READ`), listed as ignored with the reason
(:data:`~planner.launch_import.torchtitan_options.IGNORED`: it does not change the step
dnnplan prices), or refused as unknown. A key left out takes torchtitan's default (job_config.py).

What torchtitan does with the keys, read in the same source, is kept:

- the devices are ``data_parallel_replicate_degree x data_parallel_shard_degree x
  context_parallel_degree x tensor_parallel_degree x pipeline_parallel_degree`` (parallel_dims.py);
  a shard degree of -1 takes the devices left, so the world size is then ``--devices``;
- the data-parallel ranks: a shard degree above 1 is FSDP, ZeRO-3 when it reshards after the forward
  (``fsdp_reshard_after_forward`` ``always``, or ``default`` without a pipeline) and ZeRO-2 when it
  keeps the weights gathered to the backward (``never``, or ``default`` with a pipeline:
  llama3/infra/parallelize.py); a replicate degree alone is DDP (ZeRO-0), which torchtitan runs only
  without other parallelism; both above 1 (HSDP) dnnplan does not price;
- tensor parallelism splits the norms over the sequence (sequence parallelism); async tensor
  parallelism (``enable_async_tensor_parallel``, which needs ``[compile] enable`` with the model) is
  overlap ``all``, else ``data`` (FSDP prefetches, DDP overlaps its 25 MB buckets);
- the batch: ``local_batch_size`` a data-parallel rank's, ``global_batch_size`` (default: local x data
  ranks) a step's, the rest gradient accumulation (train.py); under a pipeline a micro-batch is
  ``pipeline_parallel_microbatch_size`` samples, which must divide the local batch;
- the pipeline's cut: ``module_fqns_per_model_part`` (``tok_embeddings``, ``layers.i``, ``norm``,
  ``output``), or an even cut when ``pipeline_parallel_first_stage_less_layers`` and
  ``..._last_stage_less_layers`` are 0, or torchtitan's own cut by the layers of the flavor the file
  names (:mod:`planner.launch_import.torchtitan_cut`: the first and last stages a layer short by
  default, ``pipeline_parallel_layers_per_stage``), refused with the fix for a flavor dnnplan does
  not know; schedules GPipe, 1F1B and
  Interleaved1F1B (case-insensitive, as torch's get_schedule_class reads them);
- recomputation ``none`` or ``full`` (every transformer layer); torchtitan's default ``selective``
  (every n-th layer, or per op) and ``memory_budget`` dnnplan does not price;
- precision: ``mixed_precision_param`` bfloat16 (bf16) or float32 (fp32), the
  ``quantize.linear.float8`` converter bf16 with FP8 GEMMs (fp8); ``training.dtype = "bfloat16"``
  (no float32 master weights) and CPU offload are not priced;
- the optimiser: Adam or AdamW (adam), the only two torchtitan builds;
- the model: a flavor torchtitan ships that dnnplan's zoo holds
  (:data:`planner.export.torchtitan.FLAVORS`), or a flavor named as a zoo network (what
  `dnnplan export` writes for a network torchtitan does not ship); otherwise ``--network``. A name
  or flavor left out is torchtitan's default (``llama3``, ``debugmodel``);
- FP8: the ``quantize.linear.float8`` converter runs every ``nn.Linear`` whose name holds none of
  ``[quantize.linear.float8] filter_fqns`` in FP8; dnnplan's fp8 is ``filter_fqns = ["output"]``
  (the transformer blocks' linear layers in FP8, the output layer in bf16), another list is refused;
- a key before any section is refused, as torchtitan's ConfigManager refuses a name that is not one
  of JobConfig's fields (config/manager.py ``_dict_to_dataclass``); the pipeline's keys without a
  pipeline are listed as ignored.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from costmodel.choices.training import TrainingChoices
from costmodel.machine.model import MAX_DEVICES
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError, did_you_mean, short
from networks.loader import load_network, zoo_names
from networks.ops.base import MAX_INT
from planner.export.megatron_model import gpt_shape
from planner.export.torchtitan import COMM_BACKENDS, FLAVORS, FLOAT8_CONVERTER, SCHEDULES
from planner.launch_import.launch_config import Ignored, LaunchConfig
from planner.launch_import.torchtitan_cut import CutError, torchtitan_cut
from planner.launch_import.torchtitan_options import (COMPILED, DEFAULTS, FP8_FILTER, HINT, IGNORED,
                                                      IGNORED_SUBSECTION, MOVED, PIPELINE_KEYS, PRECISIONS,
                                                      READ, RESHARD_POLICIES)
from planner.launch_import.value_kinds import typed


class Toml:
    """The file's sections, read and checked key by key, with where each key stands."""

    def __init__(self, text: str, path: str):
        self.text, self.path = text, path
        try:
            self.data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            line = re.search(r"line (\d+)", str(err))
            raise DnnplanError(f"not TOML: {str(err).split(' (at')[0]}", file=path,
                               line=int(line.group(1)) if line else None, hint="write the job config as TOML") from None
        self.sections = dict(flatten(self.data))
        self.ignored: dict[str, str] = {}

    def line_of(self, section: str, key: str | None = None) -> int | None:
        """The line of ``[section]`` (and ``key`` in it), as the file writes them."""
        current = ""
        for number, line in enumerate(self.text.splitlines(), 1):
            header = re.match(r"\s*\[([^\[\]]+)\]", line)
            if header:
                current = header.group(1).replace(" ", "")
                if current == section and key is None:
                    return number
            elif current == section and key and re.match(rf"\s*{re.escape(key)}\s*=", line):
                return number
        return None

    def refuse(self, section: str, key: str | None, message: str, hint: str | None = None) -> DnnplanError:
        where = f"[{section}] {key}" if key else f"[{section}]"
        return DnnplanError(f"{where}: {message}", file=self.path, line=self.line_of(section, key), hint=hint)

    def get(self, section: str, key: str) -> Any:
        """A key read (its kind checked), or torchtitan's default when the file leaves it out."""
        value = self.sections.get(section, {}).get(key, DEFAULTS.get(key))
        kind = READ[section][key]
        if value is None:
            return None
        hint = f"write {key} = <{kind.name}>"
        return typed(value, kind, lambda message: self.refuse(section, key, message, hint=hint))

    def degree(self, key: str, least: int = 1) -> int:
        value = self.get("parallelism", key)
        if value < least:
            raise self.refuse("parallelism", key, f"must be at least {least}, got {value}",
                              hint=f"write {key} = N, N >= {least}")
        if value > MAX_DEVICES:
            raise self.refuse("parallelism", key, f"{short(value)} is more devices than dnnplan plans for (at most "
                              f"2^20 = {MAX_DEVICES})", hint=f"write {key} = N, N <= {MAX_DEVICES}")
        return value


def flatten(data: dict, prefix: str = ""):
    """(section, its keys) for each table holding values, nested tables named by dots
    (``quantize.linear.float8``); a table of tables yields none of its own."""
    values = {k: v for k, v in data.items() if not isinstance(v, dict)}
    if prefix and (values or not data):
        yield prefix, values
    for key, value in data.items():
        if isinstance(value, dict):
            yield from flatten(value, f"{prefix}.{key}" if prefix else key)


def read(text: str, path: str) -> LaunchConfig:
    """The configuration of torchtitan's job TOML ``text`` (the file at ``path``; module docstring);
    one line naming the key and the file for a mistake."""
    toml = Toml(text, path)
    if not any(toml.sections.values()) and all(isinstance(value, dict) for value in toml.data.values()):
        raise DnnplanError("a torchtitan job TOML without a key: nothing to predict", file=path,
                           hint="write the job's [model], [parallelism] and [training] sections (`dnnplan export "
                                "PLAN --to torchtitan` writes them)")
    check_keys(toml)
    network = model_network(toml)
    precision = read_precision(toml)
    if toml.get("optimizer", "name") not in (None, "Adam", "AdamW"):
        raise toml.refuse("optimizer", "name", f"{short(toml.get('optimizer', 'name'))}: torchtitan builds Adam and "
                          "AdamW", hint="write name = \"AdamW\"")
    if toml.get("training", "enable_cpu_offload"):
        raise toml.refuse("training", "enable_cpu_offload", "FSDP's CPU offload is not priced",
                          hint="leave it out to predict on the devices")
    replicate, shard = toml.degree("data_parallel_replicate_degree"), toml.degree("data_parallel_shard_degree", -1)
    if shard == 0:
        raise toml.refuse("parallelism", "data_parallel_shard_degree", "must be -1 or at least 1, got 0",
                          hint="write data_parallel_shard_degree = -1 for the devices left")
    tensor, context = toml.degree("tensor_parallel_degree"), toml.degree("context_parallel_degree")
    stages = toml.degree("pipeline_parallel_degree")
    zero = zero_stage(toml, replicate, shard, tensor * context * stages, stages)
    data = replicate * shard if shard > 0 else None
    schedule, chunks, chunk_layers = pipeline(toml, stages, network)
    micro, batch = batching(toml, stages, data)
    expert, expert_tensor = experts(toml, tensor, context, shard)
    overlap = "all" if async_tensor_parallel(toml) else "data"
    mode = toml.get("activation_checkpoint", "mode")
    if mode not in ("none", "full"):
        default = "" if "mode" in toml.sections.get("activation_checkpoint", {}) else " (torchtitan's default)"
        raise toml.refuse("activation_checkpoint", "mode", f"{short(mode)}{default}: dnnplan prices no "
                          "recomputation or every transformer layer's (full), not torchtitan's selective or "
                          "memory-budget checkpointing", hint="write mode = \"full\" or \"none\"")
    rotate_method(toml, context)
    dispatch = toml.get("parallelism", "expert_parallel_comm_backend")
    if dispatch not in COMM_BACKENDS.values():
        raise toml.refuse("parallelism", "expert_parallel_comm_backend", f"unknown backend {short(dispatch)}",
                          hint="torchtitan takes standard or deepep")
    seq = toml.get("training", "seq_len")
    if not 1 <= seq <= MAX_INT:
        raise toml.refuse("training", "seq_len", f"must be from 1 to 2^31 tokens, got {short(seq)}",
                          hint="write seq_len = N")
    choices = TrainingChoices(precision=precision, optimizer="adam", zero=zero, overlap=overlap,
                              moe_dispatch={v: k for k, v in COMM_BACKENDS.items()}[dispatch],
                              seq=seq, schedule=schedule)
    devices = None if shard < 0 else replicate * shard * tensor * context * stages
    if (devices or tensor * context * stages) > MAX_DEVICES:
        raise toml.refuse("parallelism", None, f"the degrees make {short(devices or tensor * context * stages)} "
                          f"devices, more than dnnplan plans for (at most 2^20 = {MAX_DEVICES})",
                          hint="give degrees whose product is at most that")
    devices_from = (f"[parallelism]: replicate {replicate} x shard {shard} x tensor {tensor} x context {context} "
                    f"x pipeline {stages}") if devices else "data_parallel_shard_degree = -1 (the devices left)"
    return LaunchConfig(
        path=path, framework="torchtitan", network=network, shape=None, devices=devices, devices_from=devices_from,
        batch=batch, micro_batch=micro, tensor=tensor, context=context, expert=expert, expert_tensor=expert_tensor,
        sequence_parallel=tensor > 1, stages=stages, chunks=chunks, chunk_layers=chunk_layers, schedule=schedule,
        recompute=mode, choices=choices,
        ignored=tuple(Ignored(name, reason) for name, reason in toml.ignored.items()),
        unshipped_model=None if network else toml.get("model", "flavor"))


def rotate_method(toml: Toml, context: int) -> None:
    """``context_parallel_rotate_method``: torchtitan's default ``allgather`` (job_config.py at v0.2.2:
    every key/value shard all-gathered after the first sub-SDPA), the exchange ``--framework pytorch``
    prices (costmodel/frameworks/pytorch.yaml, ``context_parallel``); ``alltoall`` (the shards
    shuffled a step at a time, a ring) refused in one line where the sequence is split, listed as
    ignored without context parallelism (no exchange runs)."""
    method = toml.get("parallelism", "context_parallel_rotate_method")
    if "context_parallel_rotate_method" not in toml.sections.get("parallelism", {}):
        return
    if context == 1:
        toml.ignored["[parallelism] context_parallel_rotate_method"] = ("no context parallelism "
                                                                        "(context_parallel_degree 1)")
        return
    if method != "allgather":
        raise toml.refuse("parallelism", "context_parallel_rotate_method",
                          f"{short(method)}: dnnplan prices torchtitan's default, allgather, for a split sequence",
                          hint="write context_parallel_rotate_method = \"allgather\", or leave it out")


def check_keys(toml: Toml) -> None:
    """Every key one torchtitan reads: read, or ignored with its reason; one line for another (a
    key before any section too: torchtitan's ConfigManager._dict_to_dataclass, config/manager.py,
    refuses a name that is not a JobConfig field, and JobConfig's fields are its sections)."""
    top = next((key for key, value in toml.data.items() if not isinstance(value, dict)), None)
    if top is not None:
        known = [f"[{s}] {k}" for s, names in READ.items() for k in names]
        near = next((k for k in known if k.endswith(f"] {top}")), None)
        number = next((n for n, text in enumerate(toml.text.splitlines(), 1)
                       if re.match(rf"\s*\"?{re.escape(top)}\"?\s*=", text)), None)
        named = top if top.isidentifier() else short(top)
        raise DnnplanError(f"{named}: a key before any section (torchtitan refuses it: its keys belong to sections)",
                           file=toml.path, line=number,
                           hint=f"move it under {near.split(' ')[0]}" if near else f"put it in its section; {HINT}")
    sections = set(READ) | {name for ignored in IGNORED.values() for name in ignored}
    ignored_whole = {name for ignored in IGNORED.values() for name, keys in ignored.items() if keys == "*"}
    for section, keys in toml.sections.items():
        if section.split(".")[0] in ignored_whole and section not in sections:  # [validation.dataloader]
            toml.ignored.update({f"[{section}] {key}": IGNORED_SUBSECTION for key in keys})
            continue
        if section not in sections:
            near = did_you_mean(section, sorted(sections))
            raise toml.refuse(section, None, "unknown section: not one dnnplan reads of torchtitan 0.2's "
                              "job_config.py (it may change what runs)",
                              hint=f"did you mean [{near}]?" if near else f"remove it to predict without it; {HINT}")
        reasons = {reason: ignored.get(section) for reason, ignored in IGNORED.items() if section in ignored}
        whole = next((reason for reason, names in reasons.items() if names == "*"), None)
        for key in keys:
            reason = whole or next((r for r, names in reasons.items() if names != "*" and key in names), None)
            if reason:
                toml.ignored[f"[{section}] {key}"] = reason
            elif key not in READ.get(section, {}):
                known = [f"[{s}] {k}" for s, names in READ.items() for k in names]
                near = did_you_mean(f"[{section}] {key}", known)
                if (section, key) in MOVED:
                    raise toml.refuse(section, key, f"torchtitan 0.1's key, which 0.2 reads as {MOVED[section, key]}",
                                      hint=f"write it as {MOVED[section, key]}")
                raise toml.refuse(section, key, "unknown key: not one dnnplan reads of torchtitan 0.2's "
                                  "job_config.py (it may change what runs)",
                                  hint=f"did you mean {near}?" if near else f"remove it to predict without it; {HINT}")


def network_layers(name: str) -> int | None:
    """The transformer layers of zoo network ``name`` (None: it has no attention layer, which the
    network's check then says)."""
    net = load_network(name)
    return gpt_shape(net).num_layers if any(layer.op == "attention" for layer in net.layers) else None


def model_network(toml: Toml) -> str | None:
    """The zoo network the [model] section names: a flavor torchtitan ships that the zoo holds, or a
    flavor named as a zoo network; None (and the flavor listed as ignored, with what dnnplan ships)
    for another. A name or flavor left out is torchtitan's default (job_config.py ``Model``: name
    "llama3", flavor "debugmodel")."""
    name = toml.get("model", "name") or "llama3"
    flavor = toml.get("model", "flavor") or "debugmodel"
    by_flavor = {pair: zoo for zoo, pair in FLAVORS.items()}
    if (name, flavor) in by_flavor:
        return by_flavor[name, flavor]
    if flavor in zoo_names():
        return flavor
    stated = {key: "" if key in toml.sections.get("model", {}) else " (torchtitan's default)"
              for key in ("name", "flavor")}
    names = [n for n, f in FLAVORS.values() if f == flavor]
    near = did_you_mean(flavor, [*zoo_names(), *(f for n, f in FLAVORS.values() if n == name)])
    hint = (f"did you mean name = \"{names[0]}\"?" if names else f"did you mean {near}?" if near else
            "dnnplan ships " + ", ".join(f"{n} {f}" for n, f in FLAVORS.values()) + ", and a zoo network named as "
            "the flavor")
    toml.ignored["[model] flavor"] = (f"{name}{stated['name']} {flavor}{stated['flavor']} is not a network dnnplan "
                                      f"ships ({hint}): --network names it")
    return None


def read_precision(toml: Toml) -> str:
    param = toml.get("training", "mixed_precision_param")
    if param not in PRECISIONS:
        raise toml.refuse("training", "mixed_precision_param", f"unknown type {short(param)}",
                          hint="torchtitan takes bfloat16 or float32")
    if toml.get("training", "dtype") != "float32":
        raise toml.refuse("training", "dtype", f"{short(toml.get('training', 'dtype'))}: training without float32 "
                          "master weights is not priced", hint="leave dtype out (float32)")
    converters = toml.get("model", "converters") or []
    for converter in converters:
        if converter != FLOAT8_CONVERTER:
            raise toml.refuse("model", "converters", f"{short(converter)}: dnnplan prices the "
                              f"{FLOAT8_CONVERTER} converter only", hint=f"write converters = [\"{FLOAT8_CONVERTER}\"]")
    if converters and param != "bfloat16":
        raise toml.refuse("model", "converters", "FP8 GEMMs with float32 parameters: dnnplan prices FP8 with BF16 "
                          "mixed precision", hint="write mixed_precision_param = \"bfloat16\"")
    float8_filter(toml, bool(converters))
    return "fp8" if converters else PRECISIONS[param]


def float8_filter(toml: Toml, converted: bool) -> None:
    """``[quantize.linear.float8] filter_fqns``, the linear layers the float8 converter leaves in bf16
    (torchtitan/components/quantization/utils.py ``module_filter_fn``: a layer whose name holds one
    of them; default none): dnnplan's fp8 prices exactly ``["output"]`` (:data:`FP8_FILTER`), one
    line for another list; listed as ignored without the converter."""
    section, key = "quantize.linear.float8", "filter_fqns"
    stated = key in toml.sections.get(section, {})
    if not converted:
        if stated:
            toml.ignored[f"[{section}] {key}"] = "the float8 converter is not in [model] converters"
        return
    fqns = toml.get(section, key)
    if sorted(set(fqns)) != FP8_FILTER:
        got = f"{short(fqns)}" + ("" if stated else " (torchtitan's default: every linear layer in FP8)")
        raise DnnplanError(f"[{section}] {key}: {got}: dnnplan prices FP8 GEMMs in the transformer blocks' linear "
                           "layers and the output layer in bf16", file=toml.path,
                           line=toml.line_of(section, key) if stated else toml.line_of("model", "converters"),
                           hint=f"write filter_fqns = [\"output\"] in [{section}]")


def zero_stage(toml: Toml, replicate: int, shard: int, model_parallel: int, stages: int) -> int:
    """The ZeRO stage of the data-parallel degrees and FSDP's reshard policy (module docstring)."""
    policy = toml.get("parallelism", "fsdp_reshard_after_forward")
    if policy not in RESHARD_POLICIES:
        raise toml.refuse("parallelism", "fsdp_reshard_after_forward", f"unknown policy {short(policy)}",
                          hint="torchtitan takes default, always or never")
    if replicate > 1 and shard > 1:
        raise toml.refuse("parallelism", "data_parallel_replicate_degree",
                          f"{replicate} with data_parallel_shard_degree {shard} (HSDP): dnnplan prices ZeRO over "
                          "every data-parallel rank", hint="give one of them above 1")
    if replicate > 1 and shard < 0:
        raise toml.refuse("parallelism", "data_parallel_shard_degree", "-1 beside a replicate degree: the devices "
                          "left would make HSDP", hint="write data_parallel_shard_degree = 1 for DDP")
    if replicate > 1 and model_parallel > 1:
        raise toml.refuse("parallelism", "data_parallel_replicate_degree", f"{replicate} (DDP) with tensor, context "
                          "or pipeline parallelism: torchtitan's DDP runs alone (DDP has not supported > 1D "
                          "parallelism)", hint="shard instead: data_parallel_shard_degree")
    stated = "fsdp_reshard_after_forward" in toml.sections.get("parallelism", {})
    if replicate > 1 or (shard == 1 and not stated):
        return 0
    if policy == "default":
        return 2 if stages > 1 else 3
    return 3 if policy == "always" else 2


def pipeline(toml: Toml, stages: int, network: str | None) -> tuple[str, int, tuple[int, ...] | None]:
    """(schedule, model chunks a device, transformer layers a chunk or None for an even cut);
    ``network``: the zoo network the file names (None: not one dnnplan knows), whose transformer
    layers torchtitan's own cut needs (:mod:`planner.launch_import.torchtitan_cut`), loaded only then."""
    name = toml.get("parallelism", "pipeline_parallel_schedule")
    by_name = {torch_name.lower(): ours for ours, torch_name in SCHEDULES.items()}
    if name.lower() not in by_name:
        raise toml.refuse("parallelism", "pipeline_parallel_schedule", f"{short(name)} is not a schedule dnnplan "
                          "prices", hint=f"write one of {', '.join(SCHEDULES.values())}")
    schedule = by_name[name.lower()]
    parts = toml.get("parallelism", "module_fqns_per_model_part")
    if stages == 1:  # no pipeline: micro-batches accumulate gradients, whatever the schedule
        for key in PIPELINE_KEYS:
            if key in toml.sections.get("parallelism", {}):
                toml.ignored[f"[parallelism] {key}"] = "no pipeline (pipeline_parallel_degree 1)"
        return "1f1b", 1, None
    per_stage = toml.get("parallelism", "pipeline_parallel_layers_per_stage")
    if parts is None:
        first, last = (toml.get("parallelism", f"pipeline_parallel_{end}_stage_less_layers") for end in ("first", "last"))
        if per_stage is None and (first, last) == (0, 0):
            return schedule, 2 if schedule == INTERLEAVED else 1, None
        key = "pipeline_parallel_layers_per_stage" if per_stage is not None else "pipeline_parallel_degree"
        layers = None if network is None else network_layers(network)
        if layers is None:  # torchtitan cuts by the model's layers, which only a transformer flavor dnnplan knows gives
            what = "cuts" if per_stage is not None else f"{stages} stages cut by torchtitan's default (the first " \
                "and last stages a layer short), which depends on the model's transformer layers: it"
            raise toml.refuse("parallelism", key, f"{what} by the model's transformer layer count, which the file's "
                              "flavor does not give dnnplan", hint="name a transformer flavor dnnplan knows in [model], "
                                                                   "or write the cut as module_fqns_per_model_part")
        try:
            cut = torchtitan_cut(layers, stages, schedule == INTERLEAVED, first, last, per_stage)
        except CutError as err:
            raise toml.refuse("parallelism", key, f"{err}: torchtitan refuses it",
                              hint="write the cut as module_fqns_per_model_part") from None
        return schedule, len(cut) // stages, cut
    if len(parts) % stages:
        raise toml.refuse("parallelism", "module_fqns_per_model_part", f"{len(parts)} model parts over {stages} "
                          "pipeline ranks", hint="give a multiple of pipeline_parallel_degree parts")
    chunks = len(parts) // stages
    if (chunks > 1) != (schedule == INTERLEAVED):
        raise toml.refuse("parallelism", "pipeline_parallel_schedule", f"{name} with {chunks} model parts a rank: "
                          "Interleaved1F1B runs two or more, GPipe and 1F1B one",
                          hint="match the schedule to module_fqns_per_model_part")
    return schedule, chunks, chunk_counts(toml, parts)


def chunk_counts(toml: Toml, parts: list[list[str]]) -> tuple[int, ...]:
    """The transformer layers of each model part, checked: ``tok_embeddings`` first, ``layers.i`` in
    order, ``norm`` and ``output`` last (torchtitan's module names)."""
    names = [name for part in parts for name in part]
    layers = [n for n in names if n.startswith("layers.")]
    want = ["tok_embeddings"] + [f"layers.{i}" for i in range(len(layers))] + ["norm", "output"]
    if names != want:
        raise toml.refuse("parallelism", "module_fqns_per_model_part", "not tok_embeddings, layers.0, layers.1, ... "
                          "in order, then norm and output", hint="list every module once, in the model's order")
    return tuple(sum(n.startswith("layers.") for n in part) for part in parts)


def batching(toml: Toml, stages: int, data: int | None) -> tuple[int, int | None]:
    """(samples a data-parallel rank's micro-batch, the step's batch or None for one micro-batch a
    rank)."""
    local = toml.get("training", "local_batch_size")
    if local < 1:
        raise toml.refuse("training", "local_batch_size", f"must be at least 1, got {local}",
                          hint="write local_batch_size = N")
    micro = local
    if stages > 1:
        micro = toml.get("parallelism", "pipeline_parallel_microbatch_size")
        if micro < 1 or local % micro:
            raise toml.refuse("parallelism", "pipeline_parallel_microbatch_size", f"{micro} does not divide "
                              f"local_batch_size {local}", hint="give a micro-batch size that divides the local batch")
    batch = toml.get("training", "global_batch_size")
    if batch < 0:
        if data is None and local != micro:
            raise toml.refuse("training", "global_batch_size", "left to torchtitan with the devices left to FSDP and "
                              "micro-batches", hint="write global_batch_size, or the shard degree")
        return micro, local * data if data else None
    if data and batch % (local * data):
        raise toml.refuse("training", "global_batch_size", f"{batch} is not a multiple of local_batch_size {local} x "
                          f"{data} data-parallel ranks", hint="give a global batch that is")
    return micro, batch


def experts(toml: Toml, tensor: int, context: int, shard: int) -> tuple[int, int | None]:
    """(expert degree, the experts' tensor degree as stated) checked as torchtitan checks them."""
    expert = toml.degree("expert_parallel_degree")
    etp = toml.degree("expert_tensor_parallel_degree")
    if expert == 1:
        return 1, None
    if etp not in (1, tensor):
        raise toml.refuse("parallelism", "expert_tensor_parallel_degree", f"{etp} with tensor {tensor}: torchtitan "
                          "takes 1 or the tensor degree", hint=f"write 1 or {tensor}")
    if shard > 0 and (shard * context * tensor) % (etp * expert):
        raise toml.refuse("parallelism", "expert_parallel_degree", f"{expert} does not divide shard {shard} x context "
                          f"{context} x tensor {tensor} / expert tensor {etp}", hint="give an expert degree that does")
    return expert, etp if tensor > 1 else None


def async_tensor_parallel(toml: Toml) -> bool:
    """Whether async tensor parallelism is on (one line when [compile] does not allow it). Compilation
    itself is listed as ignored: the step is priced with the cost model's fused kernels either way."""
    for key in ("enable", "components"):
        if key in toml.sections.get("compile", {}):
            toml.ignored[f"[compile] {key}"] = COMPILED
    if not toml.get("parallelism", "enable_async_tensor_parallel"):
        return False
    if not (toml.get("compile", "enable") and "model" in (toml.get("compile", "components") or ["model", "loss"])):
        raise toml.refuse("parallelism", "enable_async_tensor_parallel", "needs [compile] enable = true with the "
                          "model among its components (Async TP requires 'model' in --compile.components)",
                          hint="enable [compile], or leave async tensor parallelism out")
    return True
