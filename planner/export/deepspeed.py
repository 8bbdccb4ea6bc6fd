"""A plan as DeepSpeed's configuration (pure: ds_config.json's keys and values, in order).

Every key is named as DeepSpeed reads it, in deepspeedai/DeepSpeed at tag v0.19.5 (commit
cf44300453eb0af79ed84ed8f1cb49d57478bd76): ``deepspeed/runtime/constants.py`` (``train_batch_size``,
``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``optimizer`` with ``type``
and ``params``, ``zero_allow_untested_optimizer``, ``bf16`` and ``fp16`` with ``enabled``,
``zero_optimization``), ``deepspeed/runtime/zero/config.py`` (``DeepSpeedZeroConfig``: ``stage``,
``overlap_comm``, ``reduce_bucket_size``) and ``deepspeed/runtime/activation_checkpointing/config.py``
(``activation_checkpointing``, ``partition_activations``); the launcher's ``--num_gpus`` and
``--num_nodes`` in ``deepspeed/launcher/runner.py``, the script's ``--deepspeed`` and
``--deepspeed_config`` in ``deepspeed/__init__.py`` (``add_config_arguments``).

DeepSpeed's JSON says how the data-parallel ranks train; its tensor parallelism (AutoTP, Megatron's
mpu), pipeline (``PipelineModule(num_stages=...)``), sequence (Ulysses) and expert parallelism
(``deepspeed.moe.layer.MoE(ep_size=...)``) are set in the training script's code. So a plan is
exported when every layer splits the samples alone over every device (data parallelism, as
:func:`costmodel.frameworks.uniform.data_strategy` gives it), a CNN's as well as a transformer's;
a layer split otherwise, or a pipeline, is refused in one line naming the layer. Then:

- the batch: ``train_batch_size`` the plan's, ``gradient_accumulation_steps`` its micro-batches,
  ``train_micro_batch_size_per_gpu`` one micro-batch's samples on one device (DeepSpeed checks
  that the three multiply with the data-parallel degree);
- ZeRO: ``zero_optimization.stage`` the plan's stage (0 to 3);
- overlap: ``overlap_comm`` true under ``data`` (and ``all``, which adds nothing without tensor
  parallelism), false under ``none``; ``reduce_bucket_size`` the plan's gradient bucket (25 MiB
  unless given) in elements of the gradients' type (2 bytes under fp16 and bf16, 4 under fp32);
- precision: ``bf16`` or ``fp16`` enabled; fp32 neither; fp8 (Transformer Engine's, set in code) and
  TF32 (a torch switch) are refused;
- the optimiser: ``Adam``, ``SGD`` with ``momentum`` 0.9 (dnnplan's momentum) or 0 (plain SGD;
  torch's SGD, which ZeRO runs when ``zero_allow_untested_optimizer`` is true);
- recomputation of every transformer layer whole: the ``activation_checkpointing`` section, and the
  user wraps each layer in ``deepspeed.checkpointing.checkpoint`` (the JSON configures checkpointing,
  the script applies it); other patterns, and any recomputation of a network without transformer
  layers (a CNN, whose file read back may not checkpoint), are refused.

The attention kernel and a convolution's algorithm are the script's: a plan is exported when its
attention runs the machine's default and its convolutions the default algorithm, as the file is
read back (:mod:`planner.export.attention_kernel`).

Left to the user: the script, the learning rate and its schedule, the data, and batch normalisation's
statistics (a script syncs them with ``SyncBatchNorm``).
"""

from __future__ import annotations

from typing import Any

from costmodel.calls.algorithms import is_recomputed
from costmodel.comm.overlap import BUCKET_MARK, DEFAULT_BUCKET_BYTES, EXPERTS
from costmodel.frameworks.uniform import data_strategy
from networks.errors import DnnplanError
from networks.ir import Network
from planner.export.attention_kernel import check_default_attention, check_default_convolutions
from planner.export.megatron_layout import blocks_of, micro_hint
from planner.export.megatron_recompute import megatron_recompute
from planner.plan.plan import Plan

#: the DeepSpeed release the keys were read in (module docstring)
DEEPSPEED_SOURCE = "deepspeedai/DeepSpeed v0.19.5 (cf44300453eb0af79ed84ed8f1cb49d57478bd76)"
#: dnnplan's precisions as DeepSpeed's sections (fp32 enables neither)
PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp32": None}
#: bytes of a gradient element DeepSpeed reduces (the model's type)
GRAD_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
#: dnnplan's optimisers as DeepSpeed's optimizer sections
OPTIMIZERS = {"adam": {"type": "Adam"}, "momentum": {"type": "SGD", "params": {"momentum": 0.9}},
              "sgd": {"type": "SGD", "params": {"momentum": 0}}}
#: the script and configuration names the launcher line uses
SCRIPT, CONFIG = "train.py", "ds_config.json"
#: what a refused recomputation tells the user: DeepSpeed's activation checkpointing reruns whole modules
RECOMPUTE_HINT = ("DeepSpeed's activation checkpointing reruns the whole transformer layers the script wraps: "
                  "re-plan with --no-recompute, make the plan with `dnnplan predict --recompute full --out FILE`, or "
                  "export with --nearest")
