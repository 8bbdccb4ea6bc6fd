"""A framework's launch configuration as read (pure): :class:`LaunchConfig`, what every reader of
:mod:`planner.launch_import` returns and :func:`planner.launch_import.to_plan.launch_plan` turns into
a plan."""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.choices.training import TrainingChoices
from planner.export.exported_header import Written
from planner.export.megatron_model import GptShape

#: recomputation as a configuration states it: none, attention's core (selective), whole
#: transformer layers (full)
RECOMPUTE_GRANULARITIES = ("none", "selective", "full")


@dataclass(frozen=True)
class Ignored:
    """An option read that does not change the prediction, and why (printed with the prediction)."""

    option: str
    reason: str


@dataclass(frozen=True)
class LaunchConfig:
    """One training run's configuration as a framework's file states it.

    The layout is Megatron-Core's (what torchtitan and DeepSpeed express is a case of it): each
    pipeline stage runs on ``devices / stages`` ranks, split ``tensor`` x ``context`` x data ways, a
    mixture of experts' experts over ``expert`` of the data ranks (or data x tensor with sequence
    parallelism: MoE parallel folding); every micro-batch holds ``micro_batch`` samples a
    data-parallel rank, and ``batch / (micro_batch x data)`` micro-batches make a step (a pipeline's
    micro-batches, or gradient accumulation without one).
    """

    path: str  # the file read (messages name it)
    framework: str  # the format's name in planner.launch_import.formats.READERS
    network: str | None  # the model the file names: a zoo name or a spec / Hugging Face config path
    shape: GptShape | None  # the model's shape the file states (checked against the network)
    devices: int | None  # the world size the launcher states, None when it does not
    devices_from: str  # where ``devices`` was read, in words ("torchrun --nnodes 2 x --nproc-per-node 8")
    #: the global batch a step, in samples (sequences); None: one micro-batch on every data-parallel
    #: rank (Megatron-LM's default)
    batch: int | None
    #: samples a data-parallel rank takes in one micro-batch (None: DeepSpeed's, from the world size,
    #: planner.launch_import.deepspeed.with_world_size)
    micro_batch: int | None
    #: micro-batches a step where the file states the accumulation but not the global batch, or
    #: not the micro-batch (DeepSpeed's gradient_accumulation_steps without train_batch_size or
    #: without train_micro_batch_size_per_gpu); None: from ``batch``
    accumulation: int | None = None
    tensor: int = 1
    context: int = 1
    expert: int = 1
    #: the experts' own tensor-parallel size where the file states one (None: as ``tensor``); 1 with
    #: ``tensor`` above 1 is MoE parallel folding, which the layout takes when ``expert`` exceeds the
    #: data-parallel degree (checked once the devices are known)
    expert_tensor: int | None = None
    sequence_parallel: bool = False
    stages: int = 1
    chunks: int = 1  # model chunks a device (interleaved 1F1B when above 1)
    #: transformer layers in each of the ``stages x chunks`` chunks in layer order (the embedding
    #: before the first, the final norm, head and loss after the last); None: as even as they split
    chunk_layers: tuple[int, ...] | None = None
    schedule: str = "1f1b"  # costmodel.step.pipeline's schedule name (interleaved when chunks > 1)
    recompute: str = "none"  # RECOMPUTE_GRANULARITIES
    #: with full recomputation, the first so many transformer layers of each chunk (None: every one)
    recompute_layers: int | None = None
    #: precision, optimiser, ZeRO stage, overlap, MoE dispatcher, attention kernel and tokens a
    #: sequence (``seq``: None when the file states none; checked against the network)
    choices: TrainingChoices = TrainingChoices()
    ignored: tuple[Ignored, ...] = ()
    #: what the file's dnnplan line states: the devices, machine, step and framework it was planned
    #: for (a file `dnnplan export` wrote: planner.export.exported_header), None without one
    written_for: Written | None = None
    #: the training script the file launches, as read ("pretrain_gpt.py", "train.py, read as
    #: pretrain_gpt.py's arguments"); None where the file names none
    script: str | None = None
    #: the model the file names, as it names it, where dnnplan ships none of that name (torchtitan's
    #: flavor to register: the network of the plan the file was exported from may be it); else None
    unshipped_model: str | None = None
