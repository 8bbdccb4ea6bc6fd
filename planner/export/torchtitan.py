"""A plan as torchtitan's job configuration (pure: the TOML file's sections, keys and values, in order).

Every key is named as torchtitan's 0.2 releases read it: the dataclasses of
``torchtitan/config/job_config.py`` (``JobConfig``: a section a field, a key a field of its class),
read in pytorch/torchtitan at tag v0.2.2 (commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce); every key
written is there in v0.2.0 and v0.2.1 as well, but ``expert_parallel_comm_backend`` (from v0.2.1,
written for DeepEP only). ``[model] converters`` names the FP8 converter as
``torchtitan/components/quantization/float8.py`` registers it (``quantize.linear.float8``), the
pipeline schedule as torch's ``get_schedule_class`` knows it (``GPipe``, ``1F1B``,
``Interleaved1F1B``), the model and flavor as ``torchtitan/models/<name>/__init__.py`` does.

torchtitan runs Megatron's layout on its llama-style models (one tensor, context and expert degree on
every layer, whole transformer layers a pipeline stage), so the layout is read as for Megatron-LM
(:func:`planner.export.megatron_layout.megatron_layout`) and then:

- the data-parallel ranks: ZeRO-0 as DDP (``data_parallel_replicate_degree``; torchtitan's DDP runs
  without any other parallelism: ``torchtitan/models/llama3/infra/parallelize.py`` raises "DDP has not
  supported > 1D parallelism"), ZeRO-2 and ZeRO-3 as FSDP (``data_parallel_shard_degree``) with
  ``fsdp_reshard_after_forward`` ``never`` (the weights kept gathered from the forward to the
  backward: dnnplan's ZeRO-2) or ``always`` (gathered again for the backward: ZeRO-3). torchtitan has
  no ZeRO-1 (it shards the optimiser state only with the weights);
- tensor parallelism shards the norms over the sequence (``SequenceParallel`` in parallelize.py), so
  a plan with a tensor degree is exported only with sequence parallelism;
- the pipeline: ``pipeline_parallel_degree``, the schedule, ``pipeline_parallel_microbatch_size``
  and the cut itself as ``module_fqns_per_model_part`` (``tok_embeddings``, ``layers.i``, ``norm``,
  ``output`` as torchtitan's models name their modules), uneven cuts included; interleaved chunks
  are assigned ``rank + s x stages`` (pipeline_parallel.py ``_get_stage_indices``, "loop" style), as
  dnnplan places them;
- the batch: ``global_batch_size`` the plan's, ``local_batch_size`` a data-parallel rank's (under a
  pipeline, its micro-batches together); micro-batches without a pipeline are torchtitan's gradient
  accumulation (``global_batch_size`` over ``local_batch_size`` x data-parallel degree, train.py);
- recomputation: none, or every transformer layer whole (``mode = "full"``); torchtitan's
  ``selective`` saves per op or recomputes every n-th layer, neither of which is dnnplan's
  recomputation of attention's core or of the first layers of a chunk, so those are refused;
- precision: bf16 as ``mixed_precision_param = "bfloat16"``, fp32 as ``"float32"``, fp8 as bf16 with
  the ``quantize.linear.float8`` converter (tensorwise scaling, the head left out); torchtitan has no
  fp16 or TF32 switch;
- the optimiser: Adam as ``AdamW`` (the same state); torchtitan builds Adam and AdamW only
  (``torchtitan/components/optimizer.py``);
- overlap: FSDP prefetches and DDP overlaps its buckets always (``data``, at DDP's 25 MB bucket);
  ``all`` adds ``enable_async_tensor_parallel``, which needs ``[compile] enable`` with the model
  among its components (tensor_parallel.py ``maybe_enable_async_tp``); no overlap at all, another
  bucket and ``+experts`` (torchtitan's expert overlap is DualPipeV's only) are refused;
- attention: SDPA's fused kernels, the machine's default (:mod:`planner.export.attention_kernel`);
  a plan whose attention runs other kernels is refused;
- the MoE dispatcher: all-to-all is torchtitan's default; dnnplan's ``flex`` (DeepEP's kernels) is
  ``expert_parallel_comm_backend = "deepep"``.

A zoo network torchtitan ships (:data:`FLAVORS`) is named by its model and flavor; another llama-style
network by the family and its dnnplan name as the flavor, which the user registers in that family's
``__init__.py`` (the comment of the rendered file says so). The data, tokenizer, learning rate,
steps and checkpoints are left to the user.
"""

