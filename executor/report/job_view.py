"""What the commands show of a finished job beside its comparison: a warning when the loss went
non-finite, the Chrome/Perfetto trace of every rank's timeline, the layers' strategy labels."""

from __future__ import annotations

from executor.launch.worker import JobResult, first_non_finite
from executor.report.collect import timed_steps
from executor.report.trace import trace_events
from planner.plan.plan import Plan


def non_finite_loss_warning(job: JobResult, warmup: int, what: str = "") -> str | None:
    """Steps that compute on NaN or infinity are not training steps (and denormals on the way there
    can be slow): the line that says so, rather than report their times as if they were."""
    i = first_non_finite(job.losses)
    if i is None:
        return None
    which = f"warm-up step {i + 1}" if i < warmup else f"timed step {i - warmup + 1}"
    return (f"{what}the loss is {job.losses[i]} from {which} on: those steps computed on non-finite "
            "values, so their times may not be a training step's (the executor's learning rate "
            "is fixed; run fewer --steps)")


def trace_dict(job: JobResult, steps: int) -> dict:
    """A Chrome/Perfetto trace of every rank's timeline, warm-up steps marked."""
    timed = set(timed_steps(job.ranks, steps))
    every = {s for r in job.ranks for s in r.step_wall}
    return trace_events(job.ranks, warmup_steps=every - timed)


def strategy_labels(plan: Plan) -> dict[str, str]:
    """Layer name -> its strategy and algorithm as the tables show them."""
    return {lp.name: lp.strategy.label + (f" {lp.algorithm}" if lp.algorithm else "") for lp in plan.layers}
