"""Do two checkouts answer alike? `plan --json`, `predict --json` and the refusals of bad input, compared.

A restructuring of the code must not change what the tool says. This captures, with one checkout's
`dnnplan`, the answers of every zoo network planned and predicted at 1, 8, 64 and 1,024 devices on
dgx-a100 and dgx-h100 (datasheet pricing, a generous search time so searches end alike), a plan
file written and predicted again, and a list of bad inputs (their text and exit code); then it
compares two captures field by field, leaving out only the fields that hold elapsed time.

    python bench/same_answers.py capture --out /tmp/before --dnnplan /path/to/before/.venv/bin/dnnplan
    python bench/same_answers.py capture --out /tmp/after
    python bench/same_answers.py compare /tmp/before /tmp/after

`capture --quick` takes the small networks only (minutes, not hours); `--jobs N` runs N commands
at once (searches are given --time-limit 900 so a loaded machine still lets them finish).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEVICES = (1, 8, 64, 1024)
MACHINES = ("dgx-a100", "dgx-h100")
SMALL = ("lenet5", "mlp", "alexnet", "resnet18", "tiny-llama", "tiny-gqa", "tiny-moe", "gpt-tiny")
# Searches end alike only when they are not cut short: the time limit and the pipeline proof's time
# well above the slowest search seen (qwen3-30b-a3b on 1,024 H100s: about 200 s on a 2-core VM).
GENEROUS = ("--time-limit", "900", "--prove", "900")
#: a duration in a line of text
SECONDS = re.compile(r"\b\d+(\.\d+)? s\b")
# Keys whose values are elapsed time (wall clock), not answers.
ELAPSED = {"answered_in_s", "build_s", "solve_s", "total_s", "elapsed_s", "search_s", "wall_s", "seconds",
           "prove_spent_s"}

# Bad input: each refusal's one line and exit code must stay as they are.
REFUSALS = (
    ("plan", "no-such-net"), ("plan", "resnet18", "-p", "0"), ("plan", "resnet18", "--machine", "no-such-machine"),
    ("plan", "resnet18", "--solver", "magic"), ("plan", "resnet18", "--plot", "x.png"),
    ("plan", "gpt-tiny", "-p", "4", "--pipeline", "two"), ("plan", "gpt-tiny", "-p", "4", "--schedule", "zigzag"),
    ("plan", "resnet18", "--precision", "fp7"), ("plan", "resnet18", "--optimizer", "lion"),
    ("plan", "resnet18", "--zero", "5"), ("plan", "resnet18", "--profile", "no-such-profile"),
    ("plan", "resnet18", "-p", "4", "--sweep", "1,x"), ("plan", "resnet18", "--overlap", "sometimes"),
    ("plan", "tiny-moe", "--moe-dispatch", "carrier-pigeon"), ("plan", "resnet18", "--batch-norm", "weird"),
    ("plan", "resnet18", "-p", "8", "-b", "4"), ("plan", "resnet18", "--memory", "-1"),
    ("plan", "gpt-tiny", "--seq", "0"), ("plan", "gpt-tiny", "-p", "4", "--pipeline", "auto", "--sweep", "1,2"),
    ("predict", "no-such-net"), ("predict", "resnet18", "-s", "nonsense"), ("predict", "resnet18", "-s", "N=3"),
    ("predict", "resnet18", "-p", "4", "--tensor", "3"), ("predict", "gpt-tiny", "-p", "4", "--context", "3"),
    ("predict", "gpt-tiny", "-p", "4", "--pipeline", "99"), ("predict", "tiny-moe", "-p", "4", "--expert", "3"),
    ("predict", "gpt-tiny", "-p", "4", "--micro-batches", "0"), ("predict", "gpt-tiny", "--recompute", "maybe"),
    ("predict", "resnet18", "--runtime", "tensorflow"), ("predict", "no-such-plan.yaml"),
    ("predict", "resnet18", "-p", "4", "--schedule", "interleaved", "--chunks", "0"),
    ("execute", "no-such-plan.yaml"), ("validate", "no-such-net", "--ranks", "2"),
    ("profile", "no-such-net"), ("profile-comm", "--ranks", "0"), ("import", "no-such-config.json"),
    ("info", "no-such-net"), ("machines", "no-such-machine"), ("plan", "resnet18", "--bucket-mb", "-3"),
)


def cases(quick: bool) -> list[tuple[str, list[str]]]:
    """(name, arguments) of every command captured, the slowest first."""
    sys.path.insert(0, str(ROOT))
    from networks.loader import zoo_names  # the zoo as this checkout ships it
    names = [n for n in zoo_names() if not quick or n in SMALL]
    out = []
    for p in sorted(DEVICES, reverse=True):
        for net in names:
            for m in MACHINES:
                tag = f"{net}-p{p}-{m}"
                out.append((f"plan-{tag}", ["plan", net, "-p", str(p), "--machine", m, "--json", *GENEROUS,
                                            "--out", f"plans/{tag}.yaml"]))
                out.append((f"predict-{tag}", ["predict", net, "-p", str(p), "--machine", m, "--json"]))
    out += [(f"refusal-{i:02d}", list(args)) for i, args in enumerate(REFUSALS)]
    return out


def run_one(dnnplan: str, workdir: Path, name: str, args: list[str]) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([dnnplan, *args], cwd=workdir, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
    row = {"name": name, "args": args, "rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr,
           "wall_s": round(time.perf_counter() - t, 1)}
    if name.startswith("plan-") and proc.returncode == 0:  # the plan file, predicted again
        plan_file = args[args.index("--out") + 1]
        again = subprocess.run([dnnplan, "predict", plan_file, "--json"], cwd=workdir, capture_output=True,
                               text=True, env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"})
        row["replan"] = {"rc": again.returncode, "stdout": again.stdout, "stderr": again.stderr}
        row["plan_file"] = (workdir / plan_file).read_text()
    return row


def capture(out: Path, dnnplan: str, jobs: int, quick: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "plans").mkdir(exist_ok=True)
    todo = [(n, a) for n, a in cases(quick) if not (out / f"{n}.json").exists()]  # resumable
    print(f"{len(todo)} commands to capture into {out} with {dnnplan}", flush=True)
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        futures = {pool.submit(run_one, dnnplan, out, n, a): n for n, a in todo}
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            row = fut.result()
            tmp = out / f"{row['name']}.json.tmp"
            tmp.write_text(json.dumps(row, indent=1))
            tmp.rename(out / f"{row['name']}.json")
            print(f"[{done}/{len(todo)}] {row['name']}: rc {row['rc']}, {row['wall_s']} s", flush=True)


def scrub(value):
    """A JSON value without the fields that hold elapsed time, and its texts without their durations
    (a solver's detail: "reduced 198 nodes ... in 0.004 s")."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in ELAPSED}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, str):
        return SECONDS.sub("<s>", value)
    return value


def parsed(text: str):
    try:
        return scrub(json.loads(text))
    except json.JSONDecodeError:
        return text


def differences(a, b, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: only in {'after' if k in b else 'before'}")
            else:
                out += differences(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {str(a)[:160]!r} != {str(b)[:160]!r}"]


def compare(before: Path, after: Path) -> int:
    names = sorted(p.stem for p in before.glob("*.json"))
    missing = [n for n in names if not (after / f"{n}.json").exists()]
    differ = {}
    for n in names:
        if n in missing:
            continue
        a, b = (json.loads((d / f"{n}.json").read_text()) for d in (before, after))
        diffs = differences({k: parsed(v) if k in ("stdout",) else v for k, v in _answer(a).items()},
                            {k: parsed(v) if k in ("stdout",) else v for k, v in _answer(b).items()})
        if diffs:
            differ[n] = diffs
    print(f"{len(names) - len(missing)} commands compared ({len(missing)} not captured after): "
          f"{len(differ)} differ")
    for n, diffs in differ.items():
        print(f"- {n}: {len(diffs)} fields")
        for d in diffs[:8]:
            print(f"    {d}")
    return 1 if differ or missing else 0


def _answer(row: dict) -> dict:
    """What a command answered: exit code, output, and for a plan its file and the file predicted again."""
    stdout = _untimed(row["stdout"]) if row["name"].startswith("refusal-") else row["stdout"]
    out = {"rc": row["rc"], "stdout": stdout, "stderr": _stderr(row)}
    if "replan" in row:
        out["replan"] = {"rc": row["replan"]["rc"], "stdout": parsed(row["replan"]["stdout"])}
        out["plan_file"] = scrub(yaml.safe_load(row["plan_file"]))
    return out


def _stderr(row: dict) -> str:
    """A refusal's text; a JSON command's stderr holds only progress lines, which carry elapsed time."""
    return _untimed(row["stderr"]) if row["name"].startswith("refusal-") else ""


def _untimed(text: str) -> str:
    """Text with its durations (``0.7 s``, ``2.4 s of 20 s``) and progress lines left out."""
    return SECONDS.sub("<s>", "\n".join(line for line in text.splitlines() if not line.startswith("searching ")))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    cap = sub.add_parser("capture", help="run every command with one checkout's dnnplan")
    cap.add_argument("--out", type=Path, required=True)
    cap.add_argument("--dnnplan", default=shutil.which("dnnplan") or "dnnplan")
    cap.add_argument("--jobs", type=int, default=1)
    cap.add_argument("--quick", action="store_true", help="the small networks only")
    cmp_ = sub.add_parser("compare", help="compare two captures")
    cmp_.add_argument("before", type=Path)
    cmp_.add_argument("after", type=Path)
    args = ap.parse_args()
    if args.cmd == "capture":
        capture(args.out.resolve(), args.dnnplan, args.jobs, args.quick)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