from __future__ import annotations

from typing import Any

from costmodel.comm.overlap import BUCKET_MARK, DEFAULT_BUCKET_BYTES, EXPERTS
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError
from networks.ir import Network
from networks.ops.attention import qkv_bias
from planner.export.attention_kernel import check_default_attention
from planner.export.megatron_layout import MegatronLayout, Target, megatron_layout
from planner.export.megatron_model import gpt_shape, rotary_setting
from planner.export.megatron_recompute import megatron_recompute
from planner.plan.plan import Plan

#: the torchtitan release the keys were read in (module docstring)
TORCHTITAN_SOURCE = ("pytorch/torchtitan v0.2.2 (73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), "
                     "torchtitan/config/job_config.py")


def torchtitan_sequence_splits(tensor: int, context: int, sequence_parallel: bool) -> tuple[tuple[int, str, str], ...]:
    """torchtitan's requirement of ``seq_len``, read in pytorch/torchtitan at tag v0.2.2: each model's
    ``parallelize`` asserts ``seq_len % parallel_dims.seq_len_divisor == 0``
    (torchtitan/models/llama3/infra/parallelize.py, lines 69-74; likewise qwen3's, llama4's,
    deepseek_v3's), the divisor ``tp * (cp * 2)`` (torchtitan/distributed/parallel_dims.py, lines
    365-372): sequence parallelism splits the sequence over the tensor ranks, and context
    parallelism's default ``headtail`` load balancer (``context_parallel_load_balancer``,
    torchtitan/config/job_config.py; ``cp_shard`` in torchtitan/distributed/context_parallel.py) into
    2 x CP chunks, as PyTorch's ``_HeadTailLoadBalancer`` requires
    (torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py: ``seq_length %
    (world_size * 2)``). The assertion holds whatever the degrees, so at tensor and context 1 the
    sequence must be even."""
    why = f"torchtitan splits a sequence into 2 x {context} chunks (its headtail load balance)" \
        + (f" and a context rank's over tensor {tensor} (SequenceParallel)" if tensor > 1 else "")
    return ((tensor * 2 * context, "tensor x 2 x context", why),)


#: torchtitan's transformer models, and the pipeline schedules dnnplan prices that torch runs
TORCHTITAN = Target("torchtitan", "torchtitan's llama-style models", ("gpipe", "1f1b", INTERLEAVED),
                    torchtitan_sequence_splits)
#: dnnplan's pipeline schedules as torch.distributed.pipelining's get_schedule_class names them
SCHEDULES = {"gpipe": "GPipe", "1f1b": "1F1B", INTERLEAVED: "Interleaved1F1B"}
#: zoo networks torchtitan ships: (model name, flavor) as torchtitan/models/llama3/__init__.py
#: (llama3_args) and torchtitan/models/qwen3/__init__.py (qwen3_args) register them at v0.2.2
FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"), "llama3.1-405b": ("llama3", "405B"),
           "qwen3-30b-a3b": ("qwen3", "30B-A3B")}
