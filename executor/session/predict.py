"""A plan file's step as `dnnplan execute` predicts it before its run, without the run
(`dnnplan predict PLAN`).

On machine `local` without ``--profile``, `execute` predicts from the plan's kernels (and, on
several ranks, its collectives) timed again in its step's order and context, the executor's own
time between kernels, and the time the ranks wait for the slowest (executor.session.execute). In the CPU
validation (docs/VALIDATION.md) that prediction is several times closer to the measured step than
the profile's kernels timed alone: `predict` of a plan file for this computer says what `execute`
would.
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.compute.model import OnDemand
from costmodel.step.prediction import StepPrediction
from executor.session.execute import cannot_run, in_step_context, predict, prepare, step_context_entries
from planner.plan.plan_file import read_plan


@dataclass(frozen=True)
class AheadOfTime:
    """The ahead-of-time prediction and what it was made from."""

    prediction: StepPrediction
    # the step from the profile's kernels timed alone, when the prediction is from the plan's
    # kernels timed in its step's context (None: it is not)
    profile_step_s: float | None
    warnings: tuple[str, ...]  # for the user (executor.session.execute.prepare)


def ahead_of_time(plan_path: str, step_context: bool = True) -> AheadOfTime | None:
    """``plan_path``'s step as `dnnplan execute PLAN --ranks P` predicts it before its run, with
    ``step_context`` (its --step-context); None where `execute` would not predict it from this
    computer's on-demand profile: a plan for another machine, a pipelined plan (its stages are
    priced as `predict` prices them), or one the executor cannot run (another optimiser or
    precision, recomputation)."""
    plan, _ = read_plan(plan_path)
    if plan.machine != "local" or plan.pipeline is not None or cannot_run(plan, plan_path) is not None:
        return None
    prep = prepare(plan_path, plan.devices, None, None)
    if not isinstance(prep.compute, OnDemand):
        return None
    if step_context:
        prep = in_step_context(prep, step_context_entries(prep))
    return AheadOfTime(predict(prep), prep.profile_step_s, prep.warnings)
