"""How long `dnnplan import` takes, whole process: a 70B-class Hugging Face config and ResNet-50's ONNX graph.

Issue 53 asks for under 2 s each. Each command runs as its own process (interpreter start, imports,
reading, mapping, writing the spec to stdout), ``--repeats`` times, interleaved with the others so a
drift of the machine's speed falls on all alike; the median and the fastest wall time are printed,
with the CPU time the process used (user + system: less sensitive to other work on a shared machine),
and beside them ``dnnplan info resnet50 --json`` (the zoo's spec, no import) as the baseline a command
costs on this machine anyway.

The 70B configs: tests/assets/hf/Meta-Llama-3-70B (imported once the op catalogue has grouped-query
attention; until then the command ends in its one-line refusal, which is timed too), and a 65B-class
Llama with one key/value head per query head (LLaMA 65B's sizes: hidden 8192, 80 layers, 64 heads,
intermediate 22016, vocabulary 32000), which imports today.

Run: python bench/bench_import.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
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


def main(repeats: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="bench-import-")) / "llama-65b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_65B))
    cases = {
        "llama-65b config (MHA)": [*_dnnplan(), "import", str(folder)],
        "Meta-Llama-3-70B config": [*_dnnplan(), "import", "tests/assets/hf/Meta-Llama-3-70B"],
        "resnet50.onnx": [*_dnnplan(), "import", "tests/assets/onnx/resnet50.onnx"],
        "gpt2.onnx": [*_dnnplan(), "import", "tests/assets/onnx/gpt2.onnx"],
        "baseline: info resnet50 (zoo)": [*_dnnplan(), "info", "resnet50", "--json"],
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpus: dict[str, list[float]] = {name: [] for name in cases}
    outcome: dict[str, str] = {}
    for _ in range(repeats):
        for name, args in cases.items():
            took, cpu, rc, last = _time(args)
            times[name].append(took)
            cpus[name].append(cpu)
            outcome[name] = "spec written" if rc == 0 else f"exit {rc}: {last[:100]}"
    base = statistics.median(times["baseline: info resnet50 (zoo)"])
    print(f"{platform.node()} ({platform.processor() or platform.machine()}), {repeats} runs each, whole process")
    for name in cases:
        med = statistics.median(times[name])
        print(f"  {name:32s} wall median {med:.2f} s, fastest {min(times[name]):.2f} s ({med / base:.2f}x the "
              f"baseline); CPU median {statistics.median(cpus[name]):.2f} s  {outcome[name]}")
    shutil.rmtree(folder.parent)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    main(parser.parse_args().repeats)
