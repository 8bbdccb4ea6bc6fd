"""`dnnplan validate --repeats R`: the order the runs go in, and each plan's runs made one row (pure).

Runs are interleaved in ABBA order (plans A B C, then C B A, then A B C, ...), so a drift of the
machine's speed over the minutes a validate takes (another job starting, the clock throttling)
falls on every plan alike instead of on the plans that happened to run last.

A plan's row over its repeats: its step error is the median of the runs' errors, with their
minimum and maximum as its spread (``step_rel_min``, ``step_rel_max``); measured step the median
of the runs' medians, its range the smallest and largest step of any run; per-layer errors the
median over runs, layer by layer; memory the largest measured peak. ``step_noise`` is how far the
plan's runs are from each other: the median over pairs of runs of |step_k / step_k' - 1|.
"""

from __future__ import annotations

import json
import statistics
from itertools import combinations


def run_order(plans: int, repeats: int) -> list[tuple[int, int]]:
    """(repeat, plan index) in the order they run: plans in order, then reversed, alternately."""
    out = []
    for r in range(repeats):
        idx = range(plans) if r % 2 == 0 else range(plans - 1, -1, -1)
        out += [(r, i) for i in idx]
    return out


def _key(row: dict) -> str:
    return json.dumps(row.get("plan"), sort_keys=True) if row.get("plan") is not None else row["name"]


def _median(values) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def pair_noise(steps: list[float]) -> float | None:
    """Median over pairs of runs of |step_k / step_k' - 1| (None with fewer than two runs)."""
    pairs = [abs(a / b - 1) for a, b in combinations(steps, 2) if b > 0]
    return statistics.median(pairs) if pairs else None


def _layers(runs: list[dict]) -> list[dict]:
    names = [l["name"] for l in runs[0].get("layers", [])]
    by_run = [{l["name"]: l for l in r.get("layers", [])} for r in runs]
    out = []
    for name in names:
        got = [b[name] for b in by_run if name in b]
        out.append({"name": name, "predicted_s": _median(l["predicted_s"] for l in got),
                    "measured_s": _median(l["measured_s"] for l in got), "rel": _median(l["rel"] for l in got)})
    return out


def merged(runs: list[dict]) -> dict:
    """One plan's runs (rows of PlanRun.row) as its row; a single run is its own row."""
    if len(runs) == 1:
        return {k: v for k, v in runs[0].items() if k != "repeat"}
    row = {k: v for k, v in runs[0].items() if k != "repeat"}
    rels = [r["step_rel"] for r in runs if r["step_rel"] is not None]
    peaks = [r.get("measured_peak_bytes") for r in runs]
    peak = None if None in peaks else max(peaks)
    predicted_peak = runs[0].get("predicted_peak_bytes")
    failed = [r["check"] for r in runs if r.get("check") and not r["check"]["passed"]]
    row.update({
        "repeats": len(runs),
        "predicted_step_s": _median(r["predicted_step_s"] for r in runs),
        "measured_step_s": _median(r["measured_step_s"] for r in runs),
        "measured_step_min_s": min(r["measured_step_min_s"] for r in runs),
        "measured_step_max_s": max(r["measured_step_max_s"] for r in runs),
        "step_rel": _median(rels), "step_rel_min": min(rels, default=None), "step_rel_max": max(rels, default=None),
        "layer_median_abs_rel": _median(r["layer_median_abs_rel"] for r in runs),
        "profile_predicted_step_s": _median(r.get("profile_predicted_step_s") for r in runs),
        "profile_step_rel": _median(r.get("profile_step_rel") for r in runs),
        "measured_peak_bytes": peak,
        "memory_rel": None if peak is None or not predicted_peak else peak / predicted_peak - 1,
        "check": failed[0] if failed else runs[0].get("check"),
        "step_noise": pair_noise([r["measured_step_s"] for r in runs]),
    })
    if "layers" in runs[0]:
        row["layers"] = _layers(runs)
    if any(r.get("resumed") for r in runs):
        row["resumed"] = True
    return row


def plan_rows(runs: list[dict]) -> list[dict]:
    """Every plan's row from the runs (rows of PlanRun.row), plans in the order they first ran."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(_key(r), []).append(r)
    return [merged(g) for g in groups.values()]
