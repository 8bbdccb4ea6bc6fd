"""Megatron-LM's arguments read back (pure): :func:`read`, the reader of :mod:`planner.launch_import`.

The file is a launch script (``torchrun ... pretrain_gpt.py --flag value ...``, variables and
arrays as :mod:`planner.launch_import.shell_words` reads them) or the arguments alone, whose options
:mod:`planner.launch_import.megatron_args` parses as Megatron-LM's parser names them (NVIDIA/Megatron-LM
d98e8a64ddf34856e74b24714e3bedb2f5a39553, Megatron-Core 0.20.0, the release
:mod:`planner.export.megatron` writes for). This module reads the configuration they describe: the
world size, the model's shape, the layout and its recomputation, and the training choices.

What Megatron-LM's defaults and checks say, read in the same source, is kept: a missing
``--global-batch-size`` is one micro-batch a data-parallel rank (``validate_args``); no
``--ffn-hidden-size`` is 4 x hidden, or with ``--swiglu`` ``int(4 h 2 / 3 / 64) 64``; no
``--kv-channels`` hidden / heads; ``--num-query-groups`` counts only with ``--group-query-attention``
(argument_utils.py, ``core_transformer_config_from_args``); ``--recompute-activations`` is
``--recompute-granularity selective``; ``--sequence-parallel`` is turned off at tensor size 1; under
``--bf16`` the gradients are accumulated and reduced in float32 unless ``--grad-reduce-in-bf16``;
``--fp16`` and ``--bf16`` together, ``--tp-comm-overlap`` without ``--sequence-parallel``, heads or
query groups that the tensor size does not divide (``TransformerConfig.__post_init__``), layers the
pipeline does not split evenly, a recomputation method with selective granularity, more than one of
``--num-layers-per-virtual-pipeline-stage``, ``--num-virtual-stages-per-pipeline-rank`` and
``--pipeline-model-parallel-layout``, and ``--use-torch-fsdp2`` with the distributed optimiser,
pipeline or expert parallelism are refused as Megatron-LM refuses them. The MoE token dispatcher
defaults to ``allgather``, which dnnplan does not price (alltoall, flex): a mixture of experts
needs ``--moe-token-dispatcher-type``.

The world size is torchrun's ``--nnodes`` x ``--nproc-per-node`` (``--nproc_per_node``) where the
launch line states both as numbers (torchrun's defaults: 1 node, 1 process; ``--nnodes N:N`` is N;
an elastic range or ``--nproc-per-node gpu`` leaves it unstated); otherwise `--devices`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from costmodel.choices.moe_dispatch import DEFAULT_MOE_DISPATCH
from costmodel.choices.training import TrainingChoices
from costmodel.machine.model import MAX_DEVICES
from costmodel.step.pipeline import INTERLEAVED
from networks.errors import DnnplanError, short
from networks.ops.base import MAX_INT
from planner.export.megatron_model import GptShape
from planner.launch_import.launch_config import Ignored, LaunchConfig
from planner.launch_import.megatron_args import Args, given, parse, positive
from planner.launch_import.megatron_options import GPT_SCRIPT, OTHER_MODELS
from planner.launch_import.shell_words import LaunchCommand, Word, launch_command

#: torchrun's world-size options, read in pytorch/pytorch torch/distributed/run.py at commit
#: 010929fd3f401c3868310396e6a91ed95aa0305b: ``--nnodes`` (default "1:1", or MIN:MAX nodes) and
#: ``--nproc-per-node`` or ``--nproc_per_node`` (default "1"; also auto, cpu, gpu, xpu)
NNODES, NPROC = ("--nnodes",), ("--nproc-per-node", "--nproc_per_node")
LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
#: the optimisers dnnplan prices, as Megatron names them
OPTIMIZERS = ("adam", "sgd")
#: Megatron-FSDP's sharding strategies as ZeRO stages
FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
ROTARY_POSITIONS = ("rope", "yarn", "mrope")


def read(text: str, path: str) -> LaunchConfig:
    """The configuration of Megatron-LM's arguments in ``text`` (the file at ``path``; module
    docstring); one line naming the option and the file for a mistake."""
    command = launch_command(text, path)
    script = training_script(command, path)
    args = parse(command.args, path)
    devices, devices_from = world_size(command, path)
    shape = model_shape(args)
    layout = pipeline_layout(args, shape.num_layers)
    tensor = positive(args, "--tensor-model-parallel-size")
    check_tensor(args, shape, tensor)
    sequence_parallel = bool(args.get("--sequence-parallel")) and tensor > 1
    if args.get("--sequence-parallel") and tensor == 1:
        args.ignored["--sequence-parallel"] = "Megatron-LM turns sequence parallelism off at tensor size 1"
    expert = positive(args, "--expert-model-parallel-size")
    if expert > 1 and not shape.experts:
        raise args.refuse("--expert-model-parallel-size", f"{expert} experts' split without --num-experts",
                          hint="give --num-experts, or leave expert parallelism out")
    expert_tensor = given(args, "--expert-tensor-parallel-size")
    if expert_tensor not in (None, tensor) and not shape.experts:
        raise args.refuse("--expert-tensor-parallel-size", f"{expert_tensor} experts' split without --num-experts",
                          hint="give --num-experts, or leave the experts' tensor size out")
    if expert_tensor is not None and not shape.experts:
        args.ignored["--expert-tensor-parallel-size"] = "no mixture of experts (--num-experts)"
    context_exchange(args)
    recompute, recompute_layers = recomputation(args)
    choices = training_choices(args, shape, sequence_parallel, tensor)
    chunks = layout[1]
    ignored = tuple(Ignored(name, reason) for name, reason in args.ignored.items())
    return LaunchConfig(
        path=path, framework="megatron", network=None, shape=shape, devices=devices, devices_from=devices_from,
        batch=given(args, "--global-batch-size"), micro_batch=positive(args, "--micro-batch-size", required=True),
        tensor=tensor, context=positive(args, "--context-parallel-size"), expert=expert,
        expert_tensor=expert_tensor, sequence_parallel=sequence_parallel,
        stages=layout[0], chunks=chunks, chunk_layers=layout[2], schedule=INTERLEAVED if chunks > 1 else "1f1b",
        recompute=recompute, recompute_layers=recompute_layers, choices=choices, ignored=ignored, script=script)


def context_exchange(args: Args) -> None:
    """``--cp-comm-type`` (Megatron-LM's default ``p2p``: Transformer Engine's ring of keys and values,
    the exchange ``--framework megatron`` prices, costmodel/frameworks/megatron.yaml; the default
    framework prices the cheaper, costmodel.comm.context) read; another (``a2a``, ``allgather``,
    ``a2a+p2p``) refused in one line where the sequence is split; without context parallelism any
    is listed as ignored (no exchange runs)."""
    kinds = args.get("--cp-comm-type")
    if kinds is None:
        return
    if positive(args, "--context-parallel-size") == 1:
        args.ignored["--cp-comm-type"] = "no context parallelism (--context-parallel-size 1)"
        return
    other = next((k for k in kinds if k != "p2p"), None)
    if other is not None:
        raise args.refuse("--cp-comm-type", f"{other!r}: dnnplan prices context parallelism's ring exchange (p2p)",
                          hint="write --cp-comm-type p2p, or leave it out (Megatron-LM's default)")


def training_script(command: LaunchCommand, path: str) -> str | None:
    """The script the command runs, as read: ``pretrain_gpt.py``, or another name read as its
    arguments (a Megatron-Bridge or one's own entry point); one line for Megatron-LM's entry points
    of other models (:data:`planner.launch_import.megatron_options.OTHER_MODELS`)."""
    if command.script is None:
        return None
    name = PurePosixPath(command.script).name
    if name in OTHER_MODELS:
        raise DnnplanError(f"{short(command.script)} trains {OTHER_MODELS[name]}, not a GPT-style decoder: dnnplan "
                           f"reads the arguments of Megatron-LM's {GPT_SCRIPT}", file=path, line=command.line,
                           hint=f"give the launch of {GPT_SCRIPT}; another model is predicted from its network "
                                "spec (dnnplan predict SPEC with the layout's flags)")
    return command.script if name == GPT_SCRIPT else f"{command.script}, read as {GPT_SCRIPT}'s arguments"

def world_size(command: LaunchCommand, path: str) -> tuple[int | None, str]:
    """The devices torchrun's ``--nnodes`` x ``--nproc-per-node`` give (None where the file does not
    state them as numbers), and where they were read, in words."""
    texts = [w.text for w in command.launcher]
    if not any(t.endswith(LAUNCHERS) or t in LAUNCHERS for t in texts):
        what = "no launcher" if not command.launcher else f"the launcher {short(texts[0])}, not torchrun"
        return None, f"the file states {what}"
    got: dict[str, Word] = {}
    for i, word in enumerate(command.launcher):
        name, eq, inline = word.text.partition("=")
        if name in NNODES + NPROC:
            value = Word(inline, word.line, word.unresolved) if eq else \
                (command.launcher[i + 1] if i + 1 < len(command.launcher) else Word("", word.line))
            got["nnodes" if name in NNODES else "nproc"] = value
    parts = []
    for key, flag in (("nnodes", "--nnodes"), ("nproc", "--nproc-per-node")):
        word = got.get(key, Word("1", command.line))
        low, _, high = word.text.partition(":")
        if key == "nnodes" and low == high:  # --nnodes N:N, as many nodes at least as at most
            word = Word(low, word.line, word.unresolved)
        if word.unresolved or not re.fullmatch(r"[0-9]+", word.text) or int(word.text) < 1:
            why = f"uses {word.unresolved}" if word.unresolved else \
                f"is {short(word.text)}, not a number of devices"
            return None, f"torchrun's {flag} {why}"
        parts.append(int(word.text))
    if parts[0] * parts[1] > MAX_DEVICES:
        raise DnnplanError(f"torchrun's --nnodes {short(parts[0])} x --nproc-per-node {short(parts[1])} is more "
                           f"devices than dnnplan plans for (at most 2^20 = {MAX_DEVICES})", file=path,
                           line=got.get("nproc", got.get("nnodes", Word("", command.line))).line,
                           hint="give the world size the run takes")
    return parts[0] * parts[1], f"torchrun --nnodes {parts[0]} x --nproc-per-node {parts[1]}"


def model_shape(args: Args) -> GptShape:
    """The GPT model's shape the arguments build (module docstring: Megatron-LM's defaults)."""
    layers = positive(args, "--num-layers", required=True)
    hidden = positive(args, "--hidden-size", required=True)
    heads = positive(args, "--num-attention-heads", required=True)
    seq = positive(args, "--seq-length", required=True)
    swiglu = bool(args.get("--swiglu"))
    ffn = given(args, "--ffn-hidden-size") or (int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden)
    groups = given(args, "--num-query-groups") if args.get("--group-query-attention") else None
    if "--num-query-groups" in args and not args.get("--group-query-attention"):
        args.ignored["--num-query-groups"] = "Megatron-LM reads it only with --group-query-attention"
    kv = given(args, "--kv-channels")
    if kv is None and hidden % heads:
        raise args.refuse("--num-attention-heads", f"{heads} heads do not divide the hidden size {hidden}",
                          hint="give --kv-channels, or heads that divide --hidden-size")
    experts = given(args, "--num-experts")
    top_k = (given(args, "--moe-router-topk") or 2) if experts else None
    if experts:
        ffn = given(args, "--moe-ffn-hidden-size") or ffn
    for name in ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-token-dispatcher-type",
                 "--overlap-moe-expert-parallel-comm"):
        if name in args and not experts:
            args.ignored[name] = "no mixture of experts (--num-experts)"
    positions = args.get("--position-embedding-type", "learned_absolute")
    rotary = positions in ROTARY_POSITIONS or bool(args.get("--use-rotary-position-embeddings"))
    return GptShape(num_layers=layers, hidden_size=hidden, heads=heads,
                    query_groups=groups if groups and groups != heads else None,
                    kv_channels=kv if kv and kv * heads != hidden else None, ffn_hidden_size=ffn, swiglu=swiglu,
                    experts=experts, top_k=top_k, seq_length=seq, positions=None, rotary=rotary,
                    rmsnorm=args.get("--normalization") == "RMSNorm",
                    untied=bool(args.get("--untie-embeddings-and-output-weights")))


def check_tensor(args: Args, shape: GptShape, tensor: int) -> None:
    """Megatron-Core's checks of the tensor size against the heads (TransformerConfig.__post_init__)."""
    if shape.heads % tensor:
        raise args.refuse("--tensor-model-parallel-size", f"{tensor} does not divide the {shape.heads} attention heads",
                          hint="Megatron-LM requires the heads a multiple of the tensor size")
    groups = shape.query_groups or shape.heads
    if groups % tensor and tensor % groups:
        raise args.refuse("--tensor-model-parallel-size", f"{tensor} is neither a divisor nor a multiple of the "
                          f"{groups} query groups", hint="Megatron-LM requires one or the other")
    if args.get("--tp-comm-overlap") and not (args.get("--sequence-parallel") and tensor > 1):
        raise args.refuse("--tp-comm-overlap", "needs --sequence-parallel (and a tensor size above 1), as "
                          "Megatron-LM requires", hint="add --sequence-parallel, or drop --tp-comm-overlap")


