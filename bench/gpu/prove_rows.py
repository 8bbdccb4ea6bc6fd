"""The rows of issue 51's GPU proof and how each figure is read off the commands' JSON (pure; used by
bench/gpu/prove.py, tested on the CPU in tests/bench/test_bench_gpu_prove.py).

A row of ``gpu-validation.json`` (bench/assets/ once measured) has exactly the keys
:data:`ROW_KEYS`: ``predicted_s`` is the ahead-of-time step (`dnnplan execute`'s prediction from a
profile taken in an earlier process), ``measured_s`` the median measured step, ``torch_s`` PyTorch
eager's median step of the same network, batch, precision and optimiser on the same card (None
where not measured), ``layer_median_error`` the median over layers of |measured / predicted - 1|
of each layer's total, ``memory_error`` measured / predicted peak - 1, ``check_passed`` the
``--check`` verdict (None where not checked). A figure that was not measured is None, never a
guess.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

ROW_KEYS = ("network", "batch", "precision", "ranks", "device", "commit", "date", "mode", "predicted_s",
            "measured_s", "torch_s", "layer_median_error", "memory_error", "check_passed")


@dataclass(frozen=True)
class Row:
    """One network, batch and precision executed on one GPU, and PyTorch's row of it
    (bench/gpu/torch_steps.py ROWS); ``spec``: the network's file when it is not a zoo name."""

    network: str
    batch: int
    precision: str
    torch_row: str
    spec: str = ""

    @property
    def source(self) -> str:
        """What the commands are given for the network: its file, else its zoo name."""
        return self.spec or self.network

    @property
    def name(self) -> str:
        return f"{self.network}-b{self.batch}-{self.precision}"


#: The rows, most telling first (host-bound ResNet-50, then GPT-2; VGG-16 met every target on an
#: H100; one block of Llama 3 8B with grouped-query attention, RMSNorm, SwiGLU and rotary
#: positions at 4,096 tokens): each executed eagerly and replayed as a CUDA graph beside PyTorch eager's step; targets:
#: dnnplan's step within 1.25x of PyTorch eager's, |step error| < 10%, per-layer median < 15%, peak
#: memory within 10%
ROWS = (Row("resnet50", 64, "tf32", "resnet50-b64-tf32-sgd"), Row("gpt2", 8, "bf16", "gpt2-b8-bf16-sgd-sdpa"),
        Row("resnet50", 64, "bf16", "resnet50-b64-bf16-sgd"), Row("vgg16", 64, "tf32", "vgg16-b64-tf32-sgd"),
        Row("llama3-8b-block", 1, "bf16", "llama3-8b-block-b1-bf16-sgd-sdpa", "bench/gpu/llama3-8b-block.yaml"))
#: PyTorch's rows whose kernels are listed too (bench/gpu/torch_steps.py --breakdown: each kernel's
#: name, calls and device seconds a step): VGG-16's convolutions leave 128 TFLOP/s (tf32) on an H100
#: where the pytorch framework file's one fraction of the peak, fitted on ResNet-50's, prices them at
#: 146, and which of its passes (forward, data or weight gradient) runs slow is not measured
#: (docs/VALIDATION.md, "Convolutions layer by layer")
BREAKDOWN = ("vgg16-b64-tf32-sgd",)


def breakdown_args(names) -> list[str]:
    """torch_steps.py's arguments listing the kernels of those of ``names`` in :data:`BREAKDOWN`."""
    listed = [n for n in names if n in BREAKDOWN]
    return ["--breakdown", ",".join(listed)] if listed else []


#: Two ranks on the one GPU (host-staged): the planner's plan and the uniform baselines of
#: `dnnplan validate`, each with --check, in float32 (the check's tightest tolerance)
TWO_RANKS = Row("alexnet", 32, "fp32", "")
#: The shipped H100 profile: the zoo's CNNs and GPT-2 for 1-8 devices, per precision
SHIPPED_NETWORKS = ("resnet50", "gpt2", "lenet5", "alexnet", "resnet18", "vgg16")
SHIPPED_PRECISIONS = ("tf32", "bf16")
#: The card's short name (the shipped tables' prefix, ``profiler/profiles/CARD-PRECISION.json``) and
#: the machine it is priced on, by what ``nvidia-smi`` names it, most specific first
CARDS = (("H200", "h200", "dgx-h200"), ("H100", "h100", "dgx-h100"), ("B200", "b200", "dgx-b200"),
         ("A100", "a100", "dgx-a100"))


