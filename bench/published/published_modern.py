"""From a row of bench/assets/published-modern.yaml to the cost model's prediction of its step (pure
apart from reading the asset; bench/published/bench_published_modern.py runs it over every row).

A row is a published training run as it was configured. :func:`network_of` writes its model as a
network spec from the row's cited dimensions (layers, width, MLP width, query and key/value heads,
head width, vocabulary, GELU or SwiGLU, LayerNorm or RMSNorm, learned or rotary positions, biases,
a tied or untied head, routed experts), so the sequence is the row's and the parameter count is the
row's model's (:func:`parameter_count`; llm-foundry prints its models' counts, and the test holds
them). :func:`layout` is the run's tensor x pipeline x context x data layout with expert
parallelism carved out of the data ranks, as Megatron-Core lays them out (costmodel.frameworks.megatron).
:func:`predict_row` prices the step: each of ``pipeline`` stages (the interleaved schedule where the
row has virtual stages) on its ranks, ``batch / (micro x data)`` micro-batches of ``micro``
sequences a rank (gradient accumulation: one micro-batch's activations kept, gradients reduced once
a step), the row's recomputation, attention algorithm and data-parallel sharding
(:data:`ZERO_STAGE`), Adam, mixed precision. What the cost model cannot yet express is priced as
the nearest thing it can and listed by :func:`deviations` (FP8 as BF16, no overlap of
communication, ...), never tuned per row.

:func:`step_flops` counts a step's FLOPs by the row's source's own convention (``flops`` in the
asset); the published step is those FLOPs over the published TFLOP/s (or the tokens over the
published tokens/s), and the predicted metric the same FLOPs (tokens) over the predicted step.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from dataclasses import replace

from costmodel.compute.calibration import PipelineTerms, pipeline_terms, stage_compute
from costmodel.comm.overlap import resolve_overlap
from costmodel.frameworks.as_run import framework_overlap
from costmodel.frameworks.framework import Framework
from costmodel.frameworks.host_calls import step_calls
from costmodel.frameworks.loading import load_framework
from costmodel.step.host_timeline import run_timeline
from costmodel.step.prediction import StepPrediction
from costmodel.calls.algorithms import recompute_algorithms
from costmodel.machine.loading import load_machine
from costmodel.machine.model import Machine
from costmodel.frameworks.megatron import megatron_strategies
from costmodel.choices.moe_dispatch import DEFAULT_MOE_DISPATCH, with_moe_dispatch
from costmodel.choices.optimizer import Optimizer, unfused_adamw_bytes
from costmodel.step.pipeline import INTERLEAVED, PipelinePrediction, ends_as_blocks, predict_pipeline
from costmodel.choices.precision import PRECISIONS, with_precision
from costmodel.step.prediction import predict_step
from networks.ir import Network
from networks.ops.base import prod
from networks.spec import parse_network

ASSET = Path(__file__).resolve().parents[1] / "assets" / "published-modern.yaml"
#: the ZeRO stage that holds what each data-parallel sharding of the asset shards (costmodel.choices.optimizer):
#: FSDP full-shard is ZeRO-3 (parameters gathered for forward and again for backward); FSDP
#: without resharding after forward (Llama 3) shards gradients and optimizer state and gathers the
#: parameters once a step, ZeRO-2's volume (a reduce-scatter and an all-gather of the weights);
#: Megatron's distributed optimizer and ZeRO-1 are stage 1
ZERO_STAGE = {"fsdp-full-shard": 3, "fsdp-no-reshard": 2, "distributed-optimizer": 1, "zero1": 1}
#: the asset's ``framework`` values that run their sharding as PyTorch FSDP (Composer's trainer, every
#: llm-foundry row): its own kernels on each unit's parameters and gradients priced (costmodel.layer.fsdp)
TORCH_FSDP = frozenset({"composer"})
#: the asset's ``grad_reduce`` (the gradients' precision on the wire) -> bytes an element; absent:
#: the weights' own (costmodel.choices.optimizer)
REDUCE_BYTES = {"fp32": 4, "bf16": 2}
#: the asset's ``optimizer`` -> bytes an update moves per weight element (costmodel.choices.optimizer);
#: absent: the fused step
UPDATE_BYTES = {"composer-decoupled-adamw": unfused_adamw_bytes(weight_bytes=4, grad_bytes=4, clip=True)}
#: the asset's attention column -> the cost model's algorithm: FlashAttention-1 and -2 both priced as
#: FlashAttention-2's tiles (costmodel.calls.flash), the baseline as materialised scores
ATTENTION = {"flash": "flash", "flash2": "flash", "standard": "materialized"}


#: trays in one NVL72 rack: the largest Slurm segment Megatron-Bridge's performance launcher asks for
SEGMENT_NODES_MAX = 18


def segment_nodes(nodes: int) -> int:
    """The Slurm ``--segment`` (nodes allocated together in one topology block: one NVL72 rack)
    Megatron-Bridge's performance launcher gives a job of ``nodes`` 4-GPU nodes: all of them up to
    18, else the largest divisor of ``nodes`` up to 18 (scripts/performance/utils/executors.py at
    067f987, "add --segment flag to sbatch if job uses GB200", since 568b3a3ef, 2025-08-28): 256
    GB200s (64 nodes) run as four segments of 16 trays, 64 GPUs a rack."""
    if nodes <= SEGMENT_NODES_MAX:
        return nodes
    return next(k for k in range(SEGMENT_NODES_MAX, 0, -1) if nodes % k == 0)


def machine_of(row: dict) -> Machine:
    """The row's shipped machine as its job was placed: on a machine whose NVLink domain spans
    several nodes (gb200-nvl72), the ranks of one Slurm segment (:func:`segment_nodes`) share a
    rack's NVLink and the next segment starts on another rack, so the domain the run saw is the
    segment's GPUs (at most the rack's): ranks in segment order, as the launcher's node list gives them."""
    machine = load_machine(row["machine"])
    per_node = machine.devices_per_node
    if machine.domain_size <= per_node:
        return machine
    segment = segment_nodes(-(-row["config"]["gpus"] // per_node)) * per_node
    return replace(machine, devices_per_domain=min(machine.domain_size, segment))


def load_rows(path: Path = ASSET) -> list[dict]:
    """The rows, each ``calibration`` or ``held-out``, at most half of each group calibrating."""
    rows = yaml.safe_load(path.read_text())["rows"]
    for group in dict.fromkeys(r["group"] for r in rows):
        sets = [r["set"] for r in rows if r["group"] == group]
        if 2 * sets.count("calibration") > len(sets) or set(sets) - {"calibration", "held-out"}:
            raise SystemExit(f"{path}: {group}: every row is calibration or held-out, at most half calibrate")
    return rows


#: Megatron-Core ``recompute_modules`` the cost model prices (the rest are listed by :func:`deviations`)
RECOMPUTE_MODULES = ("moe_act",)


def _mlp(m: dict, recompute_modules: tuple = ()) -> str:
    moe = m.get("moe")
    if moe:
        return (f"      - {{name: moe, op: moe, experts: {moe['experts']}, top_k: {moe['top_k']}, "
                f"hidden: {moe['expert_ffn']}, gated: {str(m['activation'] == 'swiglu').lower()}, "
                f"shared_experts: {moe.get('shared_experts', 0)}, bias: {str(m['bias']).lower()}, "
                f"recompute_act: {str('moe_act' in recompute_modules).lower()}"
                f"{', act_clamp: ' + str(m['act_clamp']) if m.get('act_clamp') is not None else ''}}}\n"
                "      - {name: add2, op: add, inputs: [add1, moe]}\n")
    if m.get("act_clamp") is not None:
        raise SystemExit(f"{m['name']}: act_clamp is priced on a mixture of experts' activation only")
    bias = str(m["bias"]).lower()
    if m["activation"] == "swiglu":
        first, act = 2 * m["ffn"], "{name: act, op: swiglu}"
    else:
        first, act = m["ffn"], "{name: act, op: gelu}"
    return (f"      - {{name: fc1, op: linear, features: {first}, bias: {bias}}}\n      - {act}\n"
            f"      - {{name: fc2, op: linear, features: {m['hidden']}, bias: {bias}}}\n"
            "      - {name: add2, op: add, inputs: [add1, fc2]}\n")


def model_spec(row: dict) -> str:
    """The row's model as a network spec at the row's sequence (module docstring)."""
    m, seq = row["model"], row["config"]["sequence"]
    norm = "rmsnorm" if m["norm"] == "rmsnorm" else "layernorm"
    bias = str(m["bias"]).lower()
    rotary = str(m["positions"] in ("rope", "yarn")).lower()
    positions = f", positions: {seq}" if m["positions"] == "learned" else ""
    head = ", tied_to: embed" if m["tied"] else ""
    exchange = row["config"].get("context_exchange")
    exchange = f", context_exchange: {exchange}" if exchange else ""
    return (f"name: {m['name']}\ninputs:\n  tokens: {{shape: [{seq}], dtype: int64}}\nblocks:\n  block:\n"
            f"    layers:\n      - {{name: norm1, op: {norm}}}\n"
            f"      - {{name: attn, op: attention, heads: {m['heads']}, kv_heads: {m['kv_heads']}, "
            f"head_dim: {m['head_dim']}, causal: true, bias: {bias}, rotary: {rotary}{exchange}"
            f"{', yarn: true' if m['positions'] == 'yarn' else ''}"
            f"{', qk_norm: true' if m.get('qk_norm') else ''}}}\n"
            "      - {name: add1, op: add, inputs: [$input, attn]}\n"
            f"      - {{name: norm2, op: {norm}}}\n" + _mlp(m, tuple(row["config"].get("recompute_modules", ()))) +
            f"layers:\n  - {{name: embed, op: embedding, inputs: tokens, vocab: {m['vocab']}, dim: {m['hidden']}"
            f"{positions}}}\n  - {{use: block, name: \"h{{i}}\", repeat: {m['layers']}}}\n"
            f"  - {{name: norm, op: {norm}}}\n"
            f"  - {{name: lm_head, op: linear, features: {m['vocab']}, bias: false{head}}}\n"
            "  - {name: loss, op: softmax_cross_entropy"
            f"{', fused: true' if row['config'].get('cross_entropy') == 'te-fused' else ''}}}\n")


def precision_of(row: dict) -> str:
    """The precision the step is priced in: the row's where the cost model has it (FP8 priced as
    BF16 until it does: :func:`deviations`)."""
    return row["config"]["precision"] if row["config"]["precision"] in PRECISIONS else "bf16"


def moe_dispatch_of(row: dict) -> str:
    """The row's token dispatcher (``moe_dispatcher``): Megatron-Core's ``alltoall`` when absent,
    ``flex`` where its recipe runs the flex dispatcher, DeepEP or HybridEP (costmodel.choices.moe_dispatch)."""
    return row["config"].get("moe_dispatcher", DEFAULT_MOE_DISPATCH)


def network_of(row: dict) -> Network:
    """The row's model (:func:`model_spec`) in its precision, its moe layers priced with the row's
    token dispatcher (:func:`moe_dispatch_of`)."""
    net = with_precision(parse_network(model_spec(row), row["name"]), precision_of(row),
                         fp8_params=bool(row["config"].get("fp8_param_gather")))
    return with_moe_dispatch(net, moe_dispatch_of(row))


def parameter_count(net: Network) -> int:
    """Every weight of ``net`` (a tied head's table counted once, with its embedding)."""
    return sum(prod(shape) for layer in net.layers for _, shape in layer.weights)


def layout(row: dict) -> dict[str, int]:
    """The degrees the step is priced with: tensor, pipeline, context, data (whose product is the
    GPUs), expert (out of the data ranks, or of data x tensor ranks with sequence parallelism:
    Megatron-Core's MoE Parallel Folding, costmodel.frameworks.megatron), chunks, micro (sequences a rank) and
    micro_batches (a step's, a rank's)."""
    c = row["config"]
    data = c["data"]
    expert = c["expert"]
    micro = c["micro"]  # None where the source does not publish it (the harness chooses one)
    return {"tensor": c["tensor"], "pipeline": c["pipeline"], "context": c["context"], "data": data,
            "expert": expert, "chunks": c["chunks"], "micro": micro,
            "micro_batches": c["batch"] // (micro * data) if micro else None}


def sequence_parallel(row: dict) -> bool:
    """Megatron's sequence parallelism where the row has it (beside context parallelism, inside
    each context rank's positions, as Megatron-Core runs it: costmodel.frameworks.megatron)."""
    c = row["config"]
    return bool(c.get("sequence_parallel")) and c["tensor"] > 1


def deviations(row: dict) -> list[str]:
    """How the priced step differs from the published run, each a feature the cost model lacks
    or a setting the source does not publish (the row's ``unpublished``, with how it was chosen)."""
    c = row["config"]
    out = [f"{key} {c[key]} not published: {why}" for key, why in (row.get("unpublished") or {}).items()]
    if c["precision"] not in PRECISIONS:
        out.append(f"{c['precision']} priced as bf16 (no FP8 in the cost model)")
    if flash_attention_1(row):
        out.append("FlashAttention-1 priced as FlashAttention-2's algorithm")
    if c.get("fp8_recipe") == "mxfp8":
        out.append("MXFP8 (an FP8 scale a 32-element block, Blackwell's native format) priced as FP8 GEMMs at the FP8 peak")
    if c.get("cpu_offload_layers"):
        out.append(f"activations of {c['cpu_offload_layers']} layers offloaded to the CPU by the recipe: not priced "
                   "(kept on the GPU, so the predicted peak exceeds what ran)")
    if c.get("data_sharding") == "fsdp-no-reshard":
        out.append("FSDP without reshard priced as ZeRO-2 (same volume, whole weights kept)")
    unpriced = [x for x in c.get("recompute_modules", ()) if x not in RECOMPUTE_MODULES]
    if unpriced:
        out.append(f"recompute_modules {', '.join(unpriced)} not priced (their inputs kept, nothing recomputed)")
    if (row["model"].get("moe") or {}).get("dropless") and c["expert"] > 1:
        priced = ("the balanced load, each token once to each node and rank holding its experts (the flex "
                  "dispatcher, costmodel.comm.expert)" if moe_dispatch_of(row) == "flex"
                  else "the balanced capacity-1.0 buffer")
        out.append(f"dropless dispatch (priced as {priced}): Megatron-Core copies the "
                   "token counts to the host in every MoE layer's dispatch (the alltoall dispatcher before the "
                   "expert all-to-all: token_dispatcher.py, cuda_sync_point before_ep_alltoall; the flex "
                   "dispatcher's DeepEP permute (.item()) and HybridEP dispatch (blocking without "
                   "num_permuted_tokens) alike), which drains the GPU's queue: priced under the megatron "
                   "framework as a host wait in each MoE layer's forward (kernels.moe.sync_after) with the "
                   "router's and dispatcher's launches at their host cost; the recipe's partial CUDA graphs "
                   "(cuda_graph_scope), where it has them, not priced")
    if c.get("moe_a2a_overlap"):
        out.append("moe_a2a_overlap: each expert all-to-all hidden under the MoE layer's opposite pass of another "
                   "micro-batch (costmodel.comm.overlap '+experts'; the attention beside it not counted in the window), "
                   "but in the passes the combined 1F1B schedule runs alone (the first forward and last backward, "
                   "a pipeline's warm-up and cool-down), exposed once a step")
    if row["flops"] == "fa2":
        out.append("dropout 0.1 (GPT2Config's defaults: embeddings, residuals, attention) left out: fused into "
                   "the run's kernels, but for the baseline's materialised scores (a mask and a copy of each kept)")
    if c["context"] > 1 and not c.get("context_exchange"):
        out.append("context-parallel keys and values exchanged by the cheaper of ring and all-gather "
                   "(costmodel.comm.context), whichever the run used")
    tensor = ("tensor-parallel communication overlapped with its GEMMs (tp_comm_overlap, costmodel.comm.overlap 'all'); "
              "context-parallel communication not overlapped" if c.get("tp_comm_overlap")
              else "tensor- and context-parallel communication not overlapped")
    out.append("data-parallel gradient reduction and parameter gathers overlapped in buckets (the GPU machines' "
               f"default, costmodel.comm.overlap); {tensor}")
    return out


def kernels_as_run(row: dict) -> bool:
    """Whether the row's kernels are known and priced as they ran: the rows an efficiency fit may
    use. Not an FP8 run (priced as BF16), not FlashAttention-1 (priced as FlashAttention-2), not
    FlashAttention-2 Table 1's baseline, whose implementation and micro-batch the paper does not
    state: each would fit the efficiency of a kernel that did not run."""
    c = row["config"]
    return c["precision"] in PRECISIONS and not flash_attention_1(row) and c["micro"] is not None


def flash_attention_1(row: dict) -> bool:
    """FlashAttention-2 Table 1's "FlashAttention" column (elsewhere ``flash`` names the algorithm
    without saying which version ran)."""
    return row["flops"] == "fa2" and row["config"]["attention"] == "flash"


def predict_row(row: dict, machine: Machine | None = None, recorders: list | None = None,
                micro: int | None = None, recompute: str | None = None) -> PipelinePrediction:
    """The row's step priced on ``machine`` (its shipped machine by default); ``micro`` and
    ``recompute`` override the row's micro-batch and recomputation (a baseline that publishes
    neither: bench harness). Each stage's roofline is appended to ``recorders`` when given
    (calibration)."""
    c, lay = row["config"], layout(row)
    if micro is not None:
        lay = {**lay, "micro": micro, "micro_batches": c["batch"] // (micro * lay["data"])}
    recompute = recompute or c["recompute"]
    net = network_of(row)
    machine = machine or machine_of(row)
    opt = Optimizer("adam", ZERO_STAGE[c["data_sharding"]], reduce_bytes=REDUCE_BYTES.get(c.get("grad_reduce"), 0),
                    reduce_each_micro=c.get("reduce_each_micro"),  # absent: the stage's own (Optimizer.reduces_each_micro)
                    update_bytes=UPDATE_BYTES.get(c.get("optimizer"), 0),
                    torch_fsdp=c.get("framework") in TORCH_FSDP)
    full = recompute == "full"
    algorithms = recompute_algorithms(net, recompute, ATTENTION[c["attention"]])
    fw = framework_as_run(row)
    overlap = framework_overlap(resolve_overlap(overlap_of(row), machine), fw)

    def stage(stage_net: Network, ranks: int, batch: int, view: Machine):
        strategies, fallbacks = megatron_strategies(stage_net, ranks, batch, lay["tensor"], sequence_parallel(row),
                                                    context=lay["context"], expert=lay["expert"])
        if fallbacks:
            raise SystemExit(f"{row['name']}: {fallbacks[0].layer} cannot take {fallbacks[0].wanted}: "
                             f"{fallbacks[0].reason}")
        compute = stage_compute(machine, recorders)
        return with_host_per_micro(predict_step(stage_net, batch, strategies, algorithms, view, compute, opt,
                                                checkpoints=full, overlap=overlap), stage_net, fw)

    chunks = lay["chunks"]
    return predict_pipeline(net, c["batch"], c["gpus"], lay["pipeline"], lay["micro_batches"],
                            INTERLEAVED if chunks > 1 else "1f1b", machine, stage, cuts=cuts_of(row, net),
                            chunks=chunks)


#: the asset's groups whose runs are Megatron-Core's (NeMo and Megatron-Bridge run it): priced under
#: the shipped ``megatron`` framework (costmodel/frameworks/megatron.yaml); the others ran stacks no
#: framework file describes (Meta's Llama 3 stack, MosaicML Composer on PyTorch FSDP, FlashAttention-2's
#: own training scripts) and are priced as the cost model's fused kernels with an idle host (``ideal``)
MEGATRON_GROUPS = ("NeMo", "Megatron-Core")


def framework_of(row: dict) -> str:
    """The shipped framework a row is priced under (:data:`MEGATRON_GROUPS`)."""
    return "megatron" if row["group"].startswith(MEGATRON_GROUPS) else "ideal"


def framework_as_run(row: dict) -> Framework:
    """The row's framework (:func:`framework_of`) as its recipe ran it: a run whose experts drop and
    pad tokens to a capacity (not ``dropless``) reads no token counts on the host, so its MoE layers
    keep no host synchronisation (megatron.yaml, ``kernels.moe.sync_after``)."""
    fw = load_framework(framework_of(row))
    if (row["model"].get("moe") or {}).get("dropless") or not row["model"].get("moe"):
        return fw
    return replace(fw, kernels=tuple((k, replace(v, sync_after=0)) for k, v in fw.kernels))


def with_host_per_micro(pred: StepPrediction, net: Network, fw: Framework) -> StepPrediction:
    """``pred`` (one stage's step on one micro-batch) with what ``fw``'s host adds to each layer's
    passes: the calls of one micro-batch on the host timeline (costmodel.frameworks.host_calls), each
    layer's share of it less its device time, and the device's launch gaps beside its kernels (the
    timeline's device time holds them), kept in the layer's ``dispatch_s (the pipeline
    prices a stage's micro-batch as its passes and their dispatch, costmodel.step.pipeline). Nothing
    where the host never holds the device back."""
    if fw.host.zero:
        return pred
    calls = step_calls(pred, net, fw)
    line = run_timeline(calls)
    gaps: dict[str, float] = {}  # the device's launch gap beside each of a pass's calls (host_calls)
    for call in calls:
        if not call.sync:
            gaps[call.label] = gaps.get(call.label, 0.0) + fw.host.launch_gap_s.value
    added: dict[str, float] = {}
    for span in line.spans:
        name, _, pass_ = span.label.rpartition(" ")
        if pass_ in ("fwd", "bwd"):
            added[name] = added.get(name, 0.0) + max(0.0, span.share_s - span.device_s) + gaps.get(span.label, 0.0)
    layers = tuple(replace(x, layer=replace(x.layer, dispatch_s=x.layer.dispatch_s + added.get(x.layer.name, 0.0)))
                   for x in pred.layers)
    return replace(pred, layers=layers)


def overlap_of(row: dict) -> str:
    """The ``--overlap`` the row's run had (costmodel.comm.overlap): the GPU machines' default ``data``,
    ``all`` where its recipe overlapped the tensor-parallel communication (``tp_comm_overlap``),
    ``+experts`` where it overlapped the expert all-to-alls (``moe_a2a_overlap``)."""
    c = row["config"]
    return ("all" if c.get("tp_comm_overlap") else "data") + ("+experts" if c.get("moe_a2a_overlap") else "")


def cuts_of(row: dict, net: Network) -> list | None:
    """The row's pipeline cut: with ``pipeline_split: ends-as-layers`` the embedding and the output
    layer with the loss each count as a transformer block (``costmodel.step.pipeline.ends_as_blocks``:
    Megatron-Core's account_for_embedding/loss_in_pipeline_split, Llama 3's first and last stages
    one layer short); else None, Megatron's cut of equal blocks (or balanced FLOPs)."""
    c = row["config"]
    if c.get("pipeline_split", "blocks") == "blocks":
        return None
    n = c["pipeline"] * c["chunks"]
    cuts = ends_as_blocks(net, n) if c["pipeline_split"] == "ends-as-layers" else None
    if cuts is None:
        raise SystemExit(f"{row['name']}: pipeline_split {c['pipeline_split']!r} cannot cut "
                         f"{row['model']['layers']} layers into {n} chunks")
    return cuts


def terms_of(row: dict, machine: Machine | None = None, micro: int | None = None,
             recompute: str | None = None) -> PipelineTerms:
    """The row's predicted step as priced terms (costmodel.compute.calibration)."""
    machine = machine or machine_of(row)
    recorders: list = []
    pred = predict_row(row, machine, recorders, micro, recompute)
    return pipeline_terms(machine, [(r, s.per_micro_s, s.once_s) for r, s in zip(recorders, pred.stages, strict=True)],
                          pred.micro_batches, pred.chunks)


def step_flops(row: dict, net: Network) -> float:
    """A step's FLOPs as the row's source counts them (the asset's ``flops`` conventions)."""
    m, c = row["model"], row["config"]
    tokens, seq, layers = c["batch"] * c["sequence"], c["sequence"], m["layers"]
    conv = row["flops"]
    if conv == "palm":  # PaLM Appendix B: 6 N + 12 L H Q T per token
        return tokens * (6 * parameter_count(net) + 12 * layers * m["heads"] * m["head_dim"] * seq)
    if conv == "mosaic":  # llm-foundry README: 6 NumParams + 12 L d S per token
        return tokens * (6 * m["params"] + 12 * layers * m["hidden"] * seq)
    if conv == "fa2":  # FlashAttention-2: 6 S N + 12 L h S^2 per sequence (N with embeddings: an assumption)
        return tokens * (6 * parameter_count(net) + 12 * layers * m["hidden"] * seq)
    if conv == "megatron-2024":
        return _megatron_2024(m, c)
    raise ValueError(f"{row['name']}: no FLOP convention for {conv!r} (its metric is tokens)")


def _megatron_2024(m: dict, c: dict) -> float:
    """Megatron-LM num_floating_point_operations (training.py at 0b981f9), SwiGLU and MoE terms."""
    h, a, g, q = m["hidden"], m["heads"], m["kv_heads"], m["heads"] * m["head_dim"]
    moe = m.get("moe")
    ffn, k = (moe["expert_ffn"], moe["top_k"]) if moe else (m["ffn"], 1)
    glu = 1.5 if m["activation"] == "swiglu" else 1.0
    seq = c["sequence"]
    return 12 * c["batch"] * seq * m["layers"] * h ** 2 * (
        (1 + g / a + seq / h) * q / h + ffn / h * k * glu + m["vocab"] / (2 * m["layers"] * h))


def metric_of(row: dict) -> str:
    """The published figure a row is held against: tokens where the source measures tokens
    (llm-foundry's T/s, NeMo's tokens/s/GPU), else its TFLOP/s per GPU."""
    pub = row["published"]
    for key in ("tokens_per_s", "tokens_per_s_per_gpu") if row["flops"] in ("mosaic", "nemo") else ():
        if key in pub:
            return key
    return "tflops_per_gpu"


def metric_at(row: dict, net: Network, step_s: float) -> float:
    """The row's metric (:func:`metric_of`) for a step of ``step_s`` seconds."""
    c = row["config"]
    key = metric_of(row)
    tokens = c["batch"] * c["sequence"] / step_s
    if key == "tokens_per_s":
        return tokens
    if key == "tokens_per_s_per_gpu":
        return tokens / c["gpus"]
    return step_flops(row, net) / (step_s * c["gpus"]) / 1e12


def published_s(row: dict, net: Network) -> float:
    """The published step in seconds, from the row's metric."""
    value = row["published"][metric_of(row)]
    return metric_at(row, net, 1.0) / value
