"""How long `dnnplan predict --from FILE` takes, whole process, on two 405B launch configurations:
tests/assets/launch/llama3.1-405b.sh (Megatron-LM's arguments in bash arrays, 2048 H100s, tensor 8,
16 pipeline stages) and tests/assets/launch/llama3_405b.toml (torchtitan v0.2.2's own Llama 3 405B
preset: FSDP over what tensor 8 leaves, FP8, full recomputation; on 128 H100s, as the preset says), beside `dnnplan predict` of the same network given by name (the layout as
flags) and `dnnplan info resnet50 --json` (what any command costs on this machine).

The target: under 2 s a command. Each command runs as its own process (interpreter start, imports,
reading the script, finding the zoo network of its shape, pricing the pipelined step),
``--repeats`` times, interleaved so a drift of the machine's speed falls on all alike; the median and
fastest wall time are printed with the CPU time the process used (user + system: less sensitive to
other work on a shared machine), and the load average before and after.

Run: python bench/launch/bench_predict_from.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "tests/assets/launch/llama3.1-405b.sh"
TOML = "tests/assets/launch/llama3_405b.toml"

sys.path.insert(0, str(Path(__file__).parent))
from bench_import import _dnnplan, _load, _run  # noqa: E402  (bench/ is not a package; one timer for both)


def main(repeats: int) -> None:
    cases = {
        "predict --from the 405B script": [*_dnnplan(), "predict", "--from", SCRIPT, "--machine", "dgx-h100",
                                           "--json"],
        "predict --from the 405B torchtitan TOML": [*_dnnplan(), "predict", "--from", TOML, "--devices", "128",
                                                    "--machine", "dgx-h100", "--json"],
        "predict llama3.1-405b, same layout": [*_dnnplan(), "predict", "llama3.1-405b", "-p", "2048", "-b", "2048",
                                               "--tensor", "8", "--sequence-parallel", "--pipeline", "16",
                                               "--micro-batches", "128", "--zero", "1", "--precision", "bf16",
                                               "--optimizer", "adam", "--recompute", "selective", "--machine",
                                               "dgx-h100", "--json"],
        "baseline: info resnet50": [*_dnnplan(), "info", "resnet50", "--json"],
    }
    print(f"{platform.node()} ({platform.processor() or platform.machine()}), {_load()}")
    print(f"whole process, {repeats} runs each:")
    times, cpus, outcome = _run(cases, repeats)
    for name in cases:
        print(f"  {name:36s} wall median {statistics.median(times[name]):.2f} s, fastest {min(times[name]):.2f} s; "
              f"CPU median {statistics.median(cpus[name]):.2f} s  {outcome[name]}")
    print(f"after: {_load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    main(parser.parse_args().repeats)
