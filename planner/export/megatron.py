"""A plan as Megatron-LM's command-line arguments (pure: pretrain_gpt.py's flags, in order).

Every option is named as Megatron-LM's own parser names it, read in NVIDIA/Megatron-LM at commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553 (Megatron-Core 0.20.0, megatron/core/package_info.py):
``megatron/training/arguments.py`` adds some by hand and the rest from dataclass fields through
``ArgumentGroupFactory`` (``megatron/training/argument_utils.py``: ``--`` and the field's name with
``-`` for ``_``, a bool defaulting to False a ``store_true`` flag, ``argparse_meta`` renaming one):
``ModelParallelConfig`` (megatron/core/model_parallel_config.py) and ``TransformerConfig``
(megatron/core/transformer/transformer_config.py) less the names ``_add_network_size_args`` excludes,
``TrainingConfig`` and ``CheckpointConfig`` (megatron/training/config/training_config.py),
``DistributedInitConfig`` (megatron/training/config/common_config.py). What that parser refuses
together is not emitted together (``validate_args``): ``--virtual-pipeline-model-parallel-size`` is
not a flag (excluded; ``--num-layers-per-virtual-pipeline-stage`` or ``--pipeline-model-parallel-layout``
set it, one of them), ``--tp-comm-overlap`` needs ``--sequence-parallel``, ``--overlap-param-gather``
needs ``--overlap-grad-reduce`` and a sharded optimiser, ``--use-megatron-fsdp`` needs
``--ckpt-format fsdp_dtensor``.

The layout (:mod:`planner.export.megatron_layout`) and recomputation
(:mod:`planner.export.megatron_recompute`) are read off the plan's layers, the model's shape
(:mod:`planner.export.megatron_model`) off the network, and the rest off the plan's training choices:

- ZeRO-1: ``--use-distributed-optimizer`` (Megatron's distributed optimiser shards the optimiser
  state); ZeRO-2 and ZeRO-3: Megatron-FSDP (``--use-megatron-fsdp``) with
  ``--data-parallel-sharding-strategy optim_grads`` (states and gradients) or ``optim_grads_params``
  (and the weights). Torch FSDP2 (``--use-torch-fsdp2``) is not used: Megatron refuses it with
  pipeline or expert parallelism, FP16, or a tied head (``--untie-embeddings-and-output-weights``);
- precision: ``--fp16``, ``--bf16``, FP8 as ``--bf16 --fp8-format hybrid`` (dnnplan's fp8 is BF16
  mixed precision with FP8 GEMMs); fp32 adds nothing, and tf32 (no switch of Megatron's) is refused;
- the gradients' precision: ``--grad-reduce-in-bf16`` under BF16 and FP8 where they are priced in
  the weights' precision (Megatron-LM's default keeps them in float32: dnnplan's ``grad_fp32``, which
  writes nothing there), ``--accumulate-allreduce-grads-in-fp32`` under FP16 with ``grad_fp32``;
- the optimiser: ``--optimizer adam``, or ``sgd`` (dnnplan's momentum is Megatron's SGD with its
  default ``--sgd-momentum`` 0.9; plain SGD sets it to 0);
- overlap ``data``: ``--overlap-grad-reduce`` (and ``--overlap-param-gather`` with a sharded
  optimiser); ``all``: also ``--tp-comm-overlap`` under sequence parallelism; ``+experts``:
  ``--overlap-moe-expert-parallel-comm`` with expert parallelism and no full recomputation. The
  overlap's bucket is not carried over (Megatron sizes ``--ddp-bucket-size`` in elements);
- the MoE dispatcher: ``--moe-token-dispatcher-type`` (dnnplan's names are Megatron-Core's);
- attention's kernels: FlashAttention (dnnplan's default on GPUs) writes nothing, Megatron-Core's
  ``--attention-backend auto`` choosing a fused kernel; the materialised kernels are
  ``--attention-backend unfused`` (``AttnBackend``, megatron/core/transformer/enums.py). Megatron runs
  one backend on every layer: a plan whose attention layers run different kernels is refused naming
  the first that differs.

Left to the user: the launcher's nodes and devices a node, the data, the tokenizer (and with it the
vocabulary), the learning-rate schedule, checkpoints, dropout rates and biases.
"""

from __future__ import annotations

from costmodel.calls.algorithms import attention_default, kernel_algorithm
from costmodel.choices.training import TrainingChoices
from costmodel.comm.overlap import EXPERTS
from costmodel.machine.loading import load_machine
from networks.analysis import block_of
from networks.errors import DnnplanError
from networks.ir import Network
from networks.ops.attention import qkv_bias
from planner.export.megatron_layout import MegatronLayout, megatron_layout
from planner.export.megatron_model import GptShape, gpt_shape, rotary_setting
from planner.export.megatron_recompute import megatron_recompute
from planner.plan.plan import Plan

