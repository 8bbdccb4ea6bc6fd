"""The cores an MPI job may use on each node, agreed between its ranks.

A launcher often binds each rank to its own cores (Open MPI's ``mpirun`` binds to a core when it
starts two ranks or fewer; Slurm's task affinity does the same), so one rank's CPU affinity is
its share, not the node's. Machine ``local`` sizes itself by the cores it sees
(``devices_per_node: auto``), and the profile's fingerprint records them, so every rank must see
the same node-wide figure as the ``dnnplan`` process that made the plan: the union of the
affinities of the job's ranks on this node. :func:`share_node_cores` computes it and publishes it
in :data:`costmodel.machine.loading.NODE_CORES_ENV`, which :func:`costmodel.machine.loading.usable_cores` reads.
"""

from __future__ import annotations

import os

from costmodel.machine.loading import NODE_CORES_ENV


def own_cores() -> frozenset[int]:
    """The CPUs this process may run on (all of them where affinity is unknown)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return frozenset(range(os.cpu_count() or 1))


def node_cores(per_rank: list[frozenset[int]]) -> int:
    """How many CPUs the ranks of one node may run on together."""
    return len(frozenset().union(*per_rank)) if per_rank else 0


def share_node_cores(comm) -> int:
    """Agree on this node's cores with the other ranks on it (a collective over ``comm``) and
    publish the count for :func:`costmodel.machine.loading.usable_cores`; returns it."""
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        count = node_cores(local.allgather(own_cores()))
    finally:
        local.Free()
    os.environ[NODE_CORES_ENV] = str(count)
    return count
