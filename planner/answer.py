"""What the first plan answers under one ZeRO stage, and how the ZeRO choice weighs it (pure).

An :class:`Answer` holds a plan over all the devices or a pipelined one, the settings it was found
under and why (:mod:`planner.stage_plan` makes one for each ZeRO stage, :mod:`planner.first_plan`
chooses among the stages' answers). :func:`outcome` reads an answer as :mod:`planner.zero_choice`
weighs it: its step, its proven lower bound and whether the memory limit held it back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from networks.errors import DnnplanError
from planner.pipeline.search import PipelineChoice
from planner.plan.plan import Plan
from planner.problem.solve import Settings
from planner.zero_choice import Weighed

#: what a stage's answer weighed of the pipelined plans (:attr:`Answer.pipelines`)
ALL, ONE_STAGE, NONE = "all", "one stage", "none"


class NoneFits(DnnplanError):
    """No plan fits under one ZeRO stage (``pipelined``: the pipeline search found none either)."""

    def __init__(self, pipelined: bool):
        super().__init__("no plan fits")
        self.pipelined = pipelined


@dataclass(frozen=True)
class Answer:
    """A plan over all the devices, or a pipelined one with why the pipeline search ran, and the
    settings it was found under (its ZeRO stage may be the planner's choice: ``zero_why`` says
    why, ``weighed`` what each stage gave, :mod:`planner.zero_choice`)."""

    settings: Settings
    plan: Plan | None = None
    pipeline: PipelineChoice | None = None
    why: str = ""
    timed: tuple = ()  # machine `local`: the candidates weighed in step context (executor.step_choice)
    #: the pipelined plans its search weighed: every pair (ALL), gradient accumulation's only
    #: (ONE_STAGE), none (NONE: the whole batch fits, its pipelines weighed after the ZeRO stages)
    pipelines: str = "all"
    zero_why: str = ""
    weighed: tuple = ()  # planner.zero_choice.Weighed of each ZeRO stage, when the planner chose it
    memory_note: str = ""  # the limit was lowered so the peak fits (planner.fit_check)


def answer_peak(answer: Answer) -> float:
    """The tensors' (allocated) peak of an answer's busiest device (bytes): what the planner holds under
    its limit, lowered by what the framework reserves beside them (executor.session.plan.tensors_limit)."""
    return (answer.pipeline.prediction if answer.pipeline is not None else answer.plan).memory_allocated_bytes


def step_of(answer: Answer) -> float:
    """An answer's step: its pipeline's, else its plan's."""
    return answer.pipeline.prediction.step_s if answer.pipeline is not None else answer.plan.step_s


def outcome(answer: Answer, floor: float = 0.0) -> Weighed:
    """A stage's answer as :mod:`planner.zero_choice` weighs it: its step, proven lower bound, and
    whether the memory limit held it back (anything but the whole batch's unconstrained optimum);
    ``floor``: the least step of the pipelined plans the answer has not weighed yet (their physics
    floor)."""
    if answer.pipelines != ALL:
        own = outcome(dataclasses.replace(answer, pipelines=ALL))
        return dataclasses.replace(own, lower_s=min(own.lower_s, floor))
    if answer.pipeline is not None:
        step = answer.pipeline.prediction.step_s
        return Weighed(answer.settings.choices.zero, step, step * (1 - answer.pipeline.stats.get("proven_gap", 1.0)))
    solver = answer.plan.solver
    optimal = solver.get("status") == "optimal"
    gap = 0.0 if optimal else solver.get("gap")
    free = optimal and solver.get("memory_binding") is False
    step = answer.plan.step_s
    return Weighed(answer.settings.choices.zero, step, 0.0 if gap is None else step * (1 - gap), bound=not free)
