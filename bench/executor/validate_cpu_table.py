"""The tables of docs/VALIDATION.md's CPU section from the JSON files bench/executor/validate_cpu.sh wrote.

    python bench/executor/validate_cpu_table.py [DIR]        (default DIR: validate-cpu)

One row per plan of every run (network, ranks, batch): predicted ahead of time, measured (median
step of the slowest rank over every repeat), the ahead-of-time step error (median over repeats)
and its range, the error of the prediction from the profile alone (kernels timed in isolation, not
in the step's context) and the in-run error beside it, the per-layer median |error|, the memory error and
the noise floor of the plan run against itself; then one row per run with its summary, and the
targets of issue 25 checked over every plan.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def pct(x: float | None, signed: bool = True) -> str:
    return "-" if x is None else (f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%")


def ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.3g} ms"


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "validate-cpu")
    runs = [(p.stem, json.loads(p.read_text())) for p in sorted(folder.glob("*.json"))]
    if not runs:
        print(f"no validate JSON in {folder}", file=sys.stderr)
        return 2
    print("| run | plan | predicted | measured | step error | range | profile-alone error | in-run error "
          "| layer median | memory error | noise |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    plans = []
    for name, d in runs:
        for r in d["plans"]:
            plans.append(r)
            spread = f"{pct(r.get('step_rel_min'))} to {pct(r.get('step_rel_max'))}"
            print(f"| {name} (batch {d['batch']}) | {r['name']} | {ms(r['predicted_step_s'])} | {ms(r['measured_step_s'])} "
                  f"| {pct(r['step_rel'])} | {spread} | {pct(r.get('profile_step_rel'))} | {pct(r.get('in_run_step_rel'))} "
                  f"| {pct(r['layer_median_abs_rel'], False)} | {pct(r.get('memory_rel'))} | {pct(r.get('step_noise'), False)} |")
    print()
    print("| run | mean \\|step error\\| | worst | profile-alone mean | in-run mean | layer median | layer p90 | memory "
          "| planner vs best | noise floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, d in runs:
        s = d["summary"]
        print(f"| {name} | {pct(s['mean_abs_step_error'], False)} | {pct(s['worst_abs_step_error'], False)} "
              f"| {pct(s.get('profile_mean_abs_step_error'), False)} | {pct(s.get('in_run_mean_abs_step_error'), False)} "
              f"| {pct(s['layer_median_error'], False)} "
              f"| {pct(s['layer_p90_error'], False)} | {pct(s['memory_error'], False)} | {pct(s['best_plan_loss'])} "
              f"| {pct(s['noise_floor'], False)} |")
    steps = [abs(r["step_rel"]) for r in plans]
    alone = [abs(r["profile_step_rel"]) for r in plans if r.get("profile_step_rel") is not None]
    mems = [abs(r["memory_rel"]) for r in plans if r.get("memory_rel") is not None]
    layer_meds = [r["layer_median_abs_rel"] for r in plans if r.get("layer_median_abs_rel") is not None]
    print()
    print(f"Over all {len(plans)} plans: |step error| under 10% in {sum(e < 0.10 for e in steps)}, mean "
          f"{pct(statistics.fmean(steps), False)}, worst {pct(max(steps), False)} (from the profile alone: "
          f"under 10% in {sum(e < 0.10 for e in alone)}, mean {pct(statistics.fmean(alone), False) if alone else '-'}, "
          f"worst {pct(max(alone, default=None), False)}); per-layer median under 15% in "
          f"{sum(m < 0.15 for m in layer_meds)} of {len(layer_meds)}; peak memory within 10% in "
          f"{sum(m <= 0.10 for m in mems)} of {len(mems)}.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
