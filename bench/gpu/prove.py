"""The GPU proof on one GPU, in one process tree under a time budget (bench/gpu/prove.sh runs it).

Stages, most important first (:func:`plan_stages`), each with its own limit in seconds (``LIMITS``,
``ROW_LIMITS``), its commands each a process sharing it. Before anything runs, a stage whose
packages are neither installed nor in the carried wheels is dropped; then each stage starts only
when its whole limit fits what the stages before it left of the budget (bench/gpu/prove_budget.py).
Each stage left out is written to details.json (``skipped``) and prove.log with why (run it in
another call with ``--skip`` and ``--rows``). A command that still fails or runs out of its
stage's time is reported as missing, never estimated. The card is named from nvidia-smi
(prove_rows.card_of): its tables are CARD-PRECISION.json and its plans are priced on its machine
(an H200 on dgx-h200).

1. every cuDNN graph dnnplan builds, built on the card (bench/gpu/cudnn_validate.py: seconds; its
   one line per graph diagnoses the stages after it);
2. ``pytest -m gpu``: every GPU kernel against the numpy kernel, the prepared convolutions, NCCL on
   one rank, a plan with --check (each test bounded by pytest-timeout when it is installed);
3. per row of prove_rows.ROWS, one stage each: ``dnnplan profile`` (an earlier process), ``dnnplan
   plan`` from that table, ``dnnplan execute`` on one GPU eagerly and replayed as a CUDA graph (each
   a row with its ``mode``: the ahead-of-time step, per-layer and memory errors), then PyTorch
   eager's step of the same row (bench/gpu/torch_steps.py, cuDNN benchmark mode);
4. two ranks on the one GPU (host-staged; after the first two rows): ``dnnplan profile --devices
   1,2``, ``dnnplan profile-comm --backend cupy`` (the staged collectives timed end to end),
   ``dnnplan validate --check``; then the host's cost per op under cupy and torch (``dnnplan profile
   --host``, into details.json);
5. the card's shipped tables for 1-8 devices (resumed from profiler/profiles/ when there), with what
   the stages before left;
6. PyTorch's GPT-2 step at batch 8 in bf16, eager and through torch.compile (``COMPILED``);
7. the card's machine's price of transformer kernels (FlashAttention forward and backward, bf16 and
   FP8 GEMMs at Llama 3 shapes) against PyTorch's on the card (bench/gpu/transformer_kernels.py);
8. cuDNN's engines of a few convolutions, all timed beside the families' top-k choice
   (bench/gpu/engines_probe.py).

Outputs under ``--out`` (at most 8 files): prove.log, gpu-validation.json (rows, prove_rows.ROW_KEYS),
details.json (every command's JSON, the verdicts, the stages run and skipped), kernels.json,
torch_steps.json, engines.json, CARD-tf32.json, CARD-bf16.json (the tests' output is in prove.log).

``--dry-run``: every stage's plumbing on the host (numpy, lenet5, fp32; no torch, no engines, no
tests): checks the script, produces no figure.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from prove_budget import DNNPLAN, TESTS, TORCH, Stage, admit, allot, grown, missing_packages  # noqa: E402
from prove_rows import (DRY_ROWS, DRY_TWO_RANKS, ROWS, SHIPPED_NETWORKS, SHIPPED_PRECISIONS,  # noqa: E402
                        TWO_RANKS, Row, breakdown_args, card_of, from_execute, from_validate, torch_step,
                        verdicts)

ROOT = Path(__file__).resolve().parents[2]


class Session:
    """The budget, the log, and the commands (each with a limit inside the budget)."""

    def __init__(self, out: Path, budget_s: float, dry: bool, commit: str):
        self.out, self.dry, self.commit = out, dry, commit
        self.work = out / "work" if dry else Path("/tmp/dnnplan-prove")
        self.work.mkdir(parents=True, exist_ok=True)
        self.deadline = time.monotonic() + budget_s
        self.stage_end: float | None = None  # the running stage's own limit (:meth:`begin`)
        self.log = open(out / "prove.log", "a", encoding="utf-8")
        self.details: dict = {"missing": [], "skipped": [], "runs": {}}
        self.timeout_plugin = False  # pytest-timeout installed: each GPU test bounded too
        self.rows: list[dict] = []
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        self.device = "host (dry run)" if dry else "?"
        # the card's short name (the tables' prefix) and the machine it is priced on (prove_rows.card_of)
        self.card, self.machine = ("local", "local") if dry else card_of(gpu_name())

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def stage_left(self) -> float:
        """Seconds the running stage has left (the budget's, outside a stage)."""
        return self.left() if self.stage_end is None else min(self.left(), self.stage_end - time.monotonic())

    def begin(self, stage: Stage) -> None:
        """``stage`` starts: its commands share its limit."""
        self.stage_end = time.monotonic() + stage.limit_s
        self.say(f"stage {stage.name} (at most {stage.limit_s:.0f} s)")

    def skip(self, stage: str, why: str) -> None:
        self.details["skipped"].append({"stage": stage, "why": why})
        self.say(f"  SKIPPED {stage}: {why}")

    def say(self, line: str) -> None:
        stamp = f"[{time.strftime('%H:%M:%S')} {self.left():5.0f}s left] "
        print(stamp + line, flush=True)
        self.log.write(stamp + line + "\n")
        self.log.flush()

    def run(self, args: list[str], limit_s: float, what: str) -> tuple[int, str]:
        """Run a command (``python -m`` modules get this interpreter) within ``limit_s`` and what is
        left; (exit code, stdout). Its output goes to the log."""
        limit = min(limit_s, self.left() - 5, self.stage_left())
        if limit < 10:
            self.missing(what, "no time left in its stage")
            return -1, ""
        cmd = [sys.executable, *args] if args[0] in ("-m",) or args[0].endswith(".py") else args
        self.say(f"$ {' '.join(cmd)}  (limit {limit:.0f} s)")
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired as err:
            self.log.write((err.stdout or b"").decode(errors="replace") if isinstance(err.stdout, bytes)
                           else (err.stdout or ""))
            self.missing(what, f"timed out after {limit:.0f} s")
            return 124, ""
        self.log.write(proc.stdout[-20000:] + proc.stderr[-20000:])
        self.say(f"  exit {proc.returncode} in {time.monotonic() - t0:.1f} s")
        if proc.returncode != 0:
            self.missing(what, f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip()[-300:]}")
        return proc.returncode, proc.stdout

    def missing(self, what: str, why: str) -> None:
        self.details["missing"].append({"what": what, "why": why})
        self.say(f"  MISSING {what}: {why}")

    def save(self) -> None:
        for row in self.rows:
            self.details["runs"].setdefault("verdicts", {})[f"{row['network']}-b{row['batch']}-{row['precision']}-"
                                                             f"{row['ranks']}r"] = verdicts(row)
        (self.out / "gpu-validation.json").write_text(json.dumps(self.rows, indent=1) + "\n")
        (self.out / "details.json").write_text(json.dumps(self.details, indent=1) + "\n")


def gpu_name() -> str:
    """What nvidia-smi names the first GPU ('' when it cannot say)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def backend_args(s: Session, precision: str) -> list[str]:
    return ["--backend", "numpy"] if s.dry else ["--backend", "cupy", "--precision", precision]


def plan_args(s: Session) -> list[str]:
    return ["--machine", s.machine]


def gpu_tests(s: Session) -> None:
    if s.dry:
        return
    bound = ["--timeout", "60"] if s.timeout_plugin else []  # else the stage's limit bounds them all
    s.run(["-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *bound, "-rfE",
           "tests/gpu/kernels/test_gpu_kernels.py", "tests/gpu/backend/test_gpu_backend.py",
           "tests/gpu/kernels/test_kernels_backend.py", "tests/gpu/kernels/test_conv_prepared.py",
           "tests/gpu/launches/test_update_launches.py"], 90, "pytest -m gpu")


def cudnn_graphs(s: Session) -> None:
    if not s.dry:
        s.run(["bench/gpu/cudnn_validate.py"], 60, "cuDNN graphs built on the card")


def transformer_kernels(s: Session) -> None:
    args = (["bench/gpu/transformer_kernels.py", "--out", str(s.out)]
            + (["--dry-run"] if s.dry else ["--machine", s.machine]))
    _, text = s.run(args, 90, "transformer kernels against the clock")
    summary = _last_json(text)
    if summary is not None:
        s.details["transformer_kernels"] = summary


def one_gpu_row(s: Session, row: Row, with_torch: bool) -> None:
    """The row's profile, plan and execute (eagerly, then replayed as a CUDA graph; on the host the
    graphs are asked for and refused), then (``with_torch``) PyTorch eager's step of it."""
    plan = s.work / f"{row.name}.plan.yaml"
    # the precision's shipped table: each row's kernels timed at its batch (stage 7 adds what time allows)
    table = shipped_table(s, row.precision) if not s.dry else s.work / f"{row.name}.json"
    rc, text = s.run(["-m", "dnnplan", "profile", row.source, "-b", str(row.batch), "--devices", "1", "--out",
                      str(table), "--json", *backend_args(s, row.precision)], ROW_LIMITS["profile"],
                     f"{row.name}: profile")
    summary = _last_json(text)
    if summary is not None:
        s.details.setdefault("profiles", {})[row.name] = {k: summary.get(k) for k in
                                                          ("seconds", "measured", "failed", "best_flops", "by_kernel")}
    if rc != 0:
        return
    fp = (read_json(table) or {}).get("fingerprint", {})
    s.device = fp.get("device", s.device) if not s.dry else s.device
    rc, _ = s.run(["-m", "dnnplan", "plan", row.source, "-p", "1", "-b", str(row.batch), *plan_args(s),
                   "--precision", row.precision, "--optimizer", "momentum", "--profile", str(table), "--no-recompute",
                   "--out", str(plan), "--force"], ROW_LIMITS["plan"], f"{row.name}: plan")
    if rc != 0:
        return
    runs = {}
    for mode in ("eager", "graphs"):
        result = s.work / f"{row.name}.{mode}.execute.json"
        s.run(["-m", "dnnplan", "execute", str(plan), "--ranks", "1", "--steps", "10", "--warmup", "3",
               "--profile", str(table), "--json", str(result), "--force", "--timeout", "240",
               "--graphs" if mode == "graphs" else "--no-graphs"], ROW_LIMITS["execute"], f"{row.name}: execute {mode}")
        got = read_json(result)
        if got is not None:
            runs[mode] = s.details["runs"][f"{row.name}-{mode}"] = got
    if not runs:
        return
    torch_json = torch_rows(s, [row.torch_row]) if with_torch else None
    for got in runs.values():
        s.rows.append(from_execute(row, got, torch_step(torch_json, row.torch_row), s.device, s.commit, s.date))
    s.save()


