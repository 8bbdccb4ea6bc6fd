"""A pipeline's point-to-point sends per micro-batch, stage by stage (pure).

A stage of ``p / S`` ranks sends its output activation (``boundary`` bytes a sample, split over its
ranks) to the next stage's ranks, each to its peer, and takes its gradient back: twice a micro-batch,
priced by ``costmodel.step.pipeline.p2p_s`` on the slowest pair of the two stages; the last stage sends
nothing. With ``V`` chunks a device, each chunk but the last of all sends to the next chunk's device
(:func:`planner.pipeline.interleave.sends_s`). The pipeline search prices its stages with these
(planner.pipeline.search), and its pairs' bounds are handed to workers with them
(planner.pipeline.workers.pair_bounds).
"""

from __future__ import annotations

from costmodel.machine.model import Machine
from costmodel.step.pipeline import p2p_s
from planner.pipeline import interleave


def stage_sends_s(machine: Machine, p: int, stages: int, s: int, boundary: int, micro: int) -> float:
    """Stage ``s``'s sends per micro-batch of ``micro`` samples: the activation forward, its gradient back."""
    if s == stages - 1:
        return 0.0
    d = p // stages
    return 2 * p2p_s(machine, s * d, (s + 1) * d, boundary * micro // d, d)


def pair_sends_s(machine: Machine, p: int, batch: int, boundary: int, stages: int, m: int, chunks: int) -> list[float]:
    """Each stage's (device's) sends per micro-batch of ``(S, m, V)``."""
    if chunks == 1:
        return [stage_sends_s(machine, p, stages, s, boundary, batch // m) for s in range(stages)]
    return [interleave.sends_s(machine, p, stages, chunks, s, boundary, batch // m) for s in range(stages)]
