"""The H100 CNN steps' convolutions layer by layer: where their predicted time goes wrong.

    PYTHONPATH=. python bench/frameworks/bench_conv_layers.py [--json]

Two tables (docs/VALIDATION.md, "Convolutions layer by layer"), each from the per-layer prediction
of a PyTorch step under ``--framework pytorch`` (each row under the file as it ran, as
bench/frameworks/bench_framework_steps.py predicts it: the strict-fp32 row with ``float32_convolutions:
float32``, the channels-last rows with ``layout.convolutions: nhwc``):

* the one CNN row with PyTorch's kernels timed (bench/assets/h100_torch_steps_kernels.json):
  its kernels summed by the layer kind that ran them (by kernel name) beside the predicted time of
  that kind's layers;
* every eager CNN row: the convolutions' (and the classifier's) predicted time, the time the measured step leaves them (the
  step less everything the prediction puts elsewhere) and the rate that implies, from
  torchvision's MACs an image (:data:`CONV_GMACS`; FLOPs a step: three times the
  forward's).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_framework_steps import (ASSETS, as_run, file_data, framework_of, measured_rows,  # noqa: E402
                                  tag, written)  # (bench/ is not a package)
from costmodel.choices.training import TrainingChoices  # noqa: E402
from costmodel.frameworks.loading import load_framework  # noqa: E402
from executor.session import predict as predicting  # noqa: E402
from profiler import context  # noqa: E402

#: torchvision's multiply-adds an image (GMACs) in the convolutions and the classifier (the layers
#: of kind ``convolution`` here; torchvision's model tables: resnet50 4.09, vgg16 15.47)
CONV_GMACS = {"resnet50": 4.09, "vgg16": 15.47}
#: the layer kind a kernel ran for, by a piece of its name (first match wins; cuBLAS's ``nvjet``
#: kernels ran the 1x1 convolutions as GEMMs, and the classifier)
KERNEL_KINDS = (("batchnorm", "batch norm"), ("xmma", "convolution"), ("nvjet", "convolution"),
                ("splitKreduce", "convolution"), ("AddPadding", "convolution"), ("max_pool", "max pool"),
                ("CUDAFunctor_add<c10", "add"), ("threshold", "relu"), ("clamp", "relu"))


def layer_kind(name: str) -> str:
    """The kind of a ResNet-50 or VGG-16 layer (by its name in dnnplan's zoo)."""
    last = name.split(".")[-1]
    if "conv" in last or last in ("down", "fc", "fc8"):
        return "convolution"
    if "bn" in last:
        return "batch norm"
    if "relu" in last:
        return "relu"
    if last == "add":
        return "add"
    if last in ("maxpool", "pool"):
        return "max pool"
    return "rest"


def kernel_kind(name: str) -> str:
    return next((kind for piece, kind in KERNEL_KINDS if piece in name), "rest")


def layers(row: dict, folder: str):
    """(step seconds, {layer kind: seconds}) of ``row``'s prediction."""
    path = written(as_run(file_data(framework_of(row)), row), folder, tag(row))
    load_framework.cache_clear()
    choices = TrainingChoices.from_flags(precision=row["precision"], optimizer=row["optimizer"],
                                         framework=path, recompute="none")
    ctx = context.resolve(row["network"], 1, row["batch"], row["machine"], None, choices=choices,
                          network_defaults=True)
    pred = predicting.step(ctx, predicting.LayerSplits()).prediction
    kinds: dict[str, float] = {}
    for row_ in pred.layers:
        e = row_.layer
        kind = layer_kind(e.name)
        kinds[kind] = kinds.get(kind, 0.0) + e.fwd_compute_s + e.bwd_compute_s
    kinds["rest"] = kinds.get("rest", 0.0) + pred.update_s  # the optimiser's kernels
    return pred.step_s, kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    timed = {r["name"]: r for r in json.loads((ASSETS / "h100_torch_steps_kernels.json").read_text())["rows"]
             if r.get("kernels") and r["network"] in CONV_GMACS}
    out = {"kernels": [], "convolutions": []}
    with tempfile.TemporaryDirectory() as folder:
        for row in measured_rows():
            if row["network"] not in CONV_GMACS or framework_of(row) != "pytorch" or row["machine"] != "dgx-h100":
                continue  # the H100's rows (the H200's are in bench_framework_steps' table)
            step_s, kinds = layers(row, folder)
            measured = sum(row["runs_s"]) / len(row["runs_s"])
            conv = kinds.get("convolution", 0.0)
            left = measured - (step_s - conv)
            flops = 3 * 2 * CONV_GMACS[row["network"]] * 1e9 * row["batch"]
            out["convolutions"].append({"row": row["name"], "predicted_s": conv, "left_s": left,
                                        "implied_flops_per_s": flops / left})
            if row["name"] in timed:
                got: dict[str, float] = {}
                for name, _count, seconds in timed[row["name"]]["kernels"]:
                    got[kernel_kind(name)] = got.get(kernel_kind(name), 0.0) + seconds
                out["kernels"] += [{"row": row["name"], "kind": k, "measured_s": got.get(k, 0.0),
                                    "predicted_s": kinds.get(k, 0.0)} for k in sorted(set(got) | set(kinds))]
    if args.json:
        print(json.dumps(out, indent=1))
        return
    for r in out["kernels"]:
        print(f"{r['row']:22s} {r['kind']:12s} measured {r['measured_s'] * 1e3:6.2f} ms  "
              f"predicted {r['predicted_s'] * 1e3:6.2f} ms")
    print()
    for r in out["convolutions"]:
        print(f"{r['row']:22s} convolutions predicted {r['predicted_s'] * 1e3:6.1f} ms  the step leaves "
              f"{r['left_s'] * 1e3:6.1f} ms  {r['implied_flops_per_s'] / 1e12:5.0f} TFLOP/s")


if __name__ == "__main__":
    main()