def torch_rows(s: Session, names, limit_s: float | None = None, what: str = "PyTorch eager steps") -> dict | None:
    """PyTorch's steps of the torch_steps.py rows ``names``, added to torch_steps.json (one file for
    every row)."""
    if s.dry:
        s.missing(what, "dry run: no GPU")
        return None
    path, part = s.out / "torch_steps.json", s.work / "torch_steps.part.json"
    s.run(["bench/gpu/torch_steps.py", "--out", str(part), "--rows", ",".join(names),
           "--steps", "20", "--warmup", "5", *breakdown_args(names)], limit_s or ROW_LIMITS["torch"], what)
    got = read_json(part)
    if got is None:
        return None
    kept = read_json(path) or {}
    new = {r.get("name") for r in got.get("rows", [])}
    kept = {**got, "rows": [r for r in kept.get("rows", []) if r.get("name") not in new] + got.get("rows", [])}
    path.write_text(json.dumps(kept, indent=1) + "\n")
    return got


#: PyTorch's rows timed eagerly and through torch.compile in one stage (bench/gpu/torch_steps.py), for
#: the pytorch and pytorch-compile framework files' held-out rows on this card
COMPILED = ("gpt2-b8-bf16", "gpt2-b8-bf16-compiled")


def compiled(s: Session) -> None:
    torch_rows(s, COMPILED, LIMITS["compiled"] - 5, "PyTorch eager and compiled steps")


