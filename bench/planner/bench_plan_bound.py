"""Every `dnnplan plan` of a zoo network answers within its stated default bound.

    PYTHONPATH=. python bench/planner/bench_plan_bound.py [--networks a,b] [--counts 1,2,...,4096] [--json out.json]

Runs `dnnplan plan NETWORK --devices P --json` with no other flag (the default machine, batch,
precision and time limit) for every zoo network and every device count 1, 2, 4, ..., 4096, each in
a new process, and reports per run: the exit code (0 a plan; 2 a refusal, which is an answer too),
the command's own time from its start to its answer (``answered_in_s`` of its JSON; the bound
`dnnplan plan --help` states, dnnplan.search_bound.DEFAULT_TIME_LIMIT_S, is on this), the whole
process's wall time (Python's start-up and imports included), the plan's step, status and proven
gap. It ends with the slowest runs and whether any passed the bound. Timings depend on the
machine's load: it prints the host and its load average first; run it on a quiet machine for
figures to quote (docs/planner.md, "Within a bound").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench_planner import host
from dnnplan.search_bound import DEFAULT_TIME_LIMIT_S
from networks.loader import zoo_names

COUNTS = [2 ** k for k in range(13)]  # 1 .. 4096


def run(network: str, devices: int, timeout_s: float) -> dict:
    """One `dnnplan plan` in a new process: what it answered and how long it took."""
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "dnnplan", "plan", network, "--devices", str(devices), "--json"],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"network": network, "devices": devices, "exit": None, "wall_s": time.perf_counter() - start,
                "answered_in_s": None, "error": f"no answer in {timeout_s:g} s"}
    wall = time.perf_counter() - start
    row = {"network": network, "devices": devices, "exit": proc.returncode, "wall_s": wall, "answered_in_s": None}
    if proc.returncode == 0:
        got = json.loads(proc.stdout)
        solver = got.get("solver", {})
        row.update(answered_in_s=got.get("answered_in_s"), step_s=got.get("step_s"), status=solver.get("status"),
                   gap=solver.get("gap", solver.get("proven_gap")), pipelined=bool(got.get("pipeline")))
    else:
        row["error"] = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default=",".join(zoo_names()))
    ap.add_argument("--counts", default=",".join(map(str, COUNTS)))
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args()
    print(f"host: {host()}; stated bound {DEFAULT_TIME_LIMIT_S:g} s from the command's start", flush=True)
    rows = []
    for network in args.networks.split(","):
        for devices in map(int, args.counts.split(",")):
            row = run(network, devices, timeout_s=10 * DEFAULT_TIME_LIMIT_S)
            rows.append(row)
            took = "-" if row["answered_in_s"] is None else f"{row['answered_in_s']:.1f} s"
            what = (f"step {row['step_s']:.4g} s, {row['status']}, gap {row.get('gap') or 0:.1%}"
                    + (", pipelined" if row.get("pipelined") else "")) if row["exit"] == 0 else row.get("error", "")
            print(f"{network:>12} p={devices:<5} exit {row['exit']}  answered in {took:>7}  wall {row['wall_s']:5.1f} s  "
                  f"{what}", flush=True)
    timed = [r for r in rows if r["answered_in_s"] is not None]
    print("\nslowest (answered in / wall):")
    for r in sorted(rows, key=lambda r: -r["wall_s"])[:8]:
        print(f"  {r['network']} p={r['devices']}: {r['answered_in_s'] or float('nan'):.1f} s / {r['wall_s']:.1f} s")
    over = [r for r in timed if r["answered_in_s"] > DEFAULT_TIME_LIMIT_S] + [r for r in rows if r["exit"] is None]
    print(f"{len(rows)} runs, {sum(r['exit'] == 0 for r in rows)} plans, {sum(r['exit'] == 2 for r in rows)} refusals; "
          f"slowest answer {max((r['answered_in_s'] for r in timed), default=0):.1f} s, slowest process "
          f"{max((r['wall_s'] for r in rows), default=0):.1f} s; past the {DEFAULT_TIME_LIMIT_S:g} s bound: {len(over)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"host": host(), "bound_s": DEFAULT_TIME_LIMIT_S, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