#: the family a network torchtitan does not ship is registered in: dense llama3, a mixture of experts
#: qwen3. At v0.2.2, qwen3's ``Qwen3ModelArgs`` (torchtitan/models/qwen3/model/args.py) takes the
#: experts' width as it is (``moe_inter_dim``), an expert mixture on every layer (``moe_enabled``),
#: grouped-query attention with ``n_kv_heads``, ``head_dim`` and ``qk_norm`` (default 8, 128 and True:
#: stated in the note) and the experts' count, shared experts and top-k in ``moe_args=MoEArgs(...)``
#: (torchtitan/models/moe/moe.py, ``MoEArgs``: ``num_experts``, ``num_shared_experts`` 1 by default,
#: ``top_k``, the router's ``score_func`` "sigmoid", ``route_norm`` False, ``score_before_experts``
#: True). llama4's ``TransformerModelArgs`` sizes the experts from ``multiple_of`` and
#: ``ffn_dim_multiplier`` (divided by top-k plus shared experts, torchtitan/models/llama4/model/model.py)
#: and puts them on every second layer (``interleave_moe_layer_step`` 2); deepseek_v3 runs multi-head
#: latent attention (``kv_lora_rank``): neither holds a Mixtral-like model as it is
FAMILIES = {False: "llama3", True: "qwen3"}
#: ZeRO stages as FSDP's fsdp_reshard_after_forward (ZeRO-0 is DDP; torchtitan has no ZeRO-1)
RESHARD = {2: "never", 3: "always"}
#: the ZeRO stages torchtitan runs: DDP (0) and FSDP's two
ZERO_RUN = (0, *RESHARD)
#: dnnplan's MoE dispatchers as expert_parallel_comm_backend
COMM_BACKENDS = {"alltoall": "standard", "flex": "deepep"}
#: dnnplan's precisions as mixed_precision_param; fp8 adds the float8 converter
PARAM_DTYPES = {"bf16": "bfloat16", "fp8": "bfloat16", "fp32": "float32"}
#: the FP8 converter as torchtitan/components/quantization/float8.py registers it
FLOAT8_CONVERTER = "quantize.linear.float8"
#: what a refused recomputation tells the user: torchtitan's ``activation_checkpoint`` modes
RECOMPUTE_HINT = ("torchtitan recomputes every transformer layer whole (mode full): re-plan with --no-recompute, "
                  "make the plan with `dnnplan predict --recompute full --out FILE`, or export with --nearest")
#: ops of dnnplan's transformers that torchtitan's llama-style models lack (they use RMSNorm, SwiGLU, no dropout)
FOREIGN_OPS = {"layernorm": "normalise with RMSNorm", "gelu": "use SwiGLU MLPs", "dropout": "have no dropout"}


#: torchtitan's float8 converter (``quantize.linear.float8``) swaps ``nn.Linear`` modules; a mixture
#: of experts' weights are ``GroupedExperts`` parameters (torchtitan/models/moe/moe.py, v0.2.2), run
#: in FP8 only by the prototype ``quantize.grouped_mm.float8`` converter ("Prototype feature",
#: torchtitan/config/job_config.py ``Float8GroupedMM``; it wants torch.compile): the experts' GEMMs
#: stay in bf16, where dnnplan's fp8 prices them in FP8 (costmodel.choices.precision.fp8_gemms)
FP8_EXPERTS = ("FP8 on a mixture of experts: torchtitan's float8 converter runs nn.Linear layers in FP8 and the "
               "experts' grouped GEMMs stay in bf16 (their prototype grouped_mm converter aside), where dnnplan's "
               "fp8 runs them in FP8")


def check_fp8_experts(net: Network, precision: str) -> None:
    """One line for FP8 on a mixture of experts (:data:`FP8_EXPERTS`)."""
    moe = next((layer for layer in net.layers if layer.op == "moe"), None)
    if precision == "fp8" and moe is not None:
        raise DnnplanError(FP8_EXPERTS, layer=moe.name,
                           hint="plan it in bf16 for torchtitan, or export the FP8 plan to Megatron-LM")


