"""Point-to-point messages between pipeline stages (executor.runtime.pipeline).

A tensor one stage sends another goes from rank ``i`` of the sending stage to rank ``i`` of the
receiving one, as that rank's owned block: one message per tensor and micro-batch forward, its
gradient back. Sends are non-blocking, each buffer kept until it has left (:meth:`let_go`, after
every forward and backward; :meth:`finish` waits for the rest at the end of the step); receives
block. Each receive is the ``wait`` phase of the stage's pseudo-layer (the bubble and the
transfer are not told apart), each send ``fwd_comm`` or ``bwd_comm``.
"""

from __future__ import annotations

from executor.backend.device import Array, Communicator
from networks.errors import DnnplanError

TAG_LIMIT = 32767  # the largest tag MPI guarantees (MPI_TAG_UB is at least this)


class StageMessages:
    """Rank ``i`` of stage ``s``'s messages to and from rank ``i`` of the other stages, over
    ``comm`` (every rank of the plan; stage ``q``'s rank ``i`` is rank ``q * d + i`` there), of
    the stage-crossing tensors ``names`` (in network order), ``micro_batches`` of each a step."""

    def __init__(self, comm: Communicator, xp, d: int, i: int, names: list[str], micro_batches: int,
                 timers, label: str):
        self.comm, self.xp, self.d, self.i, self.timers, self.label = comm, xp, d, i, timers, label
        self.tag_of = {name: t for t, name in enumerate(names)}
        if 2 * micro_batches * max(len(names), 1) > TAG_LIMIT:
            raise DnnplanError(f"{micro_batches} micro-batches of {len(names)} stage-crossing tensors need more MPI "
                               "tags than MPI promises", hint="use fewer --micro-batches")
        self.pending: list = []

    def _tag(self, name: str, j: int, backward: bool) -> int:
        return (2 * j + int(backward)) * len(self.tag_of) + self.tag_of[name]

    def recv(self, name: str, shape: tuple[int, ...], j: int, peer_stage: int, backward: bool) -> Array:
        """Micro-batch ``j``'s ``name`` (its gradient when ``backward``) from stage ``peer_stage``."""
        buf = self.xp.empty(shape, dtype=self.xp.float32)
        with self.timers.span(self.label, "wait"):
            self.comm.recv(buf, peer_stage * self.d + self.i, self._tag(name, j, backward))
        return buf

    def send(self, arr: Array, name: str, j: int, peer_stage: int, backward: bool) -> None:
        """Start sending micro-batch ``j``'s ``name`` (its gradient when ``backward``) to stage ``peer_stage``."""
        buf = self.xp.ascontiguousarray(arr, dtype=self.xp.float32)
        with self.timers.span(self.label, "bwd_comm" if backward else "fwd_comm"):
            req = self.comm.isend(buf, peer_stage * self.d + self.i, self._tag(name, j, backward))
        self.pending.append((req, buf))

    def let_go(self) -> None:
        """Drop the buffers of the messages that have left."""
        self.pending[:] = [(req, buf) for req, buf in self.pending if not req.test()]

    def finish(self) -> None:
        """Wait for every message still in flight (timed as ``wait``)."""
        if self.pending:
            with self.timers.span(self.label, "wait"):
                self.comm.wait_all([req for req, _ in self.pending])
        self.pending.clear()
