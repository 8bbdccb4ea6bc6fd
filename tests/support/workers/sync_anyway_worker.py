"""``python -m tests.support.workers.sync_anyway_worker``: the executor's worker with batch norm that always
synchronises (its statistics all-reduced over the N split even when the plan says
``batch_norm: local``), so ``--check`` of a local plan must fail: the test that the reference
takes each rank's sample shard's statistics, not the whole batch's.
"""

import sys

from executor.launch import worker
from executor.ops import norm

norm.stat_dims = lambda ctx: norm.STAT_DIMS

if __name__ == "__main__":
    sys.exit(worker.main())
