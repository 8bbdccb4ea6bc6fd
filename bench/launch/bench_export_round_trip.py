"""The planner's plans exported and read back: every zoo transformer at 8, 64, 512 and 4096 H100s in bf16.

    python bench/launch/bench_export_round_trip.py              the whole matrix (a plan each: minutes)
    python bench/launch/bench_export_round_trip.py --time 5     each plan's search bound in seconds
    python bench/launch/bench_export_round_trip.py --import-405b  also time reading and predicting a 405B torchtitan TOML

For each (network, devices) it plans with `dnnplan plan --out` (whole process, as a user runs it),
exports the plan to torchtitan, DeepSpeed and Megatron-LM, reads each file back
(planner.launch_import) and predicts it (executor.session.predict_launch): ``exact`` when the step
and memory equal the plan's to the last digit, else the reason the framework refused the plan. It
prints one line a case and the counts by framework and reason. The machine and its load are printed
first.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tests.unit.planner.export.test_export_round_trip import DEVICES, MACHINE, TRANSFORMERS, round_trip  # noqa: E402
from planner.plan.plan_file import read_plan  # noqa: E402

FRAMEWORKS = ("torchtitan", "deepspeed", "megatron")
#: refusals counted together, by how their line starts
KINDS = {"refused: split ": "refused: a layer split otherwise than the framework's one layout (a per-layer hybrid)",
         "refused: a micro-batch of ": "refused: a micro-batch the data-parallel ranks cannot share",
         "refused: starts pipeline stage ": "refused: a pipeline (DeepSpeed's is the script's)"}


def kind(outcome: str) -> str:
    return next((name for start, name in KINDS.items() if outcome.startswith(start)), outcome)


def plan_file(name: str, devices: int, folder: str, seconds: float) -> tuple[str | None, str]:
    """(the plan's path, or None and the last line the command printed)."""
    path = os.path.join(folder, f"{name}-{devices}.yaml")
    cmd = [sys.executable, "-m", "dnnplan", "plan", name, "-p", str(devices), "--machine", MACHINE, "--precision",
           "bf16", "--time-limit", str(seconds), "--out", path]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    said = (done.stderr or done.stdout).strip().splitlines()
    return (path if done.returncode == 0 else None), (said[-1] if said else f"exit {done.returncode}")


def import_405b(folder: str) -> float:
    """Whole process: read a 405B torchtitan TOML and predict it (`python -c`, as `predict --from` would)."""
    toml = os.path.join(folder, "llama3_405b.toml")
    with open(toml, "w") as f:
        f.write('[model]\nname = "llama3"\nflavor = "405B"\n[training]\nlocal_batch_size = 2\nseq_len = 8192\n'
                '[parallelism]\ndata_parallel_shard_degree = 64\ntensor_parallel_degree = 8\n'
                '[activation_checkpoint]\nmode = "full"\n')
    code = ("from planner.launch_import.formats import read_launch; "
            "from executor.session.predict_launch import launch_step; "
            f"t = open({toml!r}).read(); s = launch_step(read_launch(t, {toml!r}), None, None, 'dgx-h100'); "
            "print(s.prediction.step_s)")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": ROOT},
                   capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=float, default=10.0, help="each plan's search bound (s)")
    parser.add_argument("--import-405b", action="store_true", help="time a 405B TOML read and predicted")
    args = parser.parse_args()
    print(f"machine {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    counts = {f: Counter() for f in FRAMEWORKS}
    with tempfile.TemporaryDirectory() as folder:
        if args.import_405b:
            print(f"405B torchtitan TOML read and predicted, whole process: {import_405b(folder):.2f} s")
        for name in TRANSFORMERS:
            for devices in DEVICES:
                path, said = plan_file(name, devices, folder, args.time)
                if path is None:
                    for f in FRAMEWORKS:
                        counts[f]["no plan (dnnplan plan failed)"] += 1
                    print(f"{name:14} {devices:5}  no plan: {said[:150]}")
                    continue
                plan, net = read_plan(path)
                got = {f: round_trip(f, plan, net) for f in FRAMEWORKS}
                for f, outcome in got.items():
                    counts[f][kind(outcome)] += 1
                print(f"{name:14} {devices:5}  " + "  ".join(f"{f}: {o[:90]}" for f, o in got.items()), flush=True)
    for f in FRAMEWORKS:
        print(f"{f}: " + "; ".join(f"{n} {reason}" for reason, n in counts[f].most_common()))


if __name__ == "__main__":
    main()
