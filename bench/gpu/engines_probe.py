"""cuDNN's engines of a few convolutions, every one timed: which engines each family's note filter
keeps (kernels.cuda.engines), and whether the top-k pruning of the profiler
(kernels.cuda.conv: the fastest of the heuristics' first TOP_K) finds the family's fastest.

    python bench/gpu/engines_probe.py --out engines.json     (on a GPU, nvidia-cudnn-frontend 1.16)

The shapes are the H100 probe's (../shared/gpu-probe/RESULTS.md): (N, C, H, W, F, K) with 'same'
padding, stride 1. Per (shape, precision, pass, family): every plan cuDNN lists, in the heuristics'
order, with its workspace and median time (or why it did not build); the top-k choice and the best.
The family lists are the data the CPU tests' engine fixtures can be checked against.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

from kernels.cuda import libs  # noqa: E402
from kernels.cuda.conv import _build  # noqa: E402
from kernels.cuda.cudnn_graphs import execute  # noqa: E402
from kernels.cuda.engines import FAMILIES, TOP_K, family_filter  # noqa: E402
from kernels.cuda.launch import from_float32  # noqa: E402
from kernels.cuda.precision import set_precision, storage_of  # noqa: E402
from kernels.xp import storage_dtype  # noqa: E402
from networks.ops.conv_geometry import make_geom  # noqa: E402

SHAPES = ((64, 256, 14, 14, 256, 3), (64, 64, 56, 56, 64, 3), (64, 1024, 14, 14, 256, 1))
PRECISIONS = ("fp32", "tf32", "bf16")


def _rand(cp, shape, dtype):
    return from_float32(cp.random.standard_normal(shape, dtype=cp.float32) * 0.1, storage_dtype(dtype))


def _time(graph, tensors, index, cp, reps: int = 5) -> float:
    execute(graph, tensors, index)
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        execute(graph, tensors, index)
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return statistics.median(out)


def probe(shape, precision: str, pass_: str, family: str) -> dict:
    cp = libs.cupy()
    n, c, h, w, f, k = shape
    dtype = storage_of(precision)
    g = make_geom((n, c, h, w), (f, c, k, k), 1, k // 2, 1, 1)
    x, wt, y = (_rand(cp, s, dtype) for s in ((n, c, h, w), (f, c, k, k), (n, f, g.ho, g.wo)))
    graph, tensors = _build(pass_, g, dtype, family_filter(family, precision))
    arrays = {"fwd": (x, wt, y), "bwd_data": (y, wt, x), "bwd_weights": (x, y, wt)}[pass_]
    plans, built = [], 0
    for i in range(graph.get_execution_plan_count()):
        name = graph.get_plan_name_at_index(i)
        try:
            graph.build_plan_at_index(i)
        except Exception as err:  # noqa: BLE001 - barred by the filter, or not buildable
            plans.append({"index": i, "name": name, "built": False, "why": str(err)[:80]})
            continue
        ws = int(graph.get_workspace_size_plan_at_index(i))
        t = _time(graph, dict(zip(tensors, arrays)), i, cp)
        plans.append({"index": i, "name": name, "built": True, "order": built, "workspace_bytes": ws, "seconds": t})
        built += 1
    ran = [p for p in plans if p["built"]]
    best = min(ran, key=lambda p: p["seconds"], default=None)
    topk = min((p for p in ran if p["order"] < TOP_K), key=lambda p: p["seconds"], default=None)
    return {"shape": shape, "precision": precision, "pass": pass_, "family": family, "plans": plans,
            "best": best and best["name"], "top_k_choice": topk and topk["name"],
            "top_k_over_best": (topk["seconds"] / best["seconds"]) if best and topk else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    results = []
    for precision in PRECISIONS:
        set_precision(precision)
        for shape in SHAPES:
            for pass_ in ("fwd", "bwd_data", "bwd_weights") if shape == SHAPES[0] else ("fwd",):
                for family in FAMILIES:
                    try:
                        results.append(probe(shape, precision, pass_, family))
                    except Exception as err:  # noqa: BLE001 - one family without engines must not stop the rest
                        results.append({"shape": shape, "precision": precision, "pass": pass_, "family": family,
                                        "error": f"{type(err).__name__}: {err}"[:300]})
                        traceback.print_exc()
                    r = results[-1]
                    print(json.dumps({k: r.get(k) for k in ("shape", "precision", "pass", "family", "best",
                                                            "top_k_choice", "top_k_over_best", "error")}), flush=True)
                    with open(args.out, "w") as fh:
                        json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