def card_of(gpu_name: str) -> tuple[str, str]:
    """(the card's short name, its machine) for a GPU named ``gpu_name`` (e.g. 'NVIDIA H200');
    an unknown card is named by its own words and priced on dgx-h100, the closest shipped machine
    of those the proof was written for."""
    for word, card, machine in CARDS:
        if word in gpu_name.upper():
            return card, machine
    slug = "-".join(w for w in gpu_name.lower().replace("nvidia", "").split() if w.isalnum()) or "gpu"
    return slug, "dgx-h100"


#: The smoke run's rows (numpy on the host: the plumbing, not a figure)
DRY_ROWS = (Row("lenet5", 8, "fp32", ""),)
DRY_TWO_RANKS = Row("lenet5", 8, "fp32", "")


def layer_median_error(execute_json: dict) -> float | None:
    """Median |error| of the layers' totals in a `dnnplan execute --json` object."""
    errs = [abs(e["total"]) for e in execute_json.get("error", {}).get("layers", []) if e.get("total") is not None]
    return float(statistics.median(errs)) if errs else None


def torch_step(torch_json: dict | None, name: str) -> float | None:
    """The median step of a row of bench/gpu/torch_steps.py's output, None if absent or failed."""
    for row in (torch_json or {}).get("rows", []):
        if row.get("name") == name and "median_s" in row and "error" not in row:
            return float(row["median_s"])
    return None


def from_execute(row: Row, execute_json: dict, torch_s: float | None, device: str, commit: str, date: str) -> dict:
    """A validation row from one `dnnplan execute --json` run; its ``mode`` is how the timed steps
    ran (``steps_mode``: eager, or graphs), eager where the run does not say."""
    check = execute_json.get("check")
    mode = (execute_json.get("steps_mode") or {}).get("mode") or "eager"
    return {"network": row.network, "batch": row.batch, "precision": row.precision,
            "ranks": int(execute_json.get("ranks", 1)), "device": device, "commit": commit, "date": date,
            "mode": mode,
            "predicted_s": execute_json.get("predicted", {}).get("step_s"),
            "measured_s": execute_json.get("measured", {}).get("step_s"), "torch_s": torch_s,
            "layer_median_error": layer_median_error(execute_json), "memory_error": execute_json.get("memory_rel"),
            "check_passed": None if check is None else bool(check.get("passed"))}


def from_validate(row: Row, validate_json: dict, device: str, commit: str, date: str) -> list[dict]:
    """Validation rows (one per plan) from a `dnnplan validate --json` run."""
    out = []
    for plan in validate_json.get("plans", []):
        check = plan.get("check")
        out.append({"network": row.network, "batch": int(validate_json.get("batch", row.batch)),
                    "precision": row.precision, "ranks": int(validate_json.get("ranks", 2)), "device": device,
                    "commit": commit, "date": date, "mode": "eager", "predicted_s": plan.get("predicted_step_s"),
                    "measured_s": plan.get("measured_step_s"), "torch_s": None,
                    "layer_median_error": plan.get("layer_median_abs_rel"), "memory_error": plan.get("memory_rel"),
                    "check_passed": None if check is None else bool(check.get("passed"))})
    return out


def verdicts(row: dict) -> dict:
    """Each target of the issue met (True), missed (False) or not measured (None)."""
    def ok(value, test):
        return None if value is None else bool(test(value))
    step = None
    if row["predicted_s"] and row["measured_s"] is not None:
        step = row["measured_s"] / row["predicted_s"] - 1
    return {"step_error_under_10pct": ok(step, lambda v: abs(v) < 0.10),
            "layer_median_under_15pct": ok(row["layer_median_error"], lambda v: v < 0.15),
            "memory_within_10pct": ok(row["memory_error"], lambda v: abs(v) <= 0.10),
            "within_1_25x_torch": ok(None if row["torch_s"] is None or row["measured_s"] is None
                                     else row["measured_s"] / row["torch_s"], lambda v: v <= 1.25)}