def host_costs(s: Session) -> None:
    """The host's cost to issue one op (`dnnplan profile --host`) under cupy (what dnnplan's
    executor issues through: the ``dnnplan`` framework file) and torch (``pytorch``), on this GPU's
    host; each summary into details.json (``host``)."""
    for framework in ("cupy", "torch"):
        _, text = s.run(["-m", "dnnplan", "profile", "--host", "--framework", framework, "--json"], 20,
                        f"host cost per op ({framework})")
        got = _last_json(text)
        if got is not None:
            s.details.setdefault("host", {})[framework] = got
            s.save()


def two_ranks(s: Session) -> None:
    row = DRY_TWO_RANKS if s.dry else TWO_RANKS
    table, report = s.work / f"{row.name}-2r.json", s.work / f"{row.name}-2r.validate.json"
    rc, _ = s.run(["-m", "dnnplan", "profile", row.source, "-b", str(row.batch), "--devices", "1,2", "--out",
                   str(table), *backend_args(s, row.precision)], 90, "two ranks: profile")
    if rc != 0:
        return
    # every sixteenth power of two from 8 B to 8 MiB and 16 MiB, 50 ms a point: 12 sizes took 73 s
    # through the host on the H100 (2026-11-27), the default's 22 at 0.2 s over a minute
    sizes = ",".join(str(8 * 16**i) for i in range(6)) + f",{16 * 2**20}"
    rc, _ = s.run(["-m", "dnnplan", "profile-comm", "--ranks", "2", "--sizes", sizes, "--cap", "0.05", "--out",
                   str(table), *backend_args(s, row.precision)], 90, "two ranks: profile-comm (staged)")
    rc, _ = s.run(["-m", "dnnplan", "validate", row.source, "--ranks", "2", "--batch", str(row.batch),
                   *plan_args(s), "--profile", str(table), "--steps", "10", "--warmup", "3", "--no-in-run",
                   "--no-step-context", "--json", str(report), "--force", "--timeout", "240"],
                  300, "two ranks: validate --check")
    got = read_json(report)
    if got is None:
        return
    s.details["runs"]["two_ranks"] = got
    s.rows.extend(from_validate(row, got, s.device, s.commit, s.date))
    s.save()