def torchtitan_config(plan: Plan, net: Network) -> dict[str, dict[str, Any]]:
    """torchtitan's job configuration for ``plan`` of ``net``: section (dotted for a nested one, as
    ``quantize.linear.float8``) to key to value; or one line naming the layer torchtitan cannot run
    as planned (module docstring)."""
    layout = megatron_layout(plan, net, TORCHTITAN)
    check_fp8_experts(net, plan.choices.precision)
    check_model(net, layout)
    check_default_attention(plan, net, "torchtitan's models run attention by PyTorch's SDPA, which picks its "
                                       "fused kernels itself")
    recompute = megatron_recompute(plan, net, layout.chunk_blocks, RECOMPUTE_HINT)
    if recompute.granularity and recompute.method != "uniform":
        first = next(layer.name for layer in net.layers if layer.op == "attention")
        which = f" (the first {recompute.num_layers} of each chunk)" if recompute.method else ""
        raise DnnplanError(f"recomputed {recompute.granularity}{which}: torchtitan recomputes every transformer "
                           "layer whole (full), or per op or every n-th layer (selective), not attention's core "
                           "alone nor the first layers of a chunk",
                           layer=first, hint=RECOMPUTE_HINT)
    choices = plan.choices
    if choices.fp8_params and choices.precision == "fp8":
        raise DnnplanError("FP8 parameters (--fp8-params): torchtitan's float8 converter keeps each weight in its "
                           "own precision and casts it for the GEMM", hint="re-plan without --fp8-params")
    if choices.sharded_optimizer.grad_bytes:
        raise DnnplanError("float32 gradients (--grad-fp32): torchtitan keeps float32 weights and gradients (FSDP's "
                           "sharded parameters, or autocast without it), which dnnplan prices as 16-bit weights "
                           "beside float32 master weights, the same bytes", hint="re-plan without --grad-fp32")
    shape = gpt_shape(net)
    sections: dict[str, dict[str, Any]] = {
        "job": {"description": f"dnnplan plan of {plan.network_name} on {plan.devices} devices of {plan.machine}"},
        "model": model_section(net, shape.experts is not None, choices.precision),
        "optimizer": {"name": optimizer(choices.optimizer)},
        "training": training_section(plan, layout, shape.seq_length, choices.precision),
        "parallelism": parallelism_section(plan, net, layout, choices.zero, bool(shape.experts)),
        "activation_checkpoint": {"mode": "full" if recompute.granularity else "none"},
    }
    sections["parallelism"].update(overlap_keys(choices.overlap))
    sections["compile"] = {"enable": True, "components": ["model", "loss"]} \
        if sections["parallelism"].get("enable_async_tensor_parallel") else {"enable": False}
    if choices.precision == "fp8":
        sections["quantize.linear.float8"] = {"recipe_name": "tensorwise", "filter_fqns": ["output"]}
    return sections


def check_model(net: Network, layout: MegatronLayout) -> None:
    """One line for a network or layout torchtitan's llama-style models cannot hold: a layer norm,
    GELU or dropout, learned positions, attention without rotary positions, biases (v0.2.2's llama3
    and qwen3 models build every projection, MLP, expert and output linear with ``bias=False``,
    torchtitan/models/{llama3,qwen3}/model/model.py, models/moe/moe.py: Qwen2's query, key and value
    biases would be trained without, and priced with), tensor parallelism without sequence parallelism."""
    for layer in net.layers:
        if has_bias(layer):
            raise DnnplanError(f"{layer.op} with biases: torchtitan's llama-style models have none",
                               layer=layer.name, hint="export this plan to Megatron-LM (--to megatron)")
        if layer.op in FOREIGN_OPS:
            raise DnnplanError(f"{layer.op}: torchtitan's llama-style models {FOREIGN_OPS[layer.op]}",
                               layer=layer.name, hint="export this plan to Megatron-LM (--to megatron)")
        if layer.op == "embedding" and layer.p.get("positions"):
            raise DnnplanError("learned position embeddings: torchtitan's llama-style models use rotary positions",
                               layer=layer.name, hint="export this plan to Megatron-LM (--to megatron)")
        if layer.op == "attention" and not layer.p.get("rotary"):
            raise DnnplanError("attention without rotary positions: torchtitan's llama-style models rotate",
                               layer=layer.name, hint="export this plan to Megatron-LM (--to megatron)")
    if layout.tensor > 1 and not layout.sequence_parallel:
        norm = next(layer.name for layer in net.layers if layer.op == "rmsnorm")
        raise DnnplanError(f"replicated over tensor {layout.tensor}: torchtitan's tensor parallelism splits the "
                           "norms over the sequence (SequenceParallel)", layer=norm,
                           hint="re-plan with --sequence-parallel")


def has_bias(layer) -> bool:
    """Whether ``layer`` holds a bias torchtitan's llama-style models lack (check_model)."""
    if layer.op == "attention":
        return bool(layer.p.get("bias")) or qkv_bias(layer.p)
    return layer.op in ("linear", "moe") and bool(layer.p.get("bias"))


def model_section(net: Network, moe: bool, precision: str) -> dict[str, Any]:
    name, flavor = FLAVORS.get(net.name, (FAMILIES[moe], net.name))
    out: dict[str, Any] = {"name": name, "flavor": flavor}
    if precision == "fp8":
        out["converters"] = [FLOAT8_CONVERTER]
    return out


def optimizer(name: str) -> str:
    if name != "adam":
        raise DnnplanError(f"optimizer {name}: torchtitan builds Adam and AdamW only "
                           "(torchtitan/components/optimizer.py)", hint="re-plan with --optimizer adam")
    return "AdamW"


