"""How long `dnnplan import` takes, whole process and in one process: 70B-class Hugging Face configs,
Mixtral's, and ResNet-50's and GPT-2's ONNX graphs; and how long `dnnplan plan` takes on the
imported Llama-3-8B at 64 devices in bf16 (issue 53's one command).

Issue 53 asks for under 2 s an import. Each command runs as its own process (interpreter start,
imports, reading, mapping, writing the spec to stdout), ``--repeats`` times, interleaved with the
others so a drift of the machine's speed falls on all alike; the median and the fastest wall time
are printed, with the CPU time the process used (user + system: less sensitive to other work on a
shared machine), and beside them ``dnnplan info resnet50 --json`` (the zoo's spec, no import) as the
baseline a command costs on this machine anyway. Then each import again inside this process
(:func:`networks.importers.imported_files.import_model`: reading, mapping, writing the spec text and parsing
it back), without the interpreter's start. The machine's load average is printed before and after.

The configs: tests/assets/hf/Meta-Llama-3-70B (grouped-query attention), Mixtral-8x7B-v0.1 (the
moe op) and a 65B-class Llama with one key/value head per query head (LLaMA 65B's sizes: hidden 8192,
80 layers, 64 heads, intermediate 22016, vocabulary 32000).

Run: python bench/launch/bench_import.py [--repeats 7] [--plan-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LLAMA_65B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 64,
             "intermediate_size": 22016, "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
             "hidden_act": "silu", "tie_word_embeddings": False}


def _dnnplan() -> list[str]:
    exe = shutil.which("dnnplan", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "dnnplan"]


def _time(args: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds of the child, exit code, its last line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or [""])[-1]
    return took, cpu, proc.returncode, last


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" ({os.cpu_count()} cores)"


def _report(cases: dict, times: dict, cpus: dict, outcome: dict, base: float) -> None:
    for name in cases:
        med = statistics.median(times[name])
        print(f"  {name:32s} wall median {med:.2f} s, fastest {min(times[name]):.2f} s ({med / base:.2f}x the "
              f"baseline); CPU median {statistics.median(cpus[name]):.2f} s  {outcome[name]}")


def _run(cases: dict, repeats: int) -> tuple[dict, dict, dict]:
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    outcome: dict[str, str] = {}
    for _ in range(repeats):
        for name, args in cases.items():
            took, cpu, rc, last = _time(args)
            times[name].append(took)
            cpus[name].append(cpu)
            outcome[name] = "ok" if rc == 0 else f"exit {rc}: {last[:100]}"
    return times, cpus, outcome


def _in_process(sources: dict[str, str], repeats: int) -> None:
    sys.path.insert(0, str(ROOT))
    from networks.importers.imported_files import import_model  # noqa: E402 (the checkout's, after the path is set)
    print("in one process (import_model: read, map, write the spec, parse it back), median of "
          f"{repeats}:")
    for name, source in sources.items():
        took = []
        for _ in range(repeats):
            start = time.perf_counter()
            got = import_model(source)
            took.append(time.perf_counter() - start)
        print(f"  {name:32s} {statistics.median(took):.3f} s  ({got.network.num_params:,} parameters)")


def main(repeats: int, plan_repeats: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-import-")) / "llama-65b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_65B))
    sources = {"llama-65b config (MHA)": str(folder), "Meta-Llama-3-70B config": "tests/assets/hf/Meta-Llama-3-70B",
               "Mixtral-8x7B-v0.1 config": "tests/assets/hf/Mixtral-8x7B-v0.1",
               "resnet50.onnx": "tests/assets/onnx/resnet50.onnx", "gpt2.onnx": "tests/assets/onnx/gpt2.onnx"}
    cases = {name: [*_dnnplan(), "import", source] for name, source in sources.items()}
    cases["baseline: info resnet50 (zoo)"] = [*_dnnplan(), "info", "resnet50", "--json"]
    print(f"{platform.node()} ({platform.processor() or platform.machine()}), {_load()}")
    print(f"dnnplan import, whole process, {repeats} runs each:")
    times, cpus, outcome = _run(cases, repeats)
    base = statistics.median(times["baseline: info resnet50 (zoo)"])
    _report(cases, times, cpus, outcome, base)
    with tempfile.TemporaryDirectory(prefix="dnnplan-bench-cache-") as cache:
        os.environ["DNNPLAN_CACHE"] = cache  # nothing cached from an earlier run
        plan = {"plan Meta-Llama-3-8B, 64 x bf16": [*_dnnplan(), "plan", "tests/assets/hf/Meta-Llama-3-8B/config.json",
                                                    "--devices", "64", "--precision", "bf16"]}
        print(f"dnnplan plan, whole process, {plan_repeats} runs:")
        ptimes, pcpus, pout = _run(plan, plan_repeats)
        _report(plan, ptimes, pcpus, pout, base)
    _in_process(sources, repeats)
    print(f"after: {_load()}")
    shutil.rmtree(folder.parent)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--plan-repeats", type=int, default=3)
    args = parser.parse_args()
    main(args.repeats, args.plan_repeats)