#: Megatron-LM's norms' epsilon (TransformerConfig.layernorm_epsilon at d98e8a64)
MEGATRON_NORM_EPSILON = 1e-5
#: Megatron-LM's rotary base (--rotary-base's default, megatron/training/arguments.py at d98e8a64)
MEGATRON_ROTARY_BASE = 10000
#: Megatron-LM's Llama 3.x scaling factor (--rope-scaling-factor's default, the same file)
MEGATRON_ROPE_SCALING = 8.0
#: the norms of a transformer layer, whose epsilon --norm-epsilon sets
NORMS = ("layernorm", "rmsnorm")

#: the Megatron-LM release the option names were read in (module docstring)
MEGATRON_SOURCE = "NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553 (Megatron-Core 0.20.0)"
#: dnnplan's optimisers as Megatron's ``--optimizer`` names them (plain SGD also sets ``--sgd-momentum 0``)
OPTIMIZERS = {"adam": "adam", "momentum": "sgd", "sgd": "sgd"}
#: ZeRO-2 and ZeRO-3 as Megatron-FSDP's ``--data-parallel-sharding-strategy``
FSDP_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
#: the ZeRO stages Megatron-LM runs: none, the distributed optimiser (1) and Megatron-FSDP's
ZERO_RUN = (0, 1, *FSDP_SHARDING)


def megatron_args(plan: Plan, net: Network) -> list[str]:
    """pretrain_gpt.py's arguments for ``plan`` of ``net`` (the network it names, as
    :func:`planner.plan.plan_file.plan_from_dict` loads it), each flag followed by its value; or one
    line naming the layer Megatron cannot run as planned (module docstring)."""
    layout = megatron_layout(plan, net)
    recompute = megatron_recompute(plan, net, layout.chunk_blocks)
    shape = gpt_shape(net)
    choices = plan.choices
    out = parallel_args(layout)
    out += ["--micro-batch-size", str(layout.micro_batch_size), "--global-batch-size", str(layout.global_batch_size),
            "--seq-length", str(shape.seq_length)]
    out += model_args(shape) + model_setting_args(net)
    if recompute.granularity:
        out += ["--recompute-granularity", recompute.granularity]
    if recompute.method:
        out += ["--recompute-method", recompute.method, "--recompute-num-layers", str(recompute.num_layers)]
    out += precision_args(choices.precision)
    if choices.fp8_params and choices.precision == "fp8":
        if choices.zero == 0:  # megatron/training/arguments.py validate_args at d98e8a64
            raise DnnplanError("FP8 parameters (--fp8-params) without a sharded optimiser: Megatron-LM's "
                               "--fp8-param-gather runs only with the distributed optimizer or FSDP",
                               hint="re-plan with --zero 1 or more, or without --fp8-params")
        out += ["--fp8-param-gather"]
    out += gradient_args(choices)
    out += ["--optimizer", OPTIMIZERS[choices.optimizer]] + (["--sgd-momentum", "0"] if choices.optimizer == "sgd"
                                                             else [])
    out += zero_args(choices.zero)
    out += overlap_args(choices.overlap, layout, choices.zero, recompute.granularity == "full")
    if shape.experts:
        out += ["--moe-token-dispatcher-type", choices.moe_dispatch]
    return out + attention_args(plan, net)


def environment(args: list[str]) -> list[str]:
    """The shell lines the launch needs before it, as Megatron-LM's validate_args checks them (at
    d98e8a64, megatron/training/arguments.py): Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is
    not 1 ("FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"), so it is unset; tensor or
    context parallelism without FSDP or expert overlap asserts it is 1 before Blackwell (sequence
    parallelism's ordering of kernels on one hardware queue), so it is exported as 1, which Blackwell
    also takes."""
    if "--use-megatron-fsdp" in args:
        return ["unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP asserts it is not 1"]
    degree = {flag: int(args[args.index(flag) + 1]) for flag in ("--tensor-model-parallel-size",
                                                                "--context-parallel-size") if flag in args}
    if max(degree.values(), default=1) > 1 and "--overlap-moe-expert-parallel-comm" not in args:
        return ["export CUDA_DEVICE_MAX_CONNECTIONS=1  # Megatron-LM asserts it under tensor or context parallelism"]
    return []


