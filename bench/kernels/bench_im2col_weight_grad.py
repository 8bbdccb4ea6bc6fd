"""im2col's two weight-gradient forms, side by side (kernels.conv.im2col).

Per sample (one GEMM per sample, then a sum over the batch) against the batch folded into one GEMM,
on 3x3 'same' convolutions of lenet5, alexnet-like and ResNet-18 (64x64, 8 samples) shapes, one
BLAS thread, median of ``--repeats`` runs each, alternated. The ratio per-sample / folded is what
``PER_SAMPLE_MAX_ELEMS`` was chosen from: the kernel folds when the per-sample buffer
N*F*C/g*KH*KW exceeds it.

    python bench/kernels/bench_im2col_weight_grad.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from kernels.conv import im2col as conv_im2col  # noqa: E402
from kernels.conv import conv2d_backward_weights  # noqa: E402
from networks.ops.conv_geometry import make_geom  # noqa: E402

SHAPES = [  # (N, C, H=W, F, K): lenet5, alexnet and ResNet-18 at 64x64 layers, 'same' padding
    (256, 1, 32, 6, 5), (256, 6, 14, 16, 5), (256, 1, 32, 6, 3), (256, 6, 14, 16, 3),
    (2, 64, 27, 192, 5), (2, 96, 27, 256, 3), (2, 256, 13, 384, 3),
    (8, 64, 16, 64, 3), (8, 128, 8, 128, 3), (8, 256, 4, 256, 3), (8, 512, 2, 512, 3),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| N, C, HxW, F, KxK | per-sample buffer (elements) | per-sample | folded | per-sample / folded | kernel uses |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    with threadpool_limits(limits=1):
        for n, c, h, f, k in SHAPES:
            x = rng.standard_normal((n, c, h, h), dtype=np.float32)
            dy = rng.standard_normal((n, f, h, h), dtype=np.float32)
            times = {"per": [], "fold": []}
            for _ in range(args.repeats):
                for form, limit in (("per", 1 << 62), ("fold", 0)):
                    conv_im2col.PER_SAMPLE_MAX_ELEMS = limit
                    t = time.perf_counter()
                    conv2d_backward_weights(dy, x, (f, c, k, k), (1, 1), (k // 2,) * 4)
                    times[form].append(time.perf_counter() - t)
            conv_im2col.PER_SAMPLE_MAX_ELEMS = DEFAULT
            per, fold = statistics.median(times["per"]), statistics.median(times["fold"])
            buf = n * f * c * k * k
            uses = "per-sample" if conv_im2col.per_sample_weight_grads(
                make_geom((n, c, h, h), (f, c, k, k), (1, 1), (k // 2,) * 4, (1, 1), 1)) else "folded"
            print(f"| {n}, {c}, {h}x{h}, {f}, {k}x{k} | {buf} | {per * 1e3:.2f} ms | {fold * 1e3:.2f} ms | "
                  f"{per / fold:.2f} | {uses} |")


DEFAULT = conv_im2col.PER_SAMPLE_MAX_ELEMS

if __name__ == "__main__":
    main()
