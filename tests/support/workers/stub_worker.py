"""``python -m tests.support.workers.stub_worker``: the executor's worker with the stand-in runtime.

Launcher tests run this module instead of ``executor.launch.worker`` (``executor.launch.mpiexec.WORKER_MODULE``):
the same entry point, argument parsing, barriers, gather and fault handling, with
:func:`tests.support.workers.stub_runtime.run_plan` in place of the real runtime.
"""

import sys

from executor.launch import worker

from tests.support.workers import stub_runtime

worker.run_plan = stub_runtime.run_plan

#: ``python -c`` code that does the same in a process that then runs dnnplan inside an MPI job.
PATCH = "import executor.launch.worker as w, tests.support.workers.stub_runtime as s; w.run_plan = s.run_plan"

if __name__ == "__main__":
    sys.exit(worker.main())
