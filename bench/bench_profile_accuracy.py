"""How accurate are profile tables? (issue 4: interpolation within 10%, comm fit within 15%).

(a) Interpolation: time a grid of GEMM (linear.fwd) and 3x3 conv (im2col, fwd) shapes, hold out
    every shape not on the coarse grid, predict the held-out shapes by interpolating the coarse
    ones, and compare with a fresh measurement of each: median and 90th-percentile |error|.
(b) Comm fit: measure every collective with 2 ranks over 8 B .. --max-bytes, fit the joint
    alpha-beta-gamma the cost model uses (and one per collective), report the median |error|.

    python bench/bench_profile_accuracy.py [--max-bytes 16777216] [--skip-comm]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from threadpoolctl import threadpool_limits  # noqa: E402

from costmodel.compute import Roofline  # noqa: E402
from costmodel.files import load_machine  # noqa: E402
from costmodel.kernel_calls import linear_call  # noqa: E402
from costmodel.profile_table import ProfileTable, ProfiledCompute  # noqa: E402
from profiler.collect import conv_grid  # noqa: E402
from profiler.fingerprint import fingerprint  # noqa: E402
from profiler.harness import TimingPolicy, time_call  # noqa: E402

POLICY = TimingPolicy(min_reps=5, max_reps=40, rel_ci=0.02, time_cap_s=1.5)


def _errors(train, held) -> list[float]:
    fp = fingerprint()
    entries = {c.key: time_call(c, policy=POLICY) for c in train}
    pc = ProfiledCompute(ProfileTable(fp, entries), Roofline(load_machine("local")))
    errs = []
    for c in held:
        fresh = time_call(c, policy=POLICY).median_s
        pred = pc.lookup(c)
        errs.append(abs(pred.seconds - fresh) / fresh)
    return errs


def gemm_case():
    coarse = (64, 128, 256, 512, 1024)
    fine = (96, 192, 384, 768)
    train = [linear_call("linear.fwd", m, k, n, False, "float32", 4) for m in coarse for k in coarse for n in coarse]
    held = [linear_call("linear.fwd", m, k, n, False, "float32", 4) for m in fine for k in fine for n in fine]
    return train, held


def conv_case():
    train = conv_grid([4, 16], [16, 32, 64, 128], [8, 16, 32], passes=("fwd", "bwd_data", "bwd_weights"))
    held = conv_grid([8], [24, 48, 96], [12, 24], passes=("fwd", "bwd_data", "bwd_weights"))
    return train, held


def _report(name, errs):
    errs = sorted(errs)
    p90 = errs[int(0.9 * (len(errs) - 1))]
    print(f"{name:<28} held-out {len(errs):3d}  median |err| {statistics.median(errs):6.1%}  p90 {p90:6.1%}  "
          f"max {errs[-1]:6.1%}")
    return statistics.median(errs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-bytes", type=int, default=16 * 2**20)
    ap.add_argument("--skip-comm", action="store_true")
    args = ap.parse_args()
    fp = fingerprint()
    print(f"machine: {fp['device']}, {fp['cores']} cores, numpy {fp['numpy']}, {fp['blas']}, 1 thread")
    with threadpool_limits(limits=1):
        _report("GEMM (linear.fwd) f32", _errors(*gemm_case()))
        _report("conv 3x3 im2col f32 (3 passes)", _errors(*conv_case()))
    if args.skip_comm:
        return
    from costmodel.comm_fit import COLLECTIVES
    from profiler.comm import comm_section, default_sizes, measure
    meas = measure(2, default_sizes(args.max_bytes), list(COLLECTIVES), cap_s=0.3)
    _, per, joint = comm_section(meas, 2)
    for c, f in per.items():
        print(f"comm fit {c:<15} median |err| {f.median_error:6.1%}  max {f.max_error:6.1%}")
    print(f"comm fit joint (fallback) median |err| {joint.median_error:6.1%}  max {joint.max_error:6.1%}")
    big = [abs(fv - m) / m for _, n, m, fv in joint.points if n >= 64 * 1024]
    print(f"comm fit joint, messages >= 64 KiB: median |err| {statistics.median(big):6.1%}")


if __name__ == "__main__":
    main()
