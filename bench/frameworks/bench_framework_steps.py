"""Steps measured on one H100 or H200 against predictions under the framework that ran them.

    PYTHONPATH=. python bench/frameworks/bench_framework_steps.py [--json] [--fit]

PyTorch's 18 measured steps (bench/assets/h100_torch_steps*.json, read as bench/frameworks/bench_gpu_steps.py
reads them) are each predicted as ``dnnplan predict NETWORK -p 1 -b B --machine dgx-h100 --precision
P --optimizer O --attention A --framework F``: ``F`` is ``pytorch`` for the eager steps and
``pytorch-compile`` for the compiled ones; ``A`` is ``materialized`` for the steps that computed
attention unfused and ``flash`` for those with PyTorch's fused attention (``sdpa``). The fp32 rows
ran with TF32 off for convolutions too (bench/gpu/torch_steps.py sets
``torch.backends.cudnn.allow_tf32 = False``), not PyTorch's default: they are predicted under a
copy of the shipped file that says so (``precision.float32_convolutions: float32``), passed by
path as a user would; the rows that moved their model to channels last (layout ``channels_last``)
likewise under a copy with ``layout.convolutions: nhwc`` (PyTorch's default, and the shipped
file's, is NCHW).

dnnplan's own GPU rows (bench/assets/gpu-validation.json: `dnnplan execute` on one H200, its plan
from the GPU profile shipped in profiler/profiles) are predicted with that profile under
``--framework dnnplan`` (the rows run eagerly) or ``--framework dnnplan-graphs`` (the rows whose
steps were replayed as a CUDA graph: mode ``graphs``; nothing in that file is fitted).

Memory: each PyTorch row recorded ``torch.cuda.max_memory_allocated`` over its timed steps (the
tensors' peak, no CUDA context, no allocator reserve): it is held against the predicted
``memory_allocated_bytes``, calibration and held-out rows apart. No row recorded the reserved peak
(``torch.cuda.max_memory_reserved``), so the framework files' reserve terms (``memory``) stay
assumed; the predicted reserved peak is listed beside.

The frameworks' values marked ``fitted`` were fitted on the rows :data:`CALIBRATION` names (at most
half of each source); the others are held out and reported apart. ``--fit`` runs that fit again
(coordinate descent on the mean squared relative error of the calibration rows, over the values
:data:`FITTED` lists) and prints the values to write into the framework files.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from costmodel.choices.training import TrainingChoices  # noqa: E402
from networks.errors import DnnplanError  # noqa: E402
from costmodel.frameworks.loading import load_framework  # noqa: E402
from executor.session import predict as predicting  # noqa: E402
from profiler import context  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = ROOT / "costmodel" / "frameworks"
ASSETS = ROOT / "bench" / "assets"
GPU_ROWS = ASSETS / "gpu-validation.json"
#: every session's PyTorch steps by card (a row timed in several sessions: the mean of their medians)
TORCH_STEPS = {"h100": ("h100_torch_steps.json", "h100_torch_steps_kernels.json", "h100_torch_steps_compiled.json",
                        "h100_torch_steps_prove1.json", "h100_torch_steps_prove2.json"),
               "h200": ("h200_torch_steps_prove_a.json", "h200_torch_steps_prove_b.json")}
#: the machine each card is priced on
MACHINES = {"h100": "dgx-h100", "h200": "dgx-h200"}
#: the networks, batches and precisions the shipped GPU profiles timed (profiler/profiles/CARD-*.json),
#: which price dnnplan's own rows
PROFILED = {"h100": {("resnet50", 64, "tf32"), ("resnet50", 64, "bf16"), ("gpt2", 8, "bf16")},
            "h200": {("resnet50", 64, "tf32"), ("resnet50", 64, "bf16"), ("gpt2", 8, "bf16"), ("vgg16", 64, "tf32")}}
#: the proof's calls on H200s (bench/gpu/prove.sh, 2026-12-04): two machines, by the commit each ran
GPU_CALLS = {"9ec40e6": "A", "8fa0d9d": "B", "c6741d5": "C"}
#: the rows each framework's fitted values were fitted on (at most half of each source's rows)
CALIBRATION = {
    "pytorch": ("gpt2-b8-bf16", "gpt2-b16-fp16", "resnet50-b256-fp16", "resnet50-b128-tf32",
                "resnet50-b64-tf32-sgd", "gpt2-b8-bf16-sdpa"),
    "pytorch-compile": ("gpt2-b8-bf16-compiled", "resnet50-b256-fp16-compiled"),
    "dnnplan": ("resnet50-b64-tf32 B", "gpt2-b8-bf16 B"),
    "dnnplan-graphs": (),
}
#: the values ``--fit`` fits per framework (dotted keys of its file; ``a|b``: one value for both)
FITTED = {
    "pytorch": ("kernels.attention.materialized.device", "kernels.attention.materialized.passes",
                "kernels.attention.flash.device", "kernels.linear.device",
                "unaligned_gemm", "kernels.conv2d.device", "kernels.conv2d.peak_fraction",
                "layout.transposes", "kernels.batchnorm2d.device",
                "host.op_s"),
    "pytorch-compile": ("kernels.linear.device",
                        "kernels.relu.device|kernels.add.device|kernels.dropout.device|kernels.gelu.device"),
    "dnnplan": ("host.op_s",),
}


def measured_rows() -> list[dict]:
    """Every measured PyTorch row once per card, with each session's median (an H200 row's name
    says so); priced from the machine's datasheet (no profile: dnnplan's kernels are not PyTorch's)."""
    rows: dict[str, dict] = {}
    for card, files in TORCH_STEPS.items():
        for name in files:
            for r in json.loads((ASSETS / name).read_text())["rows"]:
                if "median_s" in r:
                    key = r["name"] if card == "h100" else f"{r['name']} {card}"
                    row = rows.setdefault(key, {k: r[k] for k in ("network", "batch", "precision", "optimizer",
                                                                  "layout")} | {"name": key, "runs_s": [],
                                                                                "machine": MACHINES[card]})
                    row["runs_s"].append(r["median_s"])
                    row["peak_memory_bytes"] = r["peak_memory_bytes"]
    return list(rows.values())


