"""The parallel axes, named once: grid letters, the names a user reads, plan-file keys and flags (pure).

A layer's strategy gives each of its splittable dimensions a degree, keyed by a **grid letter**:
samples N, experts E, rows H and columns W of an image (or H, the sequence, of a language model's
tokens), contraction C and filters F (output features), and the replication R left over. Plan files
key a layer's strategy by the same letters, with ``SP`` and ``ESEQ`` marking two variants of a
split. Users read a layout as frameworks name it: data, expert, context, spatial and tensor
parallelism, and pipeline stages outside every layer's grid; `dnnplan predict` takes the degrees
of Megatron-Core's layout by its flags (``--tensor``, ``--context``, ``--expert``, ``--pipeline``).
This module maps between the four; every other module of the cost model, the planner and the
executor imports the letters and names from here (the letters themselves are the op catalogue's,
``networks.ops.base``, which the network layer below uses).

The grid order (:data:`GRID_ORDER`) is the one ordered list of the axes, as Megatron-Core's
``RankGenerator(tp, ep, dp, pp, cp, order="tp-cp-ep-dp-pp")`` orders its groups (innermost first):
N outermost, then E (carved out of the data-parallel ranks, so right inside N), H and W, C and F,
R innermost, so the groups that talk most often are neighbours in rank order and fall inside a node
first (docs/costmodel.md, "Strategies and the grid"). A new axis is added here, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from networks.ops.base import C, E, F, H, N, W  # the letters: the op catalogue's dimensions

#: replication: the ranks left over by the degrees, each holding the same block
R = "R"

#: The one ordered list of the grid's dimensions, outermost first (module docstring)
GRID_ORDER = (N, E, H, W, C, F, R)
#: The dimensions a strategy splits (R is what is left)
SPLIT_DIMS = GRID_ORDER[:-1]

#: Plan-file key of the sequence-parallel variant of a tensor split (``{"C": 8, "SP": 1}``):
#: the tensor group's reductions scatter over the sequence (Korthikanti et al. 2022, section 4.2.2)
SP = "SP"
#: Plan-file key of expert parallelism folded over sequence-parallel tensor ranks (``ESEQ: t``)
ESEQ = "ESEQ"

#: What each letter splits, as a refusal names them
DIM_WORDS = "N (sample), E (experts), H and W (spatial or sequence), C (channels), F (filters)"


@dataclass(frozen=True)
class Axis:
    """One parallel axis as users name it: its grid letters, its `dnnplan predict` flag (None where
    the degree is what the others leave, or the planner's alone), and Megatron-Core's group name."""

    name: str
    letters: tuple[str, ...]
    flag: str | None
    megatron: str
    #: whether the axis reads H as a sequence (context) or as an image's rows (spatial); None: either
    sequence: bool | None = None


DATA = Axis("data", (N,), None, "dp")
EXPERT = Axis("expert", (E,), "--expert", "ep")
CONTEXT = Axis("context", (H,), "--context", "cp", sequence=True)
SPATIAL = Axis("spatial", (H, W), None, "", sequence=False)
TENSOR = Axis("tensor", (C, F), "--tensor", "tp")
PIPELINE = Axis("pipeline", (), "--pipeline", "pp")

#: The axes of a layer's grid, in the order a layout is read out (planner.plan.plan.layout_by_axis)
LAYER_AXES = (DATA, EXPERT, CONTEXT, SPATIAL, TENSOR)
#: Every axis, pipeline stages included
AXES = LAYER_AXES + (PIPELINE,)


def axes_of(sequence: bool) -> tuple[Axis, ...]:
    """The layer axes of a network: context on a sequence (a network with attention), spatial on an image."""
    return tuple(a for a in LAYER_AXES if a.sequence is None or a.sequence == sequence)

