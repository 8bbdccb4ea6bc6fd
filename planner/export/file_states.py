"""What each framework's launch configuration can state, as the nearest plan needs it (pure):
whether it sets model parallelism and in which transformer model, its recomputations, pipeline
schedules, attention backend and ZeRO (planner.export.nearest, planner.export.nearest_layouts)."""

from __future__ import annotations

from dataclasses import dataclass

from planner.export.megatron_layout import MEGATRON, MEGATRON_SCHEDULES
from planner.export.torchtitan import TORCHTITAN


@dataclass(frozen=True)
class Framework:
    """What a framework's launch configuration can state, as the nearest plan needs it:
    ``model_parallel`` tensor, context and expert degrees (DeepSpeed's JSON: none); ``selective``
    recomputation of attention's core; ``block_recompute`` of the first transformer layers of each
    pipeline chunk (Megatron-LM's block method); ``schedules`` its pipeline schedules; ``one_kernel`` one
    attention backend of the plan's choosing (else the machine's default); ``fsdp``: ZeRO as
    torchtitan's FSDP and DDP (no ZeRO-1, DDP alone); ``weights_as_planned``: the training choices
    that keep the weights and gradients otherwise than in the precision's own bytes (FP8 parameters,
    float32 gradients: Megatron-LM's flags)."""

    name: str
    model_parallel: bool
    selective: bool
    block_recompute: bool
    schedules: tuple[str, ...]
    one_kernel: bool
    fsdp: bool = False
    weights_as_planned: bool = False


FRAMEWORKS = {
    "megatron": Framework("Megatron-LM", True, True, True, MEGATRON_SCHEDULES, True, weights_as_planned=True),
    "torchtitan": Framework("torchtitan", True, False, False, ("gpipe",) + MEGATRON_SCHEDULES, False, fsdp=True),
    "deepspeed": Framework("DeepSpeed", False, False, False, (), False),
}
#: the transformer model of each framework that sets model parallelism, whose layers a plan must be
TARGETS = {"megatron": MEGATRON, "torchtitan": TORCHTITAN}