def _profile(card: str, r: dict) -> str | None:
    """The shipped table that timed the row's kernels, None where the datasheet prices them."""
    return f"{card}-{r['precision']}" if (r["network"], r["batch"], r["precision"]) in PROFILED[card] else None


def framework_of(row: dict) -> str:
    return "pytorch-compile" if row["layout"].endswith("+compile") else "pytorch"


def file_data(name: str) -> dict:
    return yaml.safe_load((FRAMEWORKS / f"{name}.yaml").read_text())


def written(data: dict, folder: str, tag: str) -> str:
    """``data`` written as a framework file in ``folder`` (a path for --framework)."""
    path = Path(folder) / f"{data['name']}-{tag}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def strict_fp32(data: dict) -> dict:
    """The file with float32 convolutions off TF32 (as the fp32 rows ran)."""
    return {**data, "precision": {**data.get("precision", {}), "float32_convolutions": "float32"}}


def as_run(data: dict, row: dict) -> dict:
    """The file as ``row`` ran: float32 convolutions off TF32 in the fp32 rows (:func:`strict_fp32`),
    convolutions in channels last where the row moved its model there (its layout
    ``channels_last``; PyTorch's default is NCHW)."""
    if row["precision"] == "fp32":
        data = strict_fp32(data)
    if row["layout"].startswith("channels_last"):
        data = {**data, "layout": {**data.get("layout", {}), "convolutions": "nhwc"}}
    return data


def tag(row: dict) -> str:
    return "-".join(filter(None, ("fp32" if row["precision"] == "fp32" else "run",
                                  "nhwc" if row["layout"].startswith("channels_last") else "")))


def predict_row(row: dict, framework: str) -> dict:
    attention = "flash" if row["layout"].startswith("sdpa") else "materialized"
    is_gpt = row["network"].startswith("gpt")
    choices = TrainingChoices.from_flags(precision=row["precision"], optimizer=row["optimizer"],
                                         attention=attention if is_gpt else None, framework=framework,
                                         recompute="none")
    ctx = context.resolve(row["network"], 1, row["batch"], row["machine"], row.get("profile"), choices=choices,
                          network_defaults=True)
    pred = predicting.step(ctx, predicting.LayerSplits()).prediction
    return {"predicted_s": pred.step_s, "host_s": pred.host_s, "host_bound": len(pred.host_bound),
            "layers": len(pred.layers), "predicted_memory_bytes": pred.memory_peak_bytes,
            "predicted_allocated_bytes": pred.memory_allocated_bytes,
            "predicted_reserved_bytes": pred.memory_reserved_bytes}


