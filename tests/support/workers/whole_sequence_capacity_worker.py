"""``python -m tests.support.workers.whole_sequence_capacity_worker``: the executor's worker whose mixture of
experts over a split sequence gives each rank the capacity of the whole sequence rather than of its
own block of positions (the reference routes each block with its own), so that ``--check`` must
fail where the capacity drops rows."""

import sys

from executor.launch import worker
from executor.ops import moe
from kernels import moe as k


def _whole(ctx):
    e = ctx.p["experts"]
    s = ctx.layer.in_shapes[0][0]
    return e, e // ctx.strategy.degree("E"), k.capacity(ctx.p["capacity_factor"], s, ctx.p["top_k"], e)


moe._geometry = _whole

if __name__ == "__main__":
    sys.exit(worker.main())
