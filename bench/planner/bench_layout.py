"""How fast the layout algebra costs reshards: strategy pairs per second on one edge at p=1024.

Issue 3 asks for thousands of strategy pairs per edge at p=1024 in well under a second.
Run: python bench/planner/bench_layout.py
"""

import itertools
import platform
import time

from costmodel.parallel.layout import AxisSplit, Layout, reshard_volume
from costmodel.parallel.strategy import Strategy
from networks.ops.base import Window


def main(p: int = 1024) -> None:
    shape = (256, 256, 56, 56)  # a ResNet-50 layer1 activation at batch 256
    strats = [Strategy.of(p, N=n, H=h, F=f)
              for n in (1, 2, 4, 8, 16, 32, 64, 128, 256) for h in (1, 2, 4) for f in (1, 2, 4, 8)
              if p % (n * h * f) == 0]

    def split(s, dim, n, window=None):
        return AxisSplit(dim, s.degree(dim), n, window) if s.degree(dim) > 1 else None

    owns = [Layout(shape, s, (split(s, "N", 256), split(s, "F", 256), split(s, "H", 56), None)) for s in strats]
    needs = [Layout(shape, s, (split(s, "N", 256), None, split(s, "H", 56, Window(3, 1, 1, 1, 56)), None))
             for s in strats]
    for backward in (False, True):
        reshard_volume.cache_clear()
        start = time.perf_counter()
        pairs = 0
        for a, b in itertools.product(owns, needs):
            if backward:
                reshard_volume(b, a, True)
            else:
                reshard_volume(a, b)
            pairs += 1
        took = time.perf_counter() - start
        print(f"p={p} {'backward' if backward else 'forward '}: {pairs} strategy pairs in {took:.3f} s "
              f"({took / pairs * 1e6:.0f} µs per pair) on {platform.processor() or platform.machine()}")


if __name__ == "__main__":
    main()