def torch_rows(files: dict[str, dict], folder: str) -> list[dict]:
    """Each PyTorch row predicted under its framework (``files``: each framework's file data)."""
    out = []
    for row in measured_rows():
        fw = framework_of(row)
        path = written(as_run(files[fw], row), folder, tag(row))
        load_framework.cache_clear()
        measured = sum(row["runs_s"]) / len(row["runs_s"])
        got = predict_row(row, path)
        memory = row.get("peak_memory_bytes")
        out.append({**row, "framework": fw, "measured_s": measured, **got,
                    "error": got["predicted_s"] / measured - 1, "calibration": row["name"] in CALIBRATION[fw],
                    "memory_error": got["predicted_allocated_bytes"] / memory - 1 if memory else None})
    return out


def dnnplan_rows(files: dict[str, dict], folder: str) -> list[dict]:
    """dnnplan's own GPU rows (gpu-validation.json) predicted from the shipped GPU profile, each under
    its mode's framework (``files``: the data of ``dnnplan`` and ``dnnplan-graphs``)."""
    paths = {fw: written(data, folder, "run") for fw, data in files.items()}
    load_framework.cache_clear()
    out = []
    for r in json.loads(GPU_ROWS.read_text()):
        card = "h200" if "H200" in r["device"] else "h100"
        graphs = r.get("mode") == "graphs"
        fw = "dnnplan-graphs" if graphs else "dnnplan"
        name = (f"{r['network']}-b{r['batch']}-{r['precision']} {GPU_CALLS.get(r['commit'], r['commit'])}"
                + (" graphs" if graphs else ""))
        row = {"name": name, "network": r["network"], "batch": r["batch"], "precision": r["precision"],
               "optimizer": "momentum", "layout": "sdpa" if r["network"].startswith("gpt") else "",
               "machine": MACHINES[card], "profile": _profile(card, r)}
        got = predict_row(row, paths[fw])
        out.append({**row, "framework": fw, "measured_s": r["measured_s"], **got,
                    "error": got["predicted_s"] / r["measured_s"] - 1, "calibration": name in CALIBRATION[fw]})
    return out


def at_most_half(rows: list[dict]) -> None:
    """The rule the fit keeps: at most half of each framework's rows on each machine are calibration
    rows (a CALIBRATION list grown past it stops the bench, naming the framework and machine)."""
    groups: dict[tuple[str, str], list[bool]] = {}
    for r in rows:
        groups.setdefault((r["framework"], r["machine"]), []).append(r["calibration"])
    for (fw, machine), flags in sorted(groups.items()):
        if 2 * sum(flags) > len(flags):
            raise SystemExit(f"{fw} on {machine}: {sum(flags)} of its {len(flags)} rows are calibration rows, over "
                             "half (CALIBRATION in this file)")


def dnnplan_files(dnnplan: dict | None = None) -> dict[str, dict]:
    """The data of the two dnnplan framework files: ``dnnplan`` (a trial of ``--fit``) in place of the
    shipped ``dnnplan.yaml`` where given."""
    return {"dnnplan": dnnplan or file_data("dnnplan"), "dnnplan-graphs": file_data("dnnplan-graphs")}


def summary(rows: list[dict]) -> dict:
    out = {}
    for what, key in (("", "error"), ("memory ", "memory_error")):
        for fw in sorted({r["framework"] for r in rows}):
            for part, flag in (("calibration", True), ("held out", False)):
                errs = [abs(r[key]) for r in rows if r["framework"] == fw and r["calibration"] == flag
                        and r.get(key) is not None]
                if errs:
                    out[f"{what}{fw} {part}"] = {"rows": len(errs), "mean_abs_error": sum(errs) / len(errs),
                                                 "worst_abs_error": max(errs)}
    return out


def _get(data: dict, key: str):
    node = data
    for part in key.split(".")[:-1]:
        node = node[part]
    last = key.split(".")[-1]
    value = node.get(last, 1.0 if last == "device" or key == "unaligned_gemm" else 0.0)
    return value["value"] if isinstance(value, dict) else value


