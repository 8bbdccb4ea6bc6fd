"""The planner's first answer against a long search, whole process: `dnnplan plan --json` as a user runs it.

    python bench/planner/bench_planner_speed.py                 the four speed targets (default bound)
    python bench/planner/bench_planner_speed.py --long 300      and each against a 300 s search
    python bench/planner/bench_planner_speed.py --zoo           every zoo network at 8, 64, 512 and 4096 H100s
    python bench/planner/bench_planner_speed.py --dnnplan PATH  another checkout's `dnnplan`
    python bench/planner/bench_planner_speed.py --base DIR      and the checkout in DIR, alternately (same load)
    python bench/planner/bench_planner_speed.py --jobs 1,2      each case with each `--jobs` (this checkout)

For each case it prints the wall time of the whole command, the step it answers, the ZeRO stage
and layout, the gap it states (and the ZeRO stages it does not cover, which the time limit left
unplanned), and with --long the long search's step and how far the first
answer is from it. The machine and its load are printed first: timings are only comparable within
one run on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

TARGETS = (
    ("gpt3-175b", 1024, "dgx-a100"),
    ("llama3.1-405b", 16384, "dgx-h100"),
    ("qwen3-30b-a3b", 64, "dgx-h100"),
    ("mixtral-8x7b", 64, "dgx-h100"),
)
ZOO_DEVICES = (8, 64, 512, 4096)


def host() -> str:
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}"


def plan(dnnplan: str, net: str, p: int, machine: str, limit: float | None, extra: tuple[str, ...] = (),
         base: str | None = None) -> dict:
    """One whole `dnnplan plan` process: its wall time and what it answered (or why not);
    ``base``: the checkout in that folder instead (``python -m dnnplan`` with it on the path)."""
    head = [dnnplan] if base is None else [sys.executable, "-m", "dnnplan"]
    args = head + ["plan", net, "-p", str(p), "--machine", machine, "--precision", "bf16", "--json", *extra]
    args += [] if limit is None else ["--time-limit", str(limit), "--prove", str(limit)]
    env = None if base is None else {**os.environ, "PYTHONPATH": base}
    start = time.perf_counter()
    # in that folder: `python -m` puts the working folder first on the path, before PYTHONPATH
    proc = subprocess.run(args, capture_output=True, text=True, env=env, cwd=base)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"wall_s": wall, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    out = json.loads(proc.stdout)
    gap = out.get("search", {}).get("proven_gap", out.get("solver", {}).get("gap"))
    uncovered = out.get("search", {}).get("uncovered_zero", out.get("solver", {}).get("uncovered_zero")) or []
    pipeline = out.get("pipeline") or {}
    layout = (f"pipeline {pipeline['stages']} x {pipeline['micro_batches']} micro-batches" if pipeline
              else "no pipeline")
    return {"wall_s": wall, "step_s": out["step_s"], "zero": out.get("zero"), "layout": layout, "gap": gap,
            "uncovered": uncovered, "optimizer": out.get("optimizer")}


def row(net: str, p: int, machine: str, first: dict, long: dict | None) -> str:
    if "error" in first:
        return f"{net:>14s} p={p:<6d} {machine}: {first['wall_s']:6.1f} s  {first['error']}"
    gap = "?" if first["gap"] is None else f"{100 * first['gap']:.1f}%"
    text = (f"{net:>14s} p={p:<6d} {machine}: {first['wall_s']:6.1f} s  step {first['step_s']:.4g} s "
            f"(ZeRO-{first['zero']}, {first['layout']}, {first['optimizer']}), gap stated {gap}"
            + (f" not covering ZeRO-{', ZeRO-'.join(map(str, first['uncovered']))}" if first["uncovered"] else ""))
    if long is not None:
        if "error" in long:
            text += f";  long search: {long['error']}"
        else:
            text += (f";  long search {long['wall_s']:.0f} s: {long['step_s']:.4g} s (ZeRO-{long['zero']}, "
                     f"{long['layout']}), first answer {100 * (first['step_s'] / long['step_s'] - 1):+.2f}%")
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dnnplan", default=shutil.which("dnnplan", path=os.path.dirname(sys.executable))
                    or shutil.which("dnnplan") or "dnnplan")
    ap.add_argument("--long", type=float, default=None, help="also search each case for this many seconds")
    ap.add_argument("--zoo", action="store_true", help="every zoo network at 8, 64, 512 and 4096 H100s")
    ap.add_argument("--base", default=None, help="another checkout's folder, run alternately with this one")
    ap.add_argument("--jobs", default=None, help="comma-separated --jobs values, each case with each")
    ap.add_argument("--only", default=None, help="comma-separated network names: only these cases")
    args = ap.parse_args()
    print(f"host: {host()}; dnnplan: {args.dnnplan}", flush=True)
    if args.zoo:
        from networks.loader import zoo_names  # the zoo as this checkout ships it
        cases = [(n, p, "dgx-h100") for n in zoo_names() for p in ZOO_DEVICES]
    else:
        cases = list(TARGETS)
    if args.only:
        cases = [c for c in cases if c[0] in args.only.split(",")]
    jobs = [()] if args.jobs is None else [("--jobs", j) for j in args.jobs.split(",")]
    for net, p, machine in cases:
        walls = {}
        for extra in jobs:
            if args.base is not None:
                old = plan(args.dnnplan, net, p, machine, None, base=args.base)
                print("base  " + row(net, p, machine, old, None), flush=True)
            first = plan(args.dnnplan, net, p, machine, None, extra)
            long = None if args.long is None else plan(args.dnnplan, net, p, machine, args.long, extra)
            print(f"{' '.join(extra) or 'this':5s} " + row(net, p, machine, first, long), flush=True)
            walls[extra] = first["wall_s"]
            if args.base is not None:
                print(f"      this / base wall: {first['wall_s'] / old['wall_s']:.2f}", flush=True)
        if len(walls) > 1:
            one = walls[jobs[0]]
            print("      " + ", ".join(f"{' '.join(k)}: {one / w:.2f}x as fast as {' '.join(jobs[0])}"
                                       for k, w in walls.items() if k != jobs[0]), flush=True)


if __name__ == "__main__":
    main()