def engines(s: Session) -> None:
    if s.dry:
        return
    s.run(["bench/gpu/engines_probe.py", "--out", str(s.out / "engines.json")], 90, "engines probe")


def shipped_table(s: Session, prec: str) -> Path:
    """The card's table of the precision under ``--out`` (named CARD-PRECISION, the card from
    nvidia-smi), resumed from the committed one of that card."""
    out = s.out / f"{s.card}-{prec}.json"
    start = ROOT / "profiler" / "profiles" / f"{s.card}-{prec}.json"
    if start.is_file() and not out.exists() and not s.dry:
        shutil.copy(start, out)
    return out


def shipped(s: Session) -> None:
    """The card's tables, resumed from the committed ones, with the time left (each network a share)."""
    precisions = ("fp32",) if s.dry else SHIPPED_PRECISIONS
    nets = ("lenet5",) if s.dry else SHIPPED_NETWORKS
    for prec in precisions:
        out = shipped_table(s, prec)
        for net in nets:
            # resnet50 and gpt2 get a minute each: the target is their 1-8 device profile in under one
            share = (60.0 if net in ("resnet50", "gpt2")
                     else max(20.0, (s.stage_left() - 20) / (len(nets) * len(precisions))))
            rc, text = s.run(["-m", "dnnplan", "profile", net, "--devices", "1,2,4,8", "--out", str(out),
                              "--max-seconds", f"{share:.0f}", "--json", *backend_args(s, prec)], share + 60,
                             f"shipped profile {net} {prec}")
            summary = _last_json(text)
            if summary is not None:  # seconds, measured, resumed, left: the profile's own account
                s.details.setdefault("shipped", {})[f"{net}-{prec}"] = {
                    k: summary.get(k) for k in ("seconds", "measured", "resumed", "left", "failed", "entries")}
                s.save()


def _last_json(text: str) -> dict | None:
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def _name(row: dict) -> str:
    return f"{row['network']}-b{row['batch']}-{row['precision']}"


#: Seconds each command of a row may take (measured 2026-12-04 on an H200: profiles 9-27 s, fewer
#: where the committed table has the row's kernels, a plan 2 s, an execute 11-15 s, PyTorch's step
#: 18-34 s); a row's stage is their sum, its two executes (eager, graphs) counted apart
ROW_LIMITS = {"profile": 30, "plan": 15, "execute": 40, "torch": 35}
#: The stages' own limits, in seconds (a row's: ROW_LIMITS's sum)
LIMITS = {"graphs": 20, "tests": 90, "two": 160, "host": 40, "shipped": 90, "compiled": 90, "kernels": 60,
          "engines": 60}