def _set(data: dict, key: str, value: float) -> dict:
    out = json.loads(json.dumps(data))
    node = out
    parts = key.split(".")
    if parts[0] == "kernels" and len(parts) == 4:  # kernels.attention.flash.device
        parts = ["kernels", f"{parts[1]}.{parts[2]}", parts[3]]
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    old = node.get(parts[-1])
    node[parts[-1]] = {**old, "value": value} if isinstance(old, dict) else value
    return out


def fit(name: str, folder: str) -> dict:
    """Coordinate descent over :data:`FITTED` ``name``'s values on its calibration rows."""
    data = file_data(name)

    def loss(d: dict) -> float:
        try:
            return _loss(d)
        except DnnplanError:  # a value out of its range: not a candidate
            return float("inf")

    def _loss(d: dict) -> float:
        rows = ([r for r in dnnplan_rows(dnnplan_files(dnnplan=d), folder) if r["framework"] == name]
                if name == "dnnplan" else
                [r for r in torch_rows({name: d, **{k: file_data(k) for k in ("pytorch", "pytorch-compile")
                                                     if k != name}}, folder) if r["framework"] == name])
        errs = [r["error"] for r in rows if r["calibration"]]
        return sum(e * e for e in errs) / len(errs)

    best = loss(data)
    for _ in range(3):
        for key in FITTED[name]:
            now = _get_fitted(data, key.split("|")[0])
            for scale in (0.5, 0.7, 0.85, 0.93, 1.07, 1.18, 1.4, 2.0):
                trial = data
                for one in key.split("|"):
                    trial = _set(trial, one, max(now * scale, 1e-7) if now else 1e-6 * scale)
                got = loss(trial)
                if got < best:
                    best, data = got, trial
        print(f"{name}: mean squared relative error {best:.5f}", file=sys.stderr)
    return {key: _get_fitted(data, key.split("|")[0]) for key in FITTED[name]}


def _get_fitted(data: dict, key: str) -> float:
    parts = key.split(".")
    if parts[0] == "kernels" and len(parts) == 4:
        entry = data.get("kernels", {}).get(f"{parts[1]}.{parts[2]}", {})
        default = data.get("kernels", {}).get("default", {}).get("device", 1.0) if parts[3] == "device" else 0.0
        value = entry.get(parts[3], default)
        return value["value"] if isinstance(value, dict) else value
    return _get(data, key)


def render(rows: list[dict], summ: dict) -> str:
    lines = [f"{'row':30s} {'framework':16s} {'set':5s} {'measured':>9s} {'predicted':>10s} {'error':>7s} "
             f"{'host':>8s} {'host-bound':>10s} {'allocated':>9s} {'predicted':>9s} {'error':>7s} {'reserved':>8s}"]
    gib = 2 ** 30
    for r in rows:
        memory = (f" {r['peak_memory_bytes'] / gib:7.2f}GiB {r['predicted_allocated_bytes'] / gib:7.2f}GiB "
                  f"{r['memory_error']:+7.1%} {r['predicted_reserved_bytes'] / gib:6.2f}GiB"
                  if r.get("memory_error") is not None else "")
        lines.append(f"{r['name']:30s} {r['framework']:16s} {'cal' if r['calibration'] else 'held':5s} "
                     f"{r['measured_s'] * 1e3:7.1f}ms {r['predicted_s'] * 1e3:8.1f}ms {r['error']:+7.1%} "
                     f"{r['host_s'] * 1e3:6.1f}ms {r['host_bound']:4d}/{r['layers']:<4d}{memory}")
    lines.append("")
    for key, s in summ.items():
        lines.append(f"{key:28s} rows {s['rows']:2d}  mean |error| {s['mean_abs_error']:6.1%}  "
                     f"worst {s['worst_abs_error']:6.1%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--fit", nargs="*", metavar="FRAMEWORK", help="fit the FITTED values of these frameworks "
                    "(all when none named) on their calibration rows again")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.fit is not None:
            print(json.dumps({name: fit(name, folder) for name in (args.fit or FITTED)}, indent=1))
            return
        rows = torch_rows({k: file_data(k) for k in ("pytorch", "pytorch-compile")}, folder)
        rows += dnnplan_rows(dnnplan_files(), folder)
    at_most_half(rows)
    summ = summary(rows)
    print(json.dumps({"rows": rows, "summary": summ}, indent=1) if args.json else render(rows, summ))


if __name__ == "__main__":
    main()
