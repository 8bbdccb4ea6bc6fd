"""The planner's claims held against plans it can be made to find: more memory never answers a
slower step, and no ZeRO stage given with --zero beats the answer without it by more than its gap.

    PYTHONPATH=. python bench/planner/bench_plan_exactness.py [--sweep] [--forced] [--json]

A plan that fits under a memory limit fits under a larger one, so the answer under the larger
limit is no slower than the smaller one's, less the gap it states. And the answer without --zero
weighs every ZeRO stage, so none planned alone (--zero Z, the same time limit) finds a plan faster
than the answer's step times one less its gap. A case that breaks either is printed with
``VIOLATION`` and the command exits 1: a lower bound above a plan the search finds, or a stage
counted as covered that was not searched. A stage the answer names as left out by the time limit
(``uncovered_zero``: its gap does not cover it) is held to nothing; a faster plan found there is
printed, not counted (a slower machine leaves more out). Every plan is one whole `dnnplan plan NET -p P --machine
M --precision bf16 --json` process (about 2-10 s each on the 2-core development VM; the default
cases take about 5 minutes there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: (network, devices, machine): each planned at every limit of :data:`LIMITS_GIB`
SWEEP = (
    ("gpt2", 8, "dgx-a100"),
    ("gpt2-xl", 8, "dgx-a100"),
    ("llama3-8b", 64, "dgx-h100"),
    ("resnet50", 8, "dgx-a100"),
    ("llama2-7b", 64, "dgx-h100"),
    ("qwen3-30b-a3b", 64, "dgx-h100"),
)
LIMITS_GIB = (2, 4, 6, 8, 12, 16, 24, 32, 48, 80)

#: (network, devices, machine, memory limit in GiB or None): each planned without --zero and with each stage
FORCED = (
    ("gpt2", 8, "dgx-a100", 6),
    ("gpt2-xl", 8, "dgx-a100", 8),
    ("llama3-8b", 64, "dgx-h100", None),
    ("llama3-8b", 64, "dgx-h100", 16),
    ("llama2-7b", 512, "dgx-h100", None),
    ("qwen3-30b-a3b", 64, "dgx-h100", 32),
    ("mixtral-8x7b", 64, "dgx-h100", 48),
    ("llama3-70b", 64, "dgx-h100", None),
)


def plan(net: str, p: int, machine: str, memory: float | None = None, zero: int | None = None) -> dict | None:
    """One whole `dnnplan plan` process: its step and stated gap (None: no plan fits)."""
    args = [sys.executable, "-m", "dnnplan", "plan", net, "-p", str(p), "--machine", machine, "--precision", "bf16",
            "--json"]
    args += [] if memory is None else ["--memory", str(memory)]
    args += [] if zero is None else ["--zero", str(zero)]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        return None
    out = json.loads(proc.stdout)
    gap = out.get("search", {}).get("proven_gap", out.get("solver", {}).get("gap")) or 0.0
    uncovered = out.get("search", {}).get("uncovered_zero", out.get("solver", {}).get("uncovered_zero")) or []
    return {"step_s": out["step_s"], "gap": gap, "zero": out.get("zero"), "uncovered": list(uncovered)}


def sweep(cases) -> tuple[list[dict], int]:
    rows, bad = [], 0
    for net, p, machine in cases:
        held, steps = None, []
        for limit in LIMITS_GIB:
            got = plan(net, p, machine, limit)
            note = ""
            if got is not None:
                floor = got["step_s"] * (1 - got["gap"])
                if held is not None and floor > held["step_s"] * (1 + 1e-9):
                    if got.get("uncovered"):  # its gap does not cover the stages it names as left out
                        note = (f"slower than {held['step_s']:.6g} s at {held['limit']} GiB, ZeRO-"
                                f"{', ZeRO-'.join(map(str, got['uncovered']))} left out by the time limit")
                    else:
                        note, bad = f"VIOLATION: slower than {held['step_s']:.6g} s at {held['limit']} GiB", bad + 1
                if held is None or got["step_s"] < held["step_s"]:
                    held = {**got, "limit": limit}
            steps.append({"memory_gib": limit, **(got or {"step_s": None}), "note": note})
        rows.append({"network": net, "devices": p, "machine": machine, "steps": steps})
        print(f"{net} on {p} x {machine}: " + "  ".join(
            f"{s['memory_gib']}:{'-' if s['step_s'] is None else format(s['step_s'], '.5g')}"
            + (f" {s['note']}" if s["note"] else "") for s in steps), flush=True)
    return rows, bad


def forced(cases) -> tuple[list[dict], int]:
    rows, bad = [], 0
    for net, p, machine, memory in cases:
        auto = plan(net, p, machine, memory)
        stages = {z: plan(net, p, machine, memory, z) for z in (0, 1, 2, 3)}
        note = ""
        # the stated gap covers the stages the answer does not name as left out by the time limit
        left = set(auto.get("uncovered") or ()) if auto is not None else set()
        best = min((g["step_s"] for z, g in stages.items() if g is not None and z not in left), default=None)
        faster = min((g["step_s"] for z, g in stages.items() if g is not None and z in left), default=None)
        if auto is not None and best is not None and best < auto["step_s"] * (1 - auto["gap"]) * (1 - 1e-9):
            note, bad = f"VIOLATION: --zero alone finds {best:.6g} s", bad + 1
        elif auto is not None and faster is not None and faster < auto["step_s"] * (1 - 1e-9):
            note = (f"ZeRO-{', ZeRO-'.join(map(str, sorted(left)))} left out by the time limit (the answer says so): "
                    f"--zero alone finds {faster:.6g} s there")
        if auto is None and best is not None:
            note, bad = f"VIOLATION: no answer without --zero, {best:.6g} s with it", bad + 1
        rows.append({"network": net, "devices": p, "machine": machine, "memory_gib": memory, "auto": auto,
                     "stages": {str(z): g for z, g in stages.items()}, "note": note})
        where = f"{net} on {p} x {machine}" + ("" if memory is None else f" under {memory} GiB")
        answer = "no plan" if auto is None else (
            f"{auto['step_s']:.6g} s (ZeRO-{auto['zero']}, gap {100 * auto['gap']:.2f}%"
            + (f" not covering ZeRO-{', ZeRO-'.join(map(str, sorted(left)))}" if left else "") + ")")
        alone = ", ".join(f"{z}: {'-' if g is None else format(g['step_s'], '.6g')}" for z, g in stages.items())
        print(f"{where}: {answer}; --zero {alone}" + (f"  {note}" if note else ""), flush=True)
    return rows, bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweep", action="store_true", help="only the memory sweep")
    ap.add_argument("--forced", action="store_true", help="only the stages given with --zero")
    ap.add_argument("--json", action="store_true", help="the rows as JSON on stdout at the end")
    args = ap.parse_args()
    both = not args.sweep and not args.forced
    out, bad = {}, 0
    if args.sweep or both:
        out["sweep"], n = sweep(SWEEP)
        bad += n
    if args.forced or both:
        out["forced"], n = forced(FORCED)
        bad += n
    print(f"violations: {bad}", flush=True)
    if args.json:
        print(json.dumps(out, indent=1))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
