"""``python -m tests.support.workers.skip_context_sum_worker``: the executor's worker whose attention over a
split sequence keeps each rank's own share of its keys' and values' gradients, without the other
ranks' (no reduce-scatter over the sequence group), so that ``--check`` must fail."""

import sys

from executor.launch import worker
from executor.ops import attention_context


def _own_share(ctx, grads):
    a, b = attention_context._blocks(ctx)[ctx.coord("H")]
    full = ctx.xp.zeros((grads.shape[0], ctx.layer.in_shapes[0][0], grads.shape[2]), dtype=grads.dtype)
    full[:, :grads.shape[1]] = grads
    return ctx.xp.ascontiguousarray(full[:, a:b])


attention_context.scatter = _own_share

if __name__ == "__main__":
    sys.exit(worker.main())