def gradient_args(choices: TrainingChoices) -> list[str]:
    """The gradients' precision as the plan priced it: Megatron-LM accumulates and reduces them in
    float32 under ``--bf16`` unless ``--grad-reduce-in-bf16``, and under ``--fp16`` only with
    ``--accumulate-allreduce-grads-in-fp32`` (validate_args at d98e8a64); float32 weights need nothing."""
    if choices.precision in ("bf16", "fp8"):
        return [] if choices.grad_fp32 else ["--grad-reduce-in-bf16"]
    return ["--accumulate-allreduce-grads-in-fp32"] if choices.precision == "fp16" and choices.grad_fp32 else []


def attention_args(plan: Plan, net: Network) -> list[str]:
    """``--attention-backend unfused`` for a plan whose attention runs the materialised kernels, nothing
    for FlashAttention; one line naming the first attention layer whose kernel differs from the first's."""
    default = attention_default(load_machine(plan.machine))
    algorithms = plan.algorithms()
    kernels = [(layer.name, kernel_algorithm(algorithms.get(layer.name, "")) or default)
               for layer in net.layers if layer.op == "attention"]
    first = kernels[0][1] if kernels else "flash"
    for name, kernel in kernels:
        if kernel != first:
            raise DnnplanError(f"attention by {kernel} kernels, where {kernels[0][0]} runs {first}: Megatron-LM runs "
                               "one attention backend on every layer", layer=name,
                               hint=f"edit the plan's attention layers to one algorithm, or make it with `dnnplan "
                                    f"predict NET --attention {first} --out FILE`")
    return ["--attention-backend", "unfused"] if first == "materialized" else []


def parallel_args(layout: MegatronLayout) -> list[str]:
    out = ["--tensor-model-parallel-size", str(layout.tensor), "--pipeline-model-parallel-size", str(layout.stages)]
    if layout.stages > 1 and not layout.even:
        out += ["--pipeline-model-parallel-layout", pipeline_layout(layout.blocks_per_chunk)]
    elif layout.chunks > 1:
        out += ["--num-layers-per-virtual-pipeline-stage", str(layout.blocks_per_chunk[0])]
    out += ["--context-parallel-size", str(layout.context), "--expert-model-parallel-size", str(layout.expert)]
    if layout.expert_folded:
        out += ["--expert-tensor-parallel-size", "1"]
    return out + (["--sequence-parallel"] if layout.sequence_parallel else [])


def pipeline_layout(blocks_per_chunk: tuple[int, ...]) -> str:
    """Megatron-Core's ``--pipeline-model-parallel-layout`` (megatron/core/transformer/
    pipeline_parallel_layer_layout.py, ``parse_str_to_list``): the chunks in layer order split by
    ``|``, ``E`` the embedding, ``t`` a transformer layer, ``L`` the loss (with the final norm and head)."""
    parts = ["t" * n for n in blocks_per_chunk]
    parts[0], parts[-1] = "E" + parts[0], parts[-1] + "L"
    return "|".join(parts)


def model_args(shape: GptShape) -> list[str]:
    out = ["--num-layers", str(shape.num_layers), "--hidden-size", str(shape.hidden_size),
           "--num-attention-heads", str(shape.heads)]
    if shape.query_groups:
        out += ["--group-query-attention", "--num-query-groups", str(shape.query_groups)]
    if shape.kv_channels:
        out += ["--kv-channels", str(shape.kv_channels)]
    if shape.ffn_hidden_size:
        out += ["--ffn-hidden-size", str(shape.ffn_hidden_size)]
    if shape.swiglu:
        out += ["--swiglu"]
    if shape.experts:
        # --moe-grouped-gemm: Transformer Engine's GroupedLinear, the experts' kernels the megatron
        # framework prices (costmodel/frameworks/megatron.yaml); without it Megatron-Core loops over
        # the experts one MLP at a time (SequentialMLP)
        out += ["--num-experts", str(shape.experts), "--moe-router-topk", str(shape.top_k),
                "--moe-ffn-hidden-size", str(shape.ffn_hidden_size), "--moe-grouped-gemm"]
    if shape.rmsnorm:
        out += ["--normalization", "RMSNorm"]
    if shape.qk_norm:
        out += ["--qk-layernorm"]
    if shape.rotary:
        out += ["--position-embedding-type", "rope"]
    out += ["--max-position-embeddings", str(shape.positions or shape.seq_length)]
    return out + (["--untie-embeddings-and-output-weights"] if shape.untied else [])


