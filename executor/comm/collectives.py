"""The collectives the runtime and ops make on a group, each after a barrier timed as ``wait``.

A collective's span measures the collective itself: the barrier just before it (:func:`wait_for`)
takes the time a rank waits for the slowest of its group (imbalance, noise), shown apart as the
layer's ``wait`` (docs/executor.md, "Waiting for other ranks"). Groups are
:class:`executor.backend.device.Communicator` objects; None stands for a group of this rank
alone, over which nothing moves.
"""

from __future__ import annotations

from executor.backend.device import Array, Communicator


def wait_for(sub: Communicator | None, timers=None, layer: str = "") -> None:
    """Barrier on ``sub`` (None: nothing), timed as ``wait`` so that waiting for a slower rank is
    not charged to the collective that follows; none while the timers record no span (a GPU's
    timed steps: the barrier would only cost the host time, executor.runtime.timers)."""
    if sub is None or (timers is not None and not timers.attributing):
        return
    if timers is None:
        sub.barrier()
        return
    with timers.span(layer, "wait"):
        sub.barrier()


def allreduce_(sub: Communicator | None, arr: Array, op: str = "sum") -> Array:
    """Sum (``op="max"``: take the maximum of) ``arr`` in place over the communicator ``sub``
    (None: nothing to do). Returns ``arr``."""
    if sub is None:
        return arr
    return sub.allreduce(arr, op)


def displacements(counts) -> list[int]:
    """Each part's offset in a buffer of consecutive parts of ``counts`` elements (MPI's displs)."""
    out, acc = [], 0
    for c in counts:
        out.append(acc)
        acc += c
    return out


def alltoall_(sub: Communicator, send: Array, recv: Array) -> None:
    """Rank ``k`` of ``sub`` receives the ``k``-th of ``sub.size`` equal consecutive parts of every
    rank's ``send``, in rank order, into ``recv`` (as large as ``send``): MPI's Alltoall."""
    part = send.size // sub.size
    counts = [part] * sub.size
    offsets = displacements(counts)
    sub.alltoallv(send.reshape(-1), counts, offsets, recv.reshape(-1), counts, offsets)
