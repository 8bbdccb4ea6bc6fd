"""``python -m tests.support.workers.skip_rotary_backward_worker``: the executor's worker with the attention's
backward leaving out the inverse rotation of the query and key gradients (the rotation's forward
kept), so that ``--check`` must fail."""

import sys

from executor.launch import worker
from executor.ops import attention

attention.rotary_backward = lambda dy, dh, start=0: dy

if __name__ == "__main__":
    sys.exit(worker.main())
