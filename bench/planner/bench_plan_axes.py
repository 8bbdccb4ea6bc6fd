"""Whole-process wall time of the planner's language-model searches (issue 52, "Speed"), each command
in a new process, with the machine's load before and after, and the answer: step, layout, proof.

    python bench/planner/bench_plan_axes.py [--repeats 3] [--base DIR] [--only gpt3-pipeline,mixtral]

``--base DIR`` runs every command also on another checkout of dnnplan (``git archive COMMIT | tar -x
-C DIR``), alternately with this one (A B, B A, ...), so the two are compared on the same load.
Targets: gpt3-175b on 1024 A100s under 20 s (with and without --pipeline auto), llama3.1-405b on
16384 H100s at batch 2048 under 60 s, mixtral-8x7b on 64 H100s under 20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    "gpt3-pipeline": ("gpt3-175b --devices 1024 --batch 1536 --machine dgx-a100 --precision bf16 --pipeline auto", 20),
    "gpt3": ("gpt3-175b --devices 1024 --batch 1536 --machine dgx-a100 --precision bf16", 20),
    "llama405b": ("llama3.1-405b --devices 16384 --batch 2048 --machine dgx-h100 --precision bf16", 60),
    "mixtral": ("mixtral-8x7b --devices 64 --machine dgx-h100 --precision bf16", 20),
}


def run(args: str, tree: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    load = os.getloadavg()[0]
    start = time.perf_counter()
    got = subprocess.run([sys.executable, "-m", "dnnplan", "plan", *args.split(), "--json"], cwd=tree, env=env,
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    row = {"wall_s": round(wall, 2), "load": (round(load, 1), round(os.getloadavg()[0], 1)), "rc": got.returncode}
    if got.returncode != 0:
        return {**row, "error": (got.stderr or got.stdout).strip().splitlines()[-1:]}
    out = json.loads(got.stdout)
    row["step_s"] = round(out["step_s"], 4)
    if "search" in out:
        pipe = out.get("pipeline") or {}
        row["layout"] = (f"S={pipe.get('stages', 1)} m={pipe.get('micro_batches', 1)} "
                         f"{pipe.get('schedule', '')}{'/' + str(pipe['chunks']) if pipe.get('chunks') else ''}")
        row["proof"] = f"proven gap {out['search']['proven_gap']:.2%}"
    else:
        row["layout"] = "no pipeline"
        row["proof"] = f"{out['solver'].get('status')} gap {out['solver'].get('gap') or 0:.2%}"
    row["axes"] = {k: v for k, v in (out.get("axes") or {}).items() if v}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--base", help="another checkout to run alternately (side by side)")
    parser.add_argument("--only", help="comma-separated names of " + ", ".join(COMMANDS))
    opts = parser.parse_args()
    names = opts.only.split(",") if opts.only else list(COMMANDS)
    trees = [("this", ROOT)] + ([("base", Path(opts.base))] if opts.base else [])
    for name in names:
        args, target = COMMANDS[name]
        print(f"== dnnplan plan {args}  (target {target} s)", flush=True)
        for i in range(opts.repeats):
            for label, tree in trees if i % 2 == 0 else trees[::-1]:
                row = run(args, tree)
                print(f"{label:5s} {json.dumps(row)}", flush=True)


if __name__ == "__main__":
    main()
