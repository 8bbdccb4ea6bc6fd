"""``python -m tests.support.workers.skip_moe_gqa_sums_worker``: the executor's worker with two broken
decompositions of issue 52's ops, so that ``--check`` must fail:

- the mixture of experts' all-to-all keeps each rank's own buffer (no exchange over the expert
  group: every rank runs its experts on rows routed to others' experts);
- grouped-query attention skips the sum of a replicated key/value head's gradient over its replicas
  (a head split above ``kv_heads``).
"""

import sys

from executor.launch import worker
from executor.ops import attention, moe


def _keep_own(sub, send, recv):
    recv.reshape(-1)[:] = send.reshape(-1)


moe.alltoall_ = _keep_own
attention._sum_over_replicas = lambda ctx, grads: None

if __name__ == "__main__":
    sys.exit(worker.main())