def model_setting_args(net: Network) -> list[str]:
    """The model settings Megatron-LM's defaults would get wrong for the network: biases on every
    linear layer (``add_bias_linear`` True) and dropout of 0.1 after attention and the MLP
    (``hidden_dropout``, ``attention_dropout``; megatron/core/transformer/transformer_config.py at
    d98e8a64), each holding memory and time the plan did not price. A network whose transformer
    layers' linear layers have no bias gets ``--disable-bias-linear``, and ``--add-qkv-bias`` where its
    attention keeps biases on the query, key and value projections alone (``add_qkv_bias``, the same
    file: Qwen2's layers); one without dropout layers ``--attention-dropout 0 --hidden-dropout 0``; and
    its norms' epsilon where it is not Megatron-LM's 1e-5 (``layernorm_epsilon``, ``--norm-epsilon``:
    Qwen2's 1e-6), its rotary base where it is not Megatron-LM's 10000 (``--rotary-base``, a whole
    number, megatron/training/arguments.py at d98e8a64: Llama 3's 500000) and Llama 3.1's rotary
    scaling (``--use-rope-scaling``, with ``--rope-scaling-factor`` where the factor is not 8), which
    change no cost but the model the launch trains."""
    linear = [layer for layer in net.layers if layer.op == "linear" and block_of(layer) is not None]
    out = ["--disable-bias-linear"] if linear and not any(layer.p.get("bias") for layer in linear) else []
    if out and any(qkv_bias(layer.p) for layer in net.layers if layer.op == "attention"):
        out.append("--add-qkv-bias")
    eps = {layer.p.get("eps") for layer in net.layers if layer.op in NORMS and block_of(layer) is not None} - {None}
    if len(eps) == 1 and (value := eps.pop()) != MEGATRON_NORM_EPSILON:
        out += ["--norm-epsilon", f"{value:g}"]
    base = rotary_setting(net, "rotary_base")
    if base is not None and base != MEGATRON_ROTARY_BASE:
        if not float(base).is_integer():
            raise DnnplanError(f"rotary_base {base:g}: Megatron-LM's --rotary-base takes a whole number",
                               layer=next(layer.name for layer in net.layers if layer.op == "attention"),
                               hint="give the network's attention a whole rotary_base, or export it to torchtitan")
        out += ["--rotary-base", str(int(base))]
    factor = rotary_setting(net, "rope_scaling")
    if factor is not None:
        out.append("--use-rope-scaling")
        out += [] if factor == MEGATRON_ROPE_SCALING else ["--rope-scaling-factor", f"{factor:.12g}"]
    if not any(layer.op == "dropout" for layer in net.layers):
        out += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    return out


def precision_args(precision: str) -> list[str]:
    if precision == "tf32":  # read back without a flag, the file would be priced in full FP32
        raise DnnplanError("precision tf32: Megatron-LM has no TF32 switch (without --fp16 or --bf16 it trains in "
                           "float32, its matmuls under PyTorch's default, full FP32)",
                           hint="re-plan with --precision bf16, fp16, fp8 or fp32")
    return {"fp16": ["--fp16"], "bf16": ["--bf16"], "fp8": ["--bf16", "--fp8-format", "hybrid"]}.get(precision, [])


def zero_args(zero: int) -> list[str]:
    if zero == 1:
        return ["--use-distributed-optimizer"]
    if zero in FSDP_SHARDING:
        return ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", FSDP_SHARDING[zero],
                "--ckpt-format", "fsdp_dtensor"]
    return []


def overlap_args(overlap: str, layout: MegatronLayout, zero: int, full_recompute: bool) -> list[str]:
    """The overlap a plan was priced with (``data``, ``all``, ``+experts``; the bucket after ``@``
    is not carried over), as far as Megatron-LM's checks let it (module docstring)."""
    mode = overlap.split("@")[0]
    base = mode.removesuffix(EXPERTS)
    out = []
    if base in ("data", "all"):
        out += ["--overlap-grad-reduce"] + (["--overlap-param-gather"] if zero else [])
    if base == "all" and layout.tensor > 1:
        if not layout.sequence_parallel:  # validate_args at d98e8a64: tp_comm_overlap needs sequence_parallel
            raise DnnplanError("overlap all hides the tensor-parallel collectives under their GEMMs, which Megatron-LM "
                               "runs (--tp-comm-overlap) only with --sequence-parallel; read back, the file would be "
                               "priced as overlap data", hint="re-plan with --sequence-parallel or --overlap data, or "
                                                               "export with --nearest")
        out += ["--tp-comm-overlap"]
    if mode.endswith(EXPERTS) and layout.expert > 1:
        if full_recompute:  # transformer_config.py at d98e8a64: "disable full recomputation when enabling ..."
            raise DnnplanError("overlap +experts with full recomputation: Megatron-LM's "
                               "--overlap-moe-expert-parallel-comm does not run with it; read back, the expert "
                               "all-to-alls would be priced exposed",
                               hint="re-plan without +experts, or without full recomputation")
        out += ["--overlap-moe-expert-parallel-comm"]
    return out
