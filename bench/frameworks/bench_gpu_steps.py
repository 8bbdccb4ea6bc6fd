"""Ahead-of-time step predictions on one H100 against PyTorch training steps measured there.

    PYTHONPATH=. python bench/frameworks/bench_gpu_steps.py [--json]

The measurements (bench/assets/h100_torch_steps*.json: three sessions on three lent machines, each
an NVIDIA H100 80GB HBM3, the same day) were taken by ``bench/gpu/device_checks.sh`` and
``bench/gpu/torch_steps.py``; they are data here, since CI has no GPU. Each prediction is
``dnnplan predict NETWORK -p 1 -b BATCH --machine dgx-h100 --precision P --optimizer O --attention
materialized`` (these steps computed attention unfused, the scores materialised): the
shipped datasheet machine, whose efficiencies were fitted on A100 and V100 rows
(bench/published/bench_published.py), never on these. So every row is held out.

Rows are grouped by network kind (the GPT-2 mirrors, torchvision's CNNs with cuDNN's benchmark
mode) and by how the measured step was implemented:

* ``fused``: torch.compile'd, so each elementwise chain (scale, mask, softmax and dropout; layer
  norm; GELU; batch norm with ReLU) runs as one kernel, as the model prices them
  (costmodel/calls/layer_calls.py: one pass over the scores for the softmax);
* ``eager``: PyTorch eager, one kernel per op: several passes over every S x S score matrix,
  float32 softmax and layer norm under autocast, and the LM head's GEMM on cuBLAS's unaligned path
  (the vocabulary 50257 is not a multiple of 8).

Rows measured with PyTorch's fused attention (``sdpa``) compute a different algorithm and have no
prediction. The kernel table sums the device time of each class of kernels in one step
(torch.profiler), to show where the measured time went.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"
STEPS = ASSETS / "h100_torch_steps.json"
KERNELS = ASSETS / "h100_torch_steps_kernels.json"
COMPILED = ASSETS / "h100_torch_steps_compiled.json"
MACHINE = "dgx-h100"


GROUPS = ("gpt fused", "gpt eager", "cnn fused", "cnn eager")


def group(row: dict) -> str:
    if row["layout"] == "sdpa":
        return "no twin"
    kind = "gpt" if row["network"].startswith("gpt") else "cnn"
    return f"{kind} {'fused' if row['layout'].endswith('+compile') else 'eager'}"


def predict(row: dict) -> dict:
    cmd = [sys.executable, "-m", "dnnplan", "predict", row["network"], "-p", "1", "-b", str(row["batch"]),
           "--machine", MACHINE, "--precision", row["precision"], "--optimizer", row["optimizer"],
           "--attention", "materialized", "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def measured_rows() -> list[dict]:
    """Every measured row, with the median of each session that timed it."""
    rows: dict[str, dict] = {}
    for path in (STEPS, KERNELS, COMPILED):
        for r in json.loads(path.read_text())["rows"]:
            if "median_s" not in r:
                continue
            row = rows.setdefault(r["name"], {k: r[k] for k in ("name", "network", "batch", "precision",
                                                                "optimizer", "layout")} | {"runs_s": []})
            row["runs_s"].append(r["median_s"])
            row["peak_memory_bytes"] = r["peak_memory_bytes"]
    return list(rows.values())


def results() -> list[dict]:
    out = []
    for row in measured_rows():
        row = dict(row, group=group(row), measured_s=sum(row["runs_s"]) / len(row["runs_s"]))
        if row["group"] != "no twin":
            p = predict(row)
            row.update(predicted_s=p["step_s"], error=p["step_s"] / row["measured_s"] - 1,
                       predicted_memory_bytes=p["memory_peak_bytes"],
                       memory_error=p["memory_peak_bytes"] / row["peak_memory_bytes"] - 1)
        out.append(row)
    return out


KERNEL_CLASSES = (  # (class, substrings of the kernel's name, lower case), first match wins
    ("GEMM and convolution", ("gemm", "nvjet", "cutlass", "xmma", "cublas", "conv")),
    ("fused attention", ("flash", "fmha", "sdpa")),
    ("optimiser", ("adam", "multi_tensor", "sgd")),
    ("softmax", ("softmax",)),
    ("normalisation", ("layer_norm", "batchnorm", "bn_")),
    ("dropout", ("dropout", "masked_scale")),
    ("copies and casts", ("copy", "to_copy")),
)


def kernel_class(name: str) -> str:
    low = name.lower()
    for cls, keys in KERNEL_CLASSES:
        if any(k in low for k in keys):
            return cls
    return "other elementwise and reductions"


def kernel_table() -> dict[str, dict[str, float]]:
    """Per breakdown row: seconds per step in each kernel class."""
    out = {}
    for r in json.loads(KERNELS.read_text())["rows"]:
        if "kernels" not in r:
            continue
        classes: dict[str, float] = {}
        for name, _calls, seconds in r["kernels"]:
            classes[kernel_class(name)] = classes.get(kernel_class(name), 0.0) + seconds
        out[r["name"]] = classes
    return out


def summary(rows: list[dict]) -> dict:
    by = {}
    for g in GROUPS:
        errs = [abs(r["error"]) for r in rows if r["group"] == g]
        if errs:
            by[g] = {"rows": len(errs), "mean_abs_error": sum(errs) / len(errs), "worst_abs_error": max(errs)}
    return by


def ceilings() -> dict:
    data = json.loads(STEPS.read_text())
    return {"device": data["device"], "date": data["date"], "torch": data["torch"], **data["ceilings"]}


def render(rows: list[dict], kernels: dict, summ: dict, ceil: dict) -> str:
    lines = [f"{ceil['device']}, measured {ceil['date']} (torch {ceil['torch']}); predictions: dnnplan "
             f"predict --machine {MACHINE}, ahead of time, no H100 calibration",
             f"ceilings measured: GEMM 8192^3 bf16 {ceil['gemm_bf16_flops'] / 1e12:.0f}, fp16 "
             f"{ceil['gemm_fp16_flops'] / 1e12:.0f}, tf32 {ceil['gemm_tf32_flops'] / 1e12:.0f}, fp32 "
             f"{ceil['gemm_fp32_flops'] / 1e12:.1f} TFLOP/s; copy {ceil['copy_bytes_per_s'] / 1e9:.0f} GB/s",
             "", f"{'row':28s} {'group':9s} {'measured':>10s} {'predicted':>10s} {'error':>7s} "
             f"{'mem meas':>9s} {'mem pred':>9s}"]
    for r in rows:
        runs = "/".join(f"{s * 1e3:.1f}" for s in r["runs_s"])
        pred = f"{r['predicted_s'] * 1e3:8.1f}ms" if "predicted_s" in r else f"{'-':>10s}"
        err = f"{r['error']:+7.1%}" if "error" in r else f"{'-':>7s}"
        mem = f"{r['predicted_memory_bytes'] / 2**30:7.1f}Gi" if "predicted_s" in r else f"{'-':>9s}"
        lines.append(f"{r['name']:28s} {r['group']:9s} {runs:>8s}ms {pred} {err} "
                     f"{r['peak_memory_bytes'] / 2**30:7.1f}Gi {mem}")
    lines.append("")
    for g, s in summ.items():
        lines.append(f"{g}: {s['rows']} rows, mean |error| {s['mean_abs_error']:.1%}, "
                     f"worst {s['worst_abs_error']:.1%}")
    lines += ["", "device time per step by kernel class (ms), torch.profiler:"]
    classes = sorted({c for k in kernels.values() for c in k})
    lines.append(f"{'class':34s}" + "".join(f"{n[:22]:>23s}" for n in kernels))
    for c in classes:
        lines.append(f"{c:34s}" + "".join(f"{k.get(c, 0.0) * 1e3:23.2f}" for k in kernels.values()))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    rows, kernels = results(), kernel_table()
    summ, ceil = summary(rows), ceilings()
    if args.json:
        print(json.dumps({"ceilings": ceil, "rows": rows, "summary": summ, "kernels_s": kernels}, indent=1))
    else:
        print(render(rows, kernels, summ, ceil))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