def pipeline_layout(args: Args, layers: int) -> tuple[int, int, tuple[int, ...] | None]:
    """(stages, model chunks a device, transformer layers of each chunk or None for an even split),
    as the pipeline options give them (module docstring)."""
    stages = positive(args, "--pipeline-model-parallel-size")
    virtual = [n for n in ("--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank",
                           "--pipeline-model-parallel-layout") if n in args]
    if len(virtual) > 1:
        raise args.refuse(virtual[1], f"given with {virtual[0]}: Megatron-LM takes no more than one of them",
                          hint="give one")
    if "--pipeline-model-parallel-layout" in args:
        return layout_string(args, stages, layers)
    uneven = [n for n in ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
                          "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split")
              if n in args]
    if stages == 1:
        for name in virtual + uneven:
            args.ignored[name] = "no pipeline (--pipeline-model-parallel-size 1)"
        return 1, 1, None
    chunks = 1
    if "--num-virtual-stages-per-pipeline-rank" in args:
        chunks = positive(args, "--num-virtual-stages-per-pipeline-rank")
    first, last = args.get("--decoder-first-pipeline-num-layers"), args.get("--decoder-last-pipeline-num-layers")
    if first is not None or last is not None:
        if chunks > 1:
            raise args.refuse(uneven[0], "with virtual pipeline stages is not read by dnnplan",
                              hint="give the chunks' layers with --pipeline-model-parallel-layout")
        return stages, 1, first_last(args, stages, layers, first, last)
    e = int(bool(args.get("--account-for-embedding-in-pipeline-split")))
    loss = int(bool(args.get("--account-for-loss-in-pipeline-split")))
    slots = layers + e + loss
    if slots % stages:
        raise args.refuse("--pipeline-model-parallel-size", f"{stages} stages do not split {slots} layers evenly "
                          "(Megatron-LM requires it)", hint="give a pipeline size that divides the layers, or a "
                          "--pipeline-model-parallel-layout")
    if "--num-layers-per-virtual-pipeline-stage" in args:
        per = positive(args, "--num-layers-per-virtual-pipeline-stage")
        if (slots // stages) % per:
            raise args.refuse("--num-layers-per-virtual-pipeline-stage", f"{per} does not divide the "
                              f"{slots // stages} layers of a pipeline stage (Megatron-LM requires it)",
                              hint="give a divisor")
        chunks = slots // stages // per
    n = stages * chunks
    if slots % n:
        raise args.refuse("--num-virtual-stages-per-pipeline-rank", f"{n} chunks do not split {slots} layers "
                          "evenly", hint="give a count that divides the layers")
    if not e and not loss:
        return stages, chunks, None
    counts = [slots // n] * n
    counts[0] -= e
    counts[-1] -= loss
    return stages, chunks, tuple(counts)


def first_last(args: Args, stages: int, layers: int, first: int | None, last: int | None) -> tuple[int, ...]:
    """The stages' layers when the first or last stage holds a given number and the rest split evenly."""
    ends = [k for k in (first, last) if k is not None]
    middle = stages - len(ends)
    rest = layers - sum(ends)
    name = "--decoder-first-pipeline-num-layers" if first is not None else "--decoder-last-pipeline-num-layers"
    if min(ends) < 0:
        raise args.refuse(name, f"{min(ends)} is a negative count of layers", hint="give 0 or more")
    if rest < 0:
        both = f" with --decoder-last-pipeline-num-layers {last}" if first is not None and last is not None else ""
        raise args.refuse(name, f"{sum(ends) if not both else f'{first} + {last}'}{both} is more than the {layers} "
                          "layers the model has (--num-layers)",
                          hint=f"give the first and last stages at most {layers} layers together")
    if (middle and rest % middle) or (not middle and rest):
        raise args.refuse(name, f"leaves {rest} layers for {middle} other stages, which do not split them evenly",
                          hint="Megatron-LM splits the other layers evenly over the other stages")
    each = rest // middle if middle else 0
    counts = [each] * stages
    if first is not None:
        counts[0] = first
    if last is not None:
        counts[-1] = last
    return tuple(counts)


def layout_string(args: Args, stages: int, layers: int) -> tuple[int, int, tuple[int, ...]]:
    """``--pipeline-model-parallel-layout`` (megatron/core/transformer/pipeline_parallel_layer_layout.py,
    ``parse_str_to_list``: ``,`` cosmetic, ``(..)*n`` and ``x*n`` repeated, ``|`` between chunks, ``E``
    the embedding, ``t`` a transformer layer, ``L`` the loss): the chunks' transformer layers, the
    embedding first in the first and the loss last in the last (dnnplan's cut; one line otherwise)."""
    name = "--pipeline-model-parallel-layout"
    text = args.get(name).replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * min(int(m.group(2)), MAX_INT // max(1, len(m.group(1)))),
                      text) if len(text) < 100_000 else text
    parts = text.split("|")
    bad = sorted(set(text) - set("EtL|"))
    if bad:
        raise args.refuse(name, f"has {short(''.join(bad))}: dnnplan reads E (embedding), t (transformer layer), "
                          "L (loss) and | between chunks", hint="write e.g. Ettt|tttt|ttttL")
    if len(parts) % stages:
        raise args.refuse(name, f"has {len(parts)} chunks, not a multiple of the {stages} pipeline stages "
                          "(Megatron-LM requires it)", hint="give stages x virtual stages chunks")
    if not parts[0].startswith("E") or text.count("E") != 1 or not parts[-1].endswith("L") or text.count("L") != 1:
        raise args.refuse(name, "must open with the embedding (E) and close with the loss (L), once each",
                          hint="write e.g. Ettt|tttt|ttttL")
    counts = tuple(part.count("t") for part in parts)
    if sum(counts) != layers:
        raise args.refuse(name, f"holds {sum(counts)} transformer layers, and --num-layers is {layers}",
                          hint="give as many t as layers")
    return stages, len(parts) // stages, counts


def recomputation(args: Args) -> tuple[str, int | None]:
    """(granularity, full recomputation's first layers of each chunk or None for every one)."""
    granularity = args.get("--recompute-granularity")
    if args.get("--recompute-activations"):
        if granularity == "full":
            raise args.refuse("--recompute-activations", "is selective recomputation, and "
                              "--recompute-granularity is full", hint="give one")
        granularity = "selective"
    method, count = args.get("--recompute-method"), args.get("--recompute-num-layers")
    modules = args.get("--recompute-modules")
    if args.get("--distribute-saved-activations"):
        raise args.refuse("--distribute-saved-activations", "is not priced by dnnplan", hint="drop it")
    if granularity is None:
        for name in ("--recompute-method", "--recompute-num-layers", "--recompute-modules"):
            if name in args:
                args.ignored[name] = "no --recompute-granularity"
        return "none", None
    if granularity == "selective":
        if method is not None:
            raise args.refuse("--recompute-method", "with selective recomputation: Megatron-LM refuses it",
                              hint="drop --recompute-method, or use --recompute-granularity full")
        if modules is not None and set(modules) != {"core_attn"}:
            raise args.refuse("--recompute-modules", f"{' '.join(modules)}: dnnplan prices the recomputation of "
                              "attention's core (core_attn) alone", hint="give core_attn, or leave it out")
        return "selective", None
    if modules is not None:
        args.ignored["--recompute-modules"] = "full recomputation reruns whole transformer layers"
    if method is None or count is None:
        raise args.refuse("--recompute-granularity", "full needs --recompute-method and --recompute-num-layers "
                          "(Megatron-LM requires them)", hint="add --recompute-method uniform --recompute-num-layers 1")
    if count < 1:
        raise args.refuse("--recompute-num-layers", f"must be at least 1, got {count}", hint="write 1 or more")
    if method == "uniform":
        if count != 1:
            raise args.refuse("--recompute-num-layers", f"{count} with the uniform method checkpoints groups of "
                              f"{count} layers: dnnplan prices a checkpoint at every transformer layer",
                              hint="give --recompute-num-layers 1, or the block method")
        return "full", None
    return "full", count


def training_choices(args: Args, shape: GptShape, sequence_parallel: bool, tensor: int) -> TrainingChoices:
    """Precision, optimiser and its sharding, overlap, the MoE dispatcher, attention's kernel and the
    tokens a sequence, as dnnplan's training choices."""
    zero, prec = zero_stage(args), precision(args)
    return TrainingChoices(precision=prec, optimizer=optimizer(args), zero=zero,
                           overlap=overlap(args, shape, sequence_parallel), moe_dispatch=dispatcher(args, shape),
                           attention=attention(args), seq=shape.seq_length, fp8_params=fp8_params(args, prec, zero),
                           grad_fp32=grad_fp32(args, prec))


def grad_fp32(args: Args, prec: str) -> bool:
    """Whether the gradients are accumulated and reduced in float32 (dnnplan's ``grad_fp32``), as
    Megatron-LM sets accumulate_allreduce_grads_in_fp32 (validate_args at d98e8a64): under --bf16
    on, unless --grad-reduce-in-bf16; under --fp16 only with --accumulate-allreduce-grads-in-fp32;
    float32 weights have float32 gradients."""
    low, wide = args.get("--grad-reduce-in-bf16"), args.get("--accumulate-allreduce-grads-in-fp32")
    if prec in ("fp32", "tf32"):
        for name in ("--grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32"):
            if args.get(name):
                args.ignored[name] = "the weights and their gradients are float32 (no --bf16 or --fp16)"
        return False
    if prec == "fp16":
        if low:
            args.ignored["--grad-reduce-in-bf16"] = "Megatron-LM reads it under --bf16 only"
        return bool(wide)
    if low and wide:
        args.ignored["--accumulate-allreduce-grads-in-fp32"] = "--grad-reduce-in-bf16 turns it off (Megatron-LM)"
    return not low


def fp8_params(args: Args, prec: str, zero: int) -> bool:
    """``--fp8-param-gather``: the blocks' GEMM weights kept only in FP8 (dnnplan's ``fp8_params``),
    under FP8 with a sharded optimiser, as Megatron-LM runs it (validate_args at d98e8a64: the
    distributed optimizer or FSDP; under torch FSDP2 with Transformer Engine 2 it turns it off)."""
    if not args.get("--fp8-param-gather"):
        return False
    if prec != "fp8":
        args.ignored["--fp8-param-gather"] = "no FP8 GEMMs (--fp8-format)"
        return False
    if args.get("--use-torch-fsdp2"):
        args.ignored["--fp8-param-gather"] = ("Megatron-LM turns it off under --use-torch-fsdp2 with Transformer "
                                              "Engine 2, gathering in bf16")
        return False
    if not (args.get("--use-distributed-optimizer") or args.get("--use-megatron-fsdp")):
        raise args.refuse("--fp8-param-gather", "without the distributed optimizer or FSDP: Megatron-LM refuses it",
                          hint="add --use-distributed-optimizer")
    return True


def precision(args: Args) -> str:
    if args.get("--fp16") and args.get("--bf16"):
        raise args.refuse("--fp16", "and --bf16 together: Megatron-LM refuses it", hint="give one")
    if "--fp8-format" in args:
        if not args.get("--bf16"):
            raise args.refuse("--fp8-format", "without --bf16: dnnplan prices FP8 GEMMs in BF16 mixed precision",
                              hint="add --bf16")
        return "fp8"
    return "fp16" if args.get("--fp16") else "bf16" if args.get("--bf16") else "fp32"


def optimizer(args: Args) -> str:
    name = args.get("--optimizer", "adam")
    if name not in OPTIMIZERS:
        raise args.refuse("--optimizer", f"{name} is not priced by dnnplan", hint="use adam or sgd")
    if name == "adam":
        if "--sgd-momentum" in args:
            args.ignored["--sgd-momentum"] = "the optimiser is adam"
        return "adam"
    return "sgd" if args.get("--sgd-momentum", 0.9) == 0 else "momentum"


def zero_stage(args: Args) -> int:
    """The ZeRO stage of the sharding options (planner.export.megatron's mapping, read back)."""
    distributed, fsdp, fsdp2 = (bool(args.get(n)) for n in ("--use-distributed-optimizer", "--use-megatron-fsdp",
                                                            "--use-torch-fsdp2"))
    if fsdp2:
        for other in ("--use-distributed-optimizer", "--use-megatron-fsdp"):
            if args.get(other):
                raise args.refuse("--use-torch-fsdp2", f"with {other}: Megatron-LM refuses it", hint="give one")
        for size in ("--pipeline-model-parallel-size", "--expert-model-parallel-size"):
            if args.get(size, 1) > 1:
                raise args.refuse("--use-torch-fsdp2", f"with {size} above 1: Megatron-LM refuses it",
                                  hint="use --use-megatron-fsdp")
        return 3
    version = args.get("--megatron-fsdp-version", 1)
    if version not in (1, 2):
        raise args.refuse("--megatron-fsdp-version", f"{version}: Megatron-LM takes 1 or 2", hint="write 1 or 2")
    if fsdp:
        # Megatron-FSDP v1 (the default) runs with the distributed optimizer, turning it on where it is
        # not given; v2 refuses it (megatron/training/arguments.py validate_args at d98e8a64)
        if distributed and version == 2:
            raise args.refuse("--use-megatron-fsdp", "--megatron-fsdp-version 2 with --use-distributed-optimizer: "
                              "Megatron-LM refuses it", hint="leave out --use-distributed-optimizer")
        return FSDP_ZERO[args.get("--data-parallel-sharding-strategy", "optim_grads_params")]
    if "--megatron-fsdp-version" in args:
        args.ignored["--megatron-fsdp-version"] = "read with --use-megatron-fsdp only"
    if "--data-parallel-sharding-strategy" in args:
        args.ignored["--data-parallel-sharding-strategy"] = "read with --use-megatron-fsdp only"
    return 1 if distributed else 0


def overlap(args: Args, shape: GptShape, sequence_parallel: bool) -> str:
    """dnnplan's overlap mode: none (Megatron-LM's default), data (``--overlap-grad-reduce``, its
    parameter gathers with it), all (also ``--tp-comm-overlap``), and ``+experts``."""
    grads, gathers, tp = (bool(args.get(n)) for n in ("--overlap-grad-reduce", "--overlap-param-gather",
                                                       "--tp-comm-overlap"))
    if gathers and not grads:
        raise args.refuse("--overlap-param-gather", "without --overlap-grad-reduce: Megatron-LM requires it",
                          hint="add --overlap-grad-reduce")
    if tp and not grads:
        raise args.refuse("--tp-comm-overlap", "without --overlap-grad-reduce: dnnplan prices tensor-parallel "
                          "overlap with the gradient reduction's", hint="add --overlap-grad-reduce")
    mode = "all" if tp and sequence_parallel else "data" if grads else "none"
    experts = bool(args.get("--overlap-moe-expert-parallel-comm")) and bool(shape.experts)
    return mode + ("+experts" if experts else "")


def dispatcher(args: Args, shape: GptShape) -> str:
    name = args.get("--moe-token-dispatcher-type", "allgather")
    if not shape.experts:
        return DEFAULT_MOE_DISPATCH
    if name == "allgather":
        raise args.refuse("--moe-token-dispatcher-type", "allgather (Megatron-LM's default) is not priced by "
                          "dnnplan", hint="give --moe-token-dispatcher-type alltoall or flex")
    return name


def attention(args: Args) -> str:
    """dnnplan's attention kernel: flash (FlashAttention, cuDNN's fused kernel priced alike), the
    materialised kernels (unfused, local), or "" for the machine's default (auto)."""
    backend = args.get("--attention-backend", "auto")
    impl = args.get("--transformer-impl", "transformer_engine")
    if impl == "local":  # megatron/core/models/backends.py LocalSpecProvider.core_attention: DotProductAttention
        for name in ("--attention-backend", "--use-flash-attn"):
            if name in args:
                args.ignored[name] = "--transformer-impl local runs Megatron-Core's DotProductAttention whatever it says"
        return "materialized"
    if impl == "inference_optimized":
        args.ignored["--transformer-impl"] = "inference_optimized: priced as transformer_engine"
    if args.get("--use-flash-attn") and backend in ("unfused", "local"):
        raise args.refuse("--use-flash-attn", f"with --attention-backend {backend}", hint="give one")
    if backend in ("flash", "fused") or args.get("--use-flash-attn"):
        return "flash"
    return "materialized" if backend in ("unfused", "local") else ""
