"""`dnnplan validate`'s second column: the model's error given kernel times re-timed inside the run (pure).

A validate's headline (``step_rel`` and the other keys of a row) is *ahead of time*: the prediction
made from the profile taken in an earlier process, before the run. Beside it, unless
``--no-in-run``, the same run times the prediction's kernels again (and, when the ranks share one
node, its collectives): every rank, after each of as many untimed steps run once the timed
steps have run back to back (executor.runtime.run.in_run_steps; profiler.in_step.kernels, profiler.in_step.collectives);
the cost model then predicts again from those times (executor.session.execute.in_run_comparison). That second figure isolates the model's structure (how
it composes kernels into a step) from the drift of the kernels' times between the profile and
the run; it is a diagnostic, never a prediction. The distance between the two is that drift.

A row's in-run keys, ``null`` where in-run timing did not apply (the report's ``in_run_note`` says
why; a row of an older partial report without them reads as ``null``):

- ``in_run_predicted_step_s``: the step predicted from the in-run kernel times;
- ``in_run_step_rel``: measured step / ``in_run_predicted_step_s`` - 1;
- ``in_run_layer_median_abs_rel``: the median over layers of |layer error| against in-run times;
- in each of ``layers``: ``in_run_predicted_s``, ``in_run_rel``.

Over repeats each is the median over the plan's runs, as executor.report.repeats takes the ahead-of-time
keys.
"""

from __future__ import annotations

import statistics

from executor.report.compare import Comparison

KEYS = ("in_run_predicted_step_s", "in_run_step_rel", "in_run_layer_median_abs_rel")
LAYER_KEYS = ("in_run_predicted_s", "in_run_rel")
#: What the in-run keys mean, for a reader (the report's and the console's label).
LABEL = "model error given in-run kernel times"


def row_keys(cmp: Comparison | None) -> dict:
    """The in-run keys of a run's row from its in-run comparison (all None without one)."""
    if cmp is None:
        return dict.fromkeys(KEYS)
    return {"in_run_predicted_step_s": cmp.predicted_step_s, "in_run_step_rel": cmp.step_rel,
            "in_run_layer_median_abs_rel": cmp.layer_median_abs_rel}


def with_layers(layers: list[dict], cmp: Comparison | None) -> list[dict]:
    """The row's ``layers`` with each layer's in-run prediction and error (None without ``cmp``)."""
    if cmp is None:
        return [{**l, **dict.fromkeys(LAYER_KEYS)} for l in layers]
    by_name = {p.name: (p.total_s, e.total) for p, e in zip(cmp.predicted, cmp.errors)}
    return [{**l, **dict(zip(LAYER_KEYS, by_name.get(l["name"], (None, None))))} for l in layers]


def normalised(row: dict) -> dict:
    """A row with every in-run key (None where it has none: a row of an older partial report)."""
    out = {**dict.fromkeys(KEYS), **row}
    if "layers" in row:
        out["layers"] = [{**dict.fromkeys(LAYER_KEYS), **l} for l in row["layers"]]
    return out


def _median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def _runs_of(plan: dict, runs: list[dict]) -> list[dict]:
    """The runs a plan's row was merged from (the same ``plan``: strategy and algorithm per layer)."""
    if plan.get("plan") is None:
        return [r for r in runs if r.get("plan") is None and r["name"] == plan["name"]]
    return [r for r in runs if r.get("plan") == plan["plan"]]


def merged(plan: dict, runs: list[dict]) -> dict:
    """A plan's row (executor.report.repeats.merged) with its in-run keys: the median over its ``runs``."""
    mine = [normalised(r) for r in _runs_of(plan, runs)] or [normalised(plan)]
    row = normalised(plan)
    row.update({key: _median(r[key] for r in mine) for key in KEYS})
    if "layers" in row:
        by_run = [{l["name"]: l for l in r.get("layers", [])} for r in mine]
        row["layers"] = [{**l, **{key: _median(b[l["name"]][key] for b in by_run if l["name"] in b)
                                  for key in LAYER_KEYS}} for l in row["layers"]]
    return row


def unavailable_note(wanted: bool, timeable: str | None) -> str | None:
    """Why a validate's in-run column is empty (None: it is filled). ``wanted``: not
    ``--no-in-run``; ``timeable``: why this run's kernels cannot be timed inside it, if they cannot
    (executor.session.execute.in_run_unavailable)."""
    if not wanted:
        return "in-run timing off (--no-in-run)"
    return timeable
