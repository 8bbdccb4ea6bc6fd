"""The numbers that say how well a `dnnplan validate` predicted, from its plans' rows (pure).

All are fractions (0.12 is 12%), ``None`` where nothing could be measured:

- ``mean_abs_step_error``, ``worst_abs_step_error``: the mean and largest |step error| over plans
  (each plan's ``step_rel``: measured step / predicted step - 1, the median over repeats), of the
  prediction made ahead of time (the headline);
- ``in_run_mean_abs_step_error``, ``in_run_worst_abs_step_error``: the same of ``in_run_step_rel``,
  the model's error given kernel times re-timed inside the same run (executor.report.in_run), over the
  plans that have one: a check of the model's structure, not a prediction;
- ``profile_mean_abs_step_error``, ``profile_worst_abs_step_error``: the same of
  ``profile_step_rel``, the prediction from the profile's calls timed alone, over the plans whose
  headline was made from their calls timed in step context before the run (executor.session.execute,
  profiler.in_step.before_run): ahead of time too, the figure a plan has when it is made;
- ``layer_median_error``, ``layer_p90_error``: the median and 90th percentile of |layer error|
  over every layer of every plan (a layer's total time, forward to update);
- ``memory_error``: the mean over plans of |measured peak / predicted peak - 1|;
- ``best_plan_loss``: the planner's measured step against the fastest measured plan's, minus 1
  (0 when the planner's plan was fastest);
- ``noise_floor``: the median over plans of how far repeats of the same plan were from each
  other (|step_k / step_k' - 1|; ``--repeats`` 2 or more): step errors below it are noise.
"""

from __future__ import annotations

import math
import statistics

PLANNER = "planner"


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) by linear interpolation between closest ranks."""
    vals = sorted(values)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def is_planner(row: dict) -> bool:
    """Whether the row is the planner's plan (alone or merged with baselines that equal it)."""
    return row["name"].split(" = ")[0] == PLANNER


def best_plan_loss(plans: list[dict]) -> float | None:
    measured = [r for r in plans if r.get("measured_step_s")]
    mine = [r for r in measured if is_planner(r)]
    if not mine:
        return None
    return mine[0]["measured_step_s"] / min(r["measured_step_s"] for r in measured) - 1


def layer_errors(plans: list[dict]) -> list[float]:
    """|relative error| of every layer of every plan that was predicted above zero."""
    return [abs(l["rel"]) for r in plans for l in r.get("layers", []) if l.get("rel") is not None]


def summarize(plans: list[dict]) -> dict:
    """The summary of a validate's plan rows (executor.session.validate.PlanRun.row, merged over
    repeats by executor.report.repeats)."""
    steps = [abs(r["step_rel"]) for r in plans if r.get("step_rel") is not None]
    in_run = [abs(r["in_run_step_rel"]) for r in plans if r.get("in_run_step_rel") is not None]
    alone = [abs(r["profile_step_rel"]) for r in plans if r.get("profile_step_rel") is not None]
    layers = layer_errors(plans)
    mems = [abs(r["memory_rel"]) for r in plans if r.get("memory_rel") is not None]
    noise = [r["step_noise"] for r in plans if r.get("step_noise") is not None]
    return {
        "plans": len(plans),
        "mean_abs_step_error": statistics.fmean(steps) if steps else None,
        "worst_abs_step_error": max(steps) if steps else None,
        "in_run_mean_abs_step_error": statistics.fmean(in_run) if in_run else None,
        "in_run_worst_abs_step_error": max(in_run) if in_run else None,
        "profile_mean_abs_step_error": statistics.fmean(alone) if alone else None,
        "profile_worst_abs_step_error": max(alone) if alone else None,
        "layer_median_error": statistics.median(layers) if layers else None,
        "layer_p90_error": percentile(layers, 90),
        "memory_error": statistics.fmean(mems) if mems else None,
        "best_plan_loss": best_plan_loss(plans),
        "noise_floor": statistics.median(noise) if noise else None,
    }