def plan_stages(rows, skip: set, dry: bool) -> list[Stage]:
    """The stages asked for, most important first: the graphs and kernel tests that the rows rest on,
    the first two rows (with PyTorch's step of each), the two ranks on one GPU (never reached in the
    three calls before, where it came after every row), the other rows, the 1-8 device profiles,
    then the transformer kernels and the engines probe."""
    gpu = () if dry else ("cupy", "cudnn")
    host = tuple(n for n in DNNPLAN if n not in ("cupy", "cudnn")) + gpu
    row_needs = host + (() if dry else TORCH)
    out = []
    if "graphs" not in skip and not dry:
        out.append(Stage("graphs", LIMITS["graphs"], host))
    if "tests" not in skip and not dry:
        out.append(Stage("tests", LIMITS["tests"], TESTS))
    if "rows" not in skip:
        with_torch = "torch" not in skip and not dry
        row_s = sum(v * (2 if k == "execute" else 1) for k, v in ROW_LIMITS.items() if with_torch or k != "torch")
        out += [Stage(f"row {row.name}", row_s, row_needs if with_torch else host) for row in rows]
    if "two" not in skip:
        after = sum(not st.name.startswith("row ") for st in out) + 2  # the first two rows
        out.insert(min(len(out), after), Stage("two", LIMITS["two"], host))
    if "host" not in skip and not dry:  # seconds: right after the two ranks
        at = next((i + 1 for i, st in enumerate(out) if st.name == "two"), len(out))
        out.insert(at, Stage("host", LIMITS["host"], host + TORCH))
    if "shipped" not in skip:
        out.append(Stage("shipped", LIMITS["shipped"], host))
    if "compiled" not in skip and not dry:
        out.append(Stage("compiled", LIMITS["compiled"], TORCH))
    if "kernels" not in skip:
        out.append(Stage("kernels", LIMITS["kernels"], () if dry else host + TORCH))
    if "engines" not in skip and not dry:
        out.append(Stage("engines", LIMITS["engines"], host))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=450, help="seconds for everything")
    ap.add_argument("--commit", default=os.environ.get("COMMIT", "unknown"))
    ap.add_argument("--dry-run", action="store_true", help="the plumbing on the host (numpy, lenet5)")
    ap.add_argument("--skip", default="",
                    help="comma-separated stages to skip: graphs,tests,rows,torch,two,host,shipped,compiled,"
                         "kernels,engines")
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all), e.g. gpt2-b8-bf16")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    s = Session(out, args.budget, args.dry_run, args.commit)
    skip = set(filter(None, args.skip.split(",")))
    rows = DRY_ROWS if args.dry_run else ROWS
    if args.rows:
        rows = tuple(r for r in rows if r.name in args.rows.split(","))
    asked = plan_stages(rows, skip, args.dry_run)
    missing = missing_packages(asked)
    s.timeout_plugin = not missing_packages([Stage("timeout", 0, ("pytest_timeout",))])
    if not s.timeout_plugin:
        s.say("pytest-timeout is not installed: the GPU tests run bounded by their stage's limit only")
    stages, skipped = allot(asked, missing)
    for name, why in skipped:
        s.skip(name, why)
    s.details["stages"] = []
    s.save()
    by_row = {f"row {r.name}": r for r in rows}
    for i, stage in enumerate(stages):
        if stage.name == "shipped":  # the 1-8 device tables take what the others leave
            stage = grown(stage, s.left(), stages[i + 1:])
        why = admit(stage, s.left())
        if why is not None:
            s.skip(stage.name, why)
            continue
        s.details["stages"].append({"stage": stage.name, "limit_s": round(stage.limit_s)})
        s.begin(stage)
        if stage.name == "graphs":
            cudnn_graphs(s)
        elif stage.name == "tests":
            gpu_tests(s)
        elif stage.name in by_row:
            one_gpu_row(s, by_row[stage.name], "torch" not in skip and not s.dry)
        elif stage.name == "two":
            two_ranks(s)
        elif stage.name == "host":
            host_costs(s)
        elif stage.name == "shipped":
            shipped(s)
        elif stage.name == "compiled":
            compiled(s)
        elif stage.name == "kernels":
            transformer_kernels(s)
        elif stage.name == "engines":
            engines(s)
        s.stage_end = None
        s.save()
    s.say(f"done: {len(s.rows)} row(s), {len(s.details['missing'])} missing figure(s), "
          f"{len(s.details['skipped'])} stage(s) skipped")
    for row in s.rows:
        s.say(json.dumps({k: row[k] for k in ("network", "batch", "precision", "ranks", "mode", "predicted_s",
                                              "measured_s", "torch_s", "layer_median_error", "memory_error",
                                              "check_passed")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