#: the ZeRO stages DeepSpeed runs (zero_optimization.stage)
ZERO_RUN = (0, 1, 2, 3)
HINT = "DeepSpeed's JSON sets data parallelism and ZeRO; export a plan of `dnnplan predict NET --zero Z --out FILE`"


def deepspeed_config(plan: Plan, net: Network) -> dict[str, Any]:
    """ds_config.json's contents for ``plan`` of ``net``, or one line naming the layer DeepSpeed's
    JSON cannot express (module docstring)."""
    micro_batches = check_layout(plan, net)
    check_default_attention(plan, net, "the attention kernel is the script's, which DeepSpeed's JSON does not say")
    check_default_convolutions(plan, net, "DeepSpeed")
    choices = plan.choices
    out: dict[str, Any] = {
        "train_batch_size": plan.batch,
        "train_micro_batch_size_per_gpu": plan.batch // (micro_batches * plan.devices),
        "gradient_accumulation_steps": micro_batches,
    }
    if choices.precision not in PRECISIONS:
        raise DnnplanError(f"precision {choices.precision}: DeepSpeed's JSON enables bf16 or fp16 (FP8 is "
                           "Transformer Engine's, set in the script; TF32 a torch switch)",
                           hint="re-plan with --precision bf16, fp16 or fp32")
    if PRECISIONS[choices.precision]:
        out[PRECISIONS[choices.precision]] = {"enabled": True}
    if choices.sharded_optimizer.grad_bytes:
        raise DnnplanError("float32 gradients (--grad-fp32): the JSON dnnplan writes reduces them in the weights' "
                           "precision, as dnnplan prices a DeepSpeed run", hint="re-plan without --grad-fp32")
    out["optimizer"] = OPTIMIZERS[choices.optimizer]
    if choices.optimizer != "adam" and choices.zero:
        out["zero_allow_untested_optimizer"] = True
    out["zero_optimization"] = {"stage": choices.zero, "overlap_comm": overlaps(choices.overlap),
                                "reduce_bucket_size": bucket_elements(choices.overlap, choices.precision)}
    if recomputes(plan, net):
        out["activation_checkpointing"] = {"partition_activations": False}
    return out


def check_layout(plan: Plan, net: Network) -> int:
    """The plan's micro-batches a step, refused unless every layer splits the samples over every
    device and no pipeline runs."""
    pipe = plan.pipeline
    if pipe is not None and pipe.stages > 1:
        raise DnnplanError(f"starts pipeline stage 2 of {pipe.stages}: DeepSpeed's pipeline degree is set in the "
                           "script (PipelineModule(num_stages=...)), not in its JSON", layer=pipe.first_layers[1],
                           hint=HINT)
    micro_batches = pipe.micro_batches if pipe is not None else 1
    micro = plan.batch // micro_batches
    strategies = plan.strategies()
    for layer in net.layers:
        if strategies[layer.name] != data_strategy(layer, plan.devices, micro):
            raise DnnplanError(f"split {strategies[layer.name].label}, where DeepSpeed's data parallelism splits "
                               f"{micro} samples over {plan.devices} devices: its tensor, sequence and expert "
                               "parallelism are set in the script, not in its JSON", layer=layer.name, hint=HINT)
    if micro % plan.devices:
        raise DnnplanError(f"a micro-batch of {micro} samples does not split over {plan.devices} devices",
                           layer=net.layers[0].name, hint=micro_hint(plan.batch, micro_batches, plan.devices))
    return micro_batches


def overlaps(overlap: str) -> bool:
    mode = overlap.partition(BUCKET_MARK)[0].removesuffix(EXPERTS)
    return mode != "none"


def bucket_elements(overlap: str, precision: str) -> int:
    """The plan's gradient bucket (``data@25``: 25 MiB; DDP's 25 MiB when unsaid) in gradient elements."""
    mib = overlap.partition(BUCKET_MARK)[2]
    size = float(mib) * 2 ** 20 if mib else DEFAULT_BUCKET_BYTES
    return int(size) // GRAD_BYTES[precision]


def recomputes(plan: Plan, net: Network) -> bool:
    """Whether the plan recomputes every transformer layer whole (one line for another pattern)."""
    algorithms = plan.algorithms()
    if not any(layer.op == "attention" for layer in net.layers):  # a CNN: its blocks are no transformer layers
        first = next((layer.name for layer in net.layers if is_recomputed(algorithms.get(layer.name, ""))), None)
        if first is not None:
            raise DnnplanError(f"recomputed, and {net.name} has no transformer layers: DeepSpeed's activation "
                               "checkpointing reruns the transformer layers the script wraps", layer=first,
                               hint="re-plan with --no-recompute, or export with --nearest")
        return False
    recompute = megatron_recompute(plan, net, (blocks_of(net.layers),), RECOMPUTE_HINT)
    if recompute.granularity == "selective" or recompute.method == "block":
        first = next(layer.name for layer in net.layers if is_recomputed(algorithms.get(layer.name, "")))
        raise DnnplanError(f"recomputed {recompute.granularity}: DeepSpeed's activation checkpointing reruns whole "
                           "modules the script wraps", layer=first, hint=RECOMPUTE_HINT)
    return bool(recompute.granularity)
