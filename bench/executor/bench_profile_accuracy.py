"""How accurate are profile tables? (issue 4: interpolation within 10%, comm fit within 15%).

(a) Interpolation: time a grid of GEMM (linear.fwd) and 3x3 conv (im2col; fwd, bwd_data,
    bwd_weights) shapes, hold out every shape not on the coarse grid, predict the held-out shapes
    by interpolating the coarse ones, and compare with a fresh measurement of each: median and
    90th-percentile |error|, beside the noise of measuring each held-out shape twice
    (each call keeps the median of three shuffled passes: see _errors).
(b) Comm fit: measure every collective with 2 ranks over 8 B .. --max-bytes (powers of two, three
    rounds, fastest kept), in both cache states (warm, cold: profiler.comm.bench), fit each
    collective piecewise in size (costmodel.comm.fit.fit_regimes, what the cost model uses) and
    the joint one-line fallback; report the median |error| over the measured sizes, and out of
    sample: fitted on every other size, predicting the sizes between.

    python bench/executor/bench_profile_accuracy.py [--max-bytes 16777216] [--skip-comm]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from threadpoolctl import threadpool_limits  # noqa: E402

from costmodel.comm.fit import COLLECTIVES, MIN_POINTS, fit_all, fit_regimes, model_s  # noqa: E402
from costmodel.compute.roofline import Roofline  # noqa: E402
from costmodel.machine.loading import load_machine  # noqa: E402
from costmodel.calls.kernel_call import linear_call  # noqa: E402
from costmodel.compute.profile_table import ProfileTable  # noqa: E402
from costmodel.compute.profiled import ProfiledCompute  # noqa: E402
from profiler.collect import conv_grid  # noqa: E402
from profiler.comm.launch import default_sizes, measure  # noqa: E402
from profiler.tables.fingerprint import fingerprint  # noqa: E402
from profiler.timing.harness import TimingPolicy, time_call  # noqa: E402

VERBOSE = False
POLICY = TimingPolicy(min_reps=5, max_reps=40, rel_ci=0.02, time_cap_s=1.5)


def _errors(train, held, passes: int = 3) -> tuple[list[float], list[float]]:
    """|interpolated - fresh| / fresh per held-out call, and the noise floor.

    Every call, training and held-out alike, is timed in ``passes`` passes, each in its own
    shuffled order (seeded), and keeps the median of its passes: a slow spell of this shared VM
    lasts seconds and would otherwise show up as interpolation error. The noise
    floor is |pass 1 - pass 2| / kept, per held-out call: what one fresh measurement alone varies.
    The held-out calls' times are never seen by the interpolation."""
    fp = fingerprint()
    runs: dict[str, list] = {}
    for k in range(passes):
        order = list(train) + list(held)
        random.Random(k).shuffle(order)
        for c in order:
            runs.setdefault(c.key, []).append(time_call(c, policy=POLICY))
    best = {key: sorted(es, key=lambda e: e.median_s)[len(es) // 2] for key, es in runs.items()}
    pc = ProfiledCompute(ProfileTable(fp, {c.key: best[c.key] for c in train}), Roofline(load_machine("local")))
    errs, noise = [], []
    for c in held:
        fresh = best[c.key].median_s
        errs.append((pc.lookup(c).seconds - fresh) / fresh)
        if VERBOSE:
            print(f"  {c.kernel:<20} {str(c.shape[:5]):<24} measured {fresh * 1e3:8.3f} ms  interpolated "
                  f"{pc.lookup(c).seconds * 1e3:8.3f} ms  {errs[-1]:+6.1%}")
        noise.append(abs(runs[c.key][0].median_s - runs[c.key][-1].median_s) / fresh)
    return errs, noise


def gemm_case():
    coarse = (64, 128, 256, 512, 1024)
    fine = (96, 192, 384, 768)
    train = [linear_call("linear.fwd", m, k, n, False, "float32", 4) for m in coarse for k in coarse for n in coarse]
    held = [linear_call("linear.fwd", m, k, n, False, "float32", 4) for m in fine for k in fine for n in fine]
    return train, held


def conv_case():
    # Powers of two in every size, as the planner's splits make them; held out: the 1.5x points
    # between (3 * 2^k channels, as in googlenet; a batch of 6 or 12).
    train = conv_grid([4, 8, 16], [16, 32, 64, 128], [8, 16, 32], passes=("fwd", "bwd_data", "bwd_weights"))
    held = conv_grid([6, 12], [24, 48, 96], [12, 24], passes=("fwd", "bwd_data", "bwd_weights"))
    return train, held


def _report(name, result):
    errs, noise = sorted(abs(e) for e in result[0]), result[1]
    p90 = errs[int(0.9 * (len(errs) - 1))]
    print(f"{name:<30} held-out {len(errs):3d}  median |err| {statistics.median(errs):6.1%}  p90 {p90:6.1%}  "
          f"max {errs[-1]:6.1%}  bias {statistics.median(result[0]):+6.1%}  (re-measurement noise: median {statistics.median(noise):5.1%})")
    return statistics.median(errs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-bytes", type=int, default=16 * 2**20)
    ap.add_argument("--skip-comm", action="store_true")
    ap.add_argument("--only", choices=("gemm", "conv", "comm"), help="run one part")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every held-out call")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    fp = fingerprint()
    print(f"machine: {fp['device']}, {fp['cores']} cores, numpy {fp['numpy']}, {fp['blas']}, 1 thread")
    with threadpool_limits(limits=1):
        if args.only in (None, "gemm"):
            _report("GEMM (linear.fwd) f32", _errors(*gemm_case()))
        if args.only in (None, "conv"):
            _report("conv 3x3 im2col f32 (3 passes)", _errors(*conv_case()))
    if args.skip_comm or args.only in ("gemm", "conv"):
        return
    by_state = measure(2, default_sizes(args.max_bytes), list(COLLECTIVES), cap_s=0.3)
    for state, meas in by_state.items():  # warm (after a 4 MiB pass), cold (after the last-level cache)
        per, joint = fit_all(meas, 2)
        sizes = sorted({n for _, n, _ in meas})
        for c, f in per.items():
            # out of sample: fit every other size (regimes of >= MIN_POINTS - 1 of them), predict the rest
            ms = [m for m in meas if m[0] == c]
            half = fit_regimes([m for m in ms if sizes.index(m[1]) % 2 == 0], 2, min_points=MIN_POINTS - 1)
            links = half.regime_links
            out = [abs(model_s(c, n, 2, next(l for u, l in links if n <= u)) - t) / t
                   for _, n, t in ms if sizes.index(n) % 2 == 1]
            print(f"comm fit {state} {c:<15} {len(f.regimes)} regimes  median |err| {f.median_error:6.1%}  "
                  f"max {f.max_error:6.1%}   sizes held out: median |err| {statistics.median(out):6.1%}")
        print(f"comm fit {state} joint (fallback) median |err| {joint.median_error:6.1%}  max {joint.max_error:6.1%}")
        big = [abs(fv - m) / m for _, n, m, fv in joint.points if n >= 64 * 1024]
        print(f"comm fit {state} joint, messages >= 64 KiB: median |err| {statistics.median(big):6.1%}")


if __name__ == "__main__":
    main()
