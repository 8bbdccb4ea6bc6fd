"""``python -m tests.support.workers.skip_allreduce_worker``: the executor's worker with a broken decomposition.

Every allreduce over the filter dimension F alone is left out (the input gradient of a
filter-split layer is then one rank's partial sum), so ``--check`` must fail: the test that the
check catches a wrong distributed step.
"""

import sys

from executor.launch import worker
from executor.ops.base import LayerCtx

_allreduce = LayerCtx.allreduce


def _skipping_f(self, arr, dims, phase):
    return arr if "".join(dims) == "F" else _allreduce(self, arr, dims, phase)


LayerCtx.allreduce = _skipping_f

if __name__ == "__main__":
    sys.exit(worker.main())