def training_section(plan: Plan, layout: MegatronLayout, seq_len: int, precision: str) -> dict[str, Any]:
    if precision not in PARAM_DTYPES:
        raise DnnplanError(f"precision {precision}: torchtitan trains in bfloat16 (with FP8 GEMMs) or float32, "
                           "and has no fp16 or TF32 switch", hint="re-plan with --precision bf16, fp8 or fp32")
    micro_batches = plan.pipeline.micro_batches if plan.pipeline else 1
    pipelined = layout.stages > 1
    local = layout.micro_batch_size * (micro_batches if pipelined else 1)
    return {"local_batch_size": local, "global_batch_size": layout.global_batch_size, "seq_len": seq_len,
            "mixed_precision_param": PARAM_DTYPES[precision]}


def parallelism_section(plan: Plan, net: Network, layout: MegatronLayout, zero: int, moe: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if zero == 0:
        if layout.data > 1 and layout.data != plan.devices:
            raise DnnplanError(f"ZeRO-0 over {layout.data} of {plan.devices} devices: torchtitan's DDP runs without "
                               "other parallelism (llama3/infra/parallelize.py)", hint="re-plan with --zero 3")
        if (layout.context * layout.tensor) % layout.expert:
            raise DnnplanError(f"ZeRO-0 with expert degree {layout.expert}: torchtitan's expert parallelism splits "
                               "FSDP's shard dimension (torchtitan/distributed/parallel_dims.py at v0.2.2: efsdp = "
                               "shard x context x tensor / (expert tensor x expert)), which DDP does not have",
                               hint="re-plan with --zero 3, or export with --nearest")
        out.update(data_parallel_replicate_degree=layout.data, data_parallel_shard_degree=1)
    elif zero in RESHARD:
        out.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=layout.data,
                   fsdp_reshard_after_forward=RESHARD[zero])
    else:
        raise DnnplanError("ZeRO-1: torchtitan shards the optimiser state only with the weights (FSDP)",
                           hint="re-plan with --zero 3, 2 or 0")
    out["tensor_parallel_degree"] = layout.tensor
    out["pipeline_parallel_degree"] = layout.stages
    if layout.stages > 1:
        out["pipeline_parallel_schedule"] = SCHEDULES[plan.pipeline.schedule]
        out["pipeline_parallel_microbatch_size"] = layout.micro_batch_size
        out["module_fqns_per_model_part"] = model_parts(net, layout.chunk_blocks)
    out["context_parallel_degree"] = layout.context
    if moe:
        out["expert_parallel_degree"] = layout.expert
        out["expert_tensor_parallel_degree"] = 1 if layout.expert_folded else layout.tensor
        if plan.choices.moe_dispatch != "alltoall":  # the key is read from v0.2.1 on; its default is all-to-all
            out["expert_parallel_comm_backend"] = COMM_BACKENDS[plan.choices.moe_dispatch]
    return out


def model_parts(net: Network, chunk_blocks: tuple[tuple[str, ...], ...]) -> list[list[str]]:
    """The pipeline's chunks as torchtitan's module names: ``tok_embeddings`` first, ``layers.i``
    the i-th transformer layer, ``norm`` and ``output`` last."""
    index = {block: i for i, block in enumerate(b for chunk in chunk_blocks for b in chunk)}
    parts = [[f"layers.{index[b]}" for b in chunk] for chunk in chunk_blocks]
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def overlap_keys(overlap: str) -> dict[str, Any]:
    """The plan's overlap (``data`` or ``all``, at DDP's bucket) as torchtitan's keys; one line for what
    it cannot express (module docstring)."""
    mode, _, bucket = overlap.partition(BUCKET_MARK)
    mode = mode or "data"  # not yet priced: a GPU machine's default
    if mode.endswith(EXPERTS):
        raise DnnplanError(f"overlap {mode}: torchtitan overlaps expert all-to-alls under DualPipeV only",
                           hint="re-plan with --overlap data or all")
    if mode not in ("data", "all"):
        raise DnnplanError(f"overlap {mode or 'none'}: torchtitan's FSDP and DDP always overlap their collectives",
                           hint="re-plan with --overlap data")
    if bucket and float(bucket) * 2 ** 20 != DEFAULT_BUCKET_BYTES:
        raise DnnplanError(f"a {bucket} MiB gradient bucket: torchtitan keeps DDP's 25 MB (FSDP reduces a layer "
                           "at a time)", hint="re-plan without --bucket-mb")
    return {"enable_async_tensor_parallel": True} if mode == "all" else {}


