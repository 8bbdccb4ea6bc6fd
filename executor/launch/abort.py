"""Ending the whole MPI job from one rank, after its message has had time to reach the launcher."""

from __future__ import annotations

import sys
import time

#: Seconds a failing rank waits after writing its message and before MPI_Abort: the launcher's
#: proxy forwards rank output through pipes and can be torn down by the abort before it has read
#: them (seen with MPICH's Hydra: the message of a failing rank lost in about 1 run in 50).
ABORT_GRACE_S = 0.3


def abort(comm, code: int) -> None:
    """Abort the whole job (``comm``: the launcher's mpi4py communicator) after giving the launcher
    time to forward this rank's output."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)
    comm.Abort(code)
