"""How long `dnnplan plan --sweep` takes over several machines, whole process.

    PYTHONPATH=. python bench/planner/bench_sweep.py [--network llama3-70b] [--counts 8,16,...,1024]
        [--machines dgx-a100,dgx-h100,dgx-a100-40gb,dgx1-v100] [--jobs 1,2] [--repeats 1] [--json out.json]

Runs ``dnnplan plan NETWORK -m MACHINES --sweep COUNTS --tokens 15T --gpu-hour-price 2 --json``
(the default batch, precision and bound: a sweep's points share 30 s) as a new process, once for
each ``--sweep-jobs`` value in ``--jobs``, ``--repeats`` times interleaved, and prints for each run
the whole process's wall time (interpreter start and imports included) and CPU time (user + system,
its workers included), the points planned and the points with a plan, how many of those the search
proved optimal and the largest gap left, and the fastest and cheapest points. The default is the
target's case: llama3-70b, 8 device counts x 4 machines, under 60 s. Timings depend on the load of
the machine: its load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from bench_planner import host

MACHINES = "dgx-a100,dgx-h100,dgx-a100-40gb,dgx1-v100"


def run(network: str, machines: str, counts: str, jobs: int) -> dict:
    """One sweep in a new process: its wall and CPU time and what it answered."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dnnplan", "plan", network, "-m", machines, "--sweep", counts,
                           "--tokens", "15T", "--gpu-hour-price", "2", "--sweep-jobs", str(jobs), "--json"],
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    row = {"jobs": jobs, "exit": proc.returncode, "wall_s": wall, "cpu_s": cpu}
    if proc.returncode != 0:
        row["error"] = (proc.stderr.strip().splitlines() or [""])[-1][:200]
        return row
    got = json.loads(proc.stdout)
    planned = [r for r in got["rows"] if "error" not in r]
    row.update(points=len(got["rows"]), with_plan=len(planned),
               optimal=sum(r.get("status") == "optimal" for r in planned),
               worst_gap=max((r.get("gap") or 0.0 for r in planned), default=0.0),
               fastest=got["fastest"], cheapest=got["cheapest"])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="llama3-70b")
    ap.add_argument("--counts", default="8,16,...,1024")
    ap.add_argument("--machines", default=MACHINES)
    ap.add_argument("--jobs", default="1,2", help="the --sweep-jobs values to time")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", help="write every run's row here")
    args = ap.parse_args()
    print(f"host: {host()}", flush=True)
    print(f"dnnplan plan {args.network} -m {args.machines} --sweep {args.counts} --tokens 15T "
          "--gpu-hour-price 2 --sweep-jobs J --json", flush=True)
    rows = []
    for _ in range(args.repeats):
        for jobs in (int(j) for j in args.jobs.split(",")):
            row = run(args.network, args.machines, args.counts, jobs)
            rows.append(row)
            if row["exit"] != 0:
                print(f"--sweep-jobs {jobs}: exit {row['exit']} after {row['wall_s']:.1f} s: {row['error']}",
                      flush=True)
                continue
            print(f"--sweep-jobs {jobs}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} s CPU; "
                  f"{row['points']} points, {row['with_plan']} with a plan ({row['optimal']} proven optimal, "
                  f"largest gap {row['worst_gap']:.1%}); fastest {row['fastest']}, cheapest {row['cheapest']}",
                  flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