#: the rotary scaling factor of torchtitan's llama3 model arguments (v0.2.2 torchtitan/models/llama3/model/
#: args.py: ``RoPEScalingArgs.scaling_factor``, which every flavor keeps and ``precompute_freqs_cis`` always
#: applies: Llama 3.1's; a factor of 1 scales nothing)
TORCHTITAN_ROPE_SCALING = 8.0


def default_rotary_base(net: Network) -> int:
    """The rope_theta torchtitan's model arguments default to for ``net``'s family (v0.2.2: llama3's
    TransformerModelArgs 10000; Qwen3ModelArgs, a mixture of experts' family, 1000000)."""
    return 1_000_000 if gpt_shape(net).experts is not None else 10_000


def flavor_note(net: Network) -> str | None:
    """What the user registers when torchtitan ships no flavor of ``net``: the family's
    ``__init__.py`` and the shape, in the model arguments' names. Where it ships one, None, or
    what differs from the network in the model it trains (its llama3 flavors scale the rotary
    frequencies as Llama 3.1, Llama 3's networks do not: the same step, another model's positions)."""
    factor = rotary_setting(net, "rope_scaling")
    if net.name in FLAVORS:
        family, flavor = FLAVORS[net.name]
        if family == "llama3" and factor != TORCHTITAN_ROPE_SCALING:
            own = "does not" if factor is None else f"scales by {factor:g}"
            return (f"torchtitan's flavor {flavor} scales the rotary frequencies as Llama 3.1 does (RoPEScalingArgs, "
                    f"factor {TORCHTITAN_ROPE_SCALING:g}), where {net.name} {own}: the same step and memory, "
                    "the positions of another model")
        return None
    shape = gpt_shape(net)
    family = FAMILIES[shape.experts is not None]
    dims = [f"dim={shape.hidden_size}", f"n_layers={shape.num_layers}", f"n_heads={shape.heads}"]
    if shape.query_groups:
        dims.append(f"n_kv_heads={shape.query_groups}")
    where = f"torchtitan ships no flavor {net.name}: register it in torchtitan/models/{family}/__init__.py"
    attention = next(layer for layer in net.layers if layer.op == "attention")
    base = rotary_setting(net, "rotary_base")
    theta = ([f"rope_theta={int(base) if float(base).is_integer() else base}"]
             if base is not None and base != default_rotary_base(net) else [])
    if not shape.experts:
        scaled = ([] if factor == TORCHTITAN_ROPE_SCALING else
                  [f"rope_scaling_args=RoPEScalingArgs(scaling_factor={factor or 1.0:g})"])
        return f"{where} ({', '.join(dims + theta + scaled)}; the MLP width {shape.ffn_hidden_size})"
    moe = next(layer for layer in net.layers if layer.op == "moe")
    vocab = next((layer.p["vocab"] for layer in net.layers if layer.op == "embedding"), None)
    if not shape.query_groups:  # Qwen3ModelArgs' n_kv_heads defaults to 8, not to the heads
        dims.append(f"n_kv_heads={shape.heads}")
    dims += [f"head_dim={shape.kv_channels or shape.hidden_size // shape.heads}",
             f"qk_norm={bool(attention.p.get('qk_norm'))}"] + ([f"vocab_size={vocab}"] if vocab else []) + theta
    dims += ["moe_enabled=True", f"moe_inter_dim={shape.ffn_hidden_size}",
             f"moe_args=MoEArgs(num_experts={shape.experts}, num_shared_experts={moe.p.get('shared_experts') or 0}, "
             f"top_k={shape.top_k}, ...)"]
    unscaled = (f"; Qwen3ModelArgs scales no rotary frequencies, and {net.name}'s are scaled as Llama 3.1's "
                f"(factor {factor:g})" if factor is not None else "")
    return (f"{where} as Qwen3ModelArgs({', '.join(dims)}), the router in MoEArgs as the model routes (its "
            f"defaults: score_func=\"sigmoid\", route_norm=False, score_before_experts=True){unscaled}")
