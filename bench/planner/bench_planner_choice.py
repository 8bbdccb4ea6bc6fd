"""The planner's own choice against the published configuration, for the Megatron-LM rows of
bench/assets/megatron.yaml.

    PYTHONPATH=. python bench/planner/bench_planner_choice.py [--rows NAME,...] [--json]

For each row, the same model, GPUs and global batch on the shipped dgx-a100 machine (fp16, Adam,
80 GB a device) are planned by the pipeline search (planner.pipeline.search: pipeline degree,
micro-batch size, stage cut, and inside each stage every layer's data/tensor split, sequence
parallel variant and recomputation), and its predicted step is set beside the prediction of the
published configuration forced (bench_megatron.predict_row: t, p, micro-batch, 1F1B, the paper's
recomputation) and the published step. Both predictions are made before any run, by the same
cost model (Roofline of the shipped efficiencies). The ZeRO-3 rows are planned too: the planner
does not use ZeRO, so its choice there is Megatron-style parallelism for the same model and GPUs.

Columns: forced and planner predicted step, planner / forced - 1 (target: never above 0; memory-
bound stages are solved by Lagrangian relaxation with a proven gap, so a positive figure is
within that gap or a configuration outside the search, named in the row), planner / published - 1,
the planner's degrees (S stages, micro-batch size, largest tensor degree in a stage) and search time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from costmodel.choices.training import TrainingChoices
from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from planner.problem.solve import Settings
from planner.pipeline.search import search_pipeline


def _megatron():
    """bench/published/bench_megatron.py, the rows and the forced configurations' predictions."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "published"))
    import bench_megatron
    return bench_megatron


def tensor_degree(solution) -> int:
    """The largest tensor-parallel degree (C or F) any layer of a stage takes."""
    return max(max(s.degree("C"), s.degree("F")) for s in solution.strategies.values())


def planner_row(bm, row: dict) -> dict:
    c = row["config"]
    machine = load_machine(bm.MACHINE)
    net = bm.network_of(row)
    start = time.perf_counter()
    got = search_pipeline(net, c["batch"], c["gpus"], machine, Roofline(machine), None,
                          Settings(choices=TrainingChoices(optimizer="adam", precision="fp16")))
    seconds = time.perf_counter() - start
    forced = bm.predict_row(row).step_s
    published = bm.published_s(row)
    return {"name": row["name"], "set": row["set"], "forced_s": forced, "planner_s": got.prediction.step_s,
            "published_s": published, "planner_vs_forced": got.prediction.step_s / forced - 1,
            "planner_vs_published": got.prediction.step_s / published - 1,
            "forced_config": f"t={c['tensor']} p={c['pipeline']} micro {c['micro']}"
                             + (f" zero {c['zero']}" if c.get("zero") else ""),
            "planner_config": f"t<={max(map(tensor_degree, got.solutions))} p={got.stages} micro {got.micro_batch}",
            "planner_memory_gib": got.prediction.memory_peak_bytes / 2 ** 30,
            "worst_stage_gap": got.stats.get("worst_stage_gap"), "search_s": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default=None, help="comma-separated row names (default: every row)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args(argv)
    bm = _megatron()
    rows = bm.load_rows()
    if args.rows:
        wanted = args.rows.split(",")
        unknown = sorted(set(wanted) - {r["name"] for r in rows})
        if unknown:
            ap.error(f"unknown rows {', '.join(unknown)}")
        rows = [r for r in rows if r["name"] in wanted]
    results = []
    for row in rows:
        results.append(planner_row(bm, row))
        r = results[-1]
        if not args.json:
            print(f"{r['name']:34s} forced {r['forced_s']:8.2f}s ({r['forced_config']:22s}) planner "
                  f"{r['planner_s']:8.2f}s ({r['planner_config']:20s}) {r['planner_vs_forced']:+6.1%} vs forced, "
                  f"{r['planner_vs_published']:+6.1%} vs published, {r['planner_memory_gib']:5.1f} GiB, "
                  f"searched in {r['search_s']:.1f} s", flush=True)
    slower = [r for r in results if r["planner_vs_forced"] > 1e-9]
    summary = {"rows": len(results), "planner_slower_than_forced": len(slower),
               "worst_planner_vs_forced": max(r["planner_vs_forced"] for r in results),
               "search_s_total": sum(r["search_s"] for r in results)}
    if args.json:
        print(json.dumps({"rows": results, "summary": summary}))
    else:
        print(f"planner's choice slower than the forced configuration in {len(slower)} of {len(results)} rows "
              f"(worst {summary['worst_planner_vs_forced']:+.1%}); searches took {summary['search_s_total']:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
