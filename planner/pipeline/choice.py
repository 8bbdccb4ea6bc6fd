"""What the pipeline search weighs and returns: each (S, m, V) it weighed, the best of one, the
choice, and the gap still open to the optimum (pure; :mod:`planner.pipeline.search`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from costmodel.step.pipeline import PipelinePrediction
from planner.pipeline.stack import Stack
from planner.pipeline.stage_solver import StageSolution, StageSolver


class OutOfTime(Exception):
    """A pair's search left unfinished at the deadline (:meth:`planner.pipeline.pair_search.PairSearch.late`)."""


@dataclass(frozen=True)
class Candidate:
    """One (S, m) the search weighed: its best step (None: nothing fits) and cut, or why it was skipped."""

    stages: int
    micro_batches: int
    bound_s: float
    step_s: float | None = None
    cut: tuple[int, ...] = ()
    skipped: str = ""
    lower_s: float = 0.0  # no cut of it is faster (its step when every stage it used was optimal)
    closed: bool = False  # searched again with its stages' gaps closed (_proved)
    chunks: int = 1  # model chunks a device (interleaved 1F1B when > 1)

    @property
    def key(self) -> tuple[int, int, int]:
        return self.stages, self.micro_batches, self.chunks


@dataclass(frozen=True)
class Best:
    """One (S, m) searched: its best step and cut, the solver holding its stages, and a lower bound
    on its step were every stage solved exactly (its step when every stage was)."""

    step_s: float
    stages: int
    micro_batches: int
    cut: tuple[int, ...]
    solver: StageSolver
    lower_s: float
    chunks: int = 1
    solutions: tuple = ()  # interleaved: each device's solution (planner.pipeline.interleave)


@dataclass(frozen=True)
class PipelineChoice:
    stack: Stack
    batch: int
    devices: int
    stages: int
    micro_batches: int
    cut: tuple[int, ...]
    solutions: tuple[StageSolution, ...]
    prediction: PipelinePrediction
    candidates: tuple[Candidate, ...] = ()
    stats: dict = field(default_factory=dict)
    chunks: int = 1  # model chunks a device (interleaved 1F1B when > 1)

    @property
    def micro_batch(self) -> int:
        return self.batch // self.micro_batches


def proven_gap(step: float, candidates) -> float:
    """How much faster than ``step`` the best pipelined plan could still be: 0 when every pair's
    lower bound reaches it (the choice is proven optimal; the chosen pair's own stages count too)."""
    return max(0.0, 1 - min((c.lower_s for c in candidates), default=step) / step)
