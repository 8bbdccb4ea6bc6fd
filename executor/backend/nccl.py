"""Collectives of GPU ranks over NCCL (``cupy.cuda.nccl``), on each rank's stream
(executor.backend.device.Communicator).

A communicator is made collectively: rank 0 of the group asks NCCL for a unique id and the id is
broadcast over the group's host (MPI) communicator; every member then joins with its rank in the
group. :meth:`NcclCommunicator.split` makes the MPI sub-communicator first (the same colours and
keys as MPI's split) and a new NCCL communicator over it, so each group of a plan
(executor.comm.groups) is one NCCL communicator, and its ranks are the MPI sub-communicator's.

Mapping of the interface onto NCCL:

- ``allreduce``: ``ncclAllReduce`` in place; ``allgather``: ``ncclAllGather`` in place when every
  rank gives the same count at consecutive offsets, else grouped sends and receives;
  ``reduce_scatter``: ``ncclReduceScatter`` for equal counts, else an allreduce of a copy and this
  rank's part of it;
- ``alltoallv`` (reshards and halos): one ``ncclGroupStart``/``ncclGroupEnd`` of a ``ncclSend`` and a
  ``ncclRecv`` per peer with anything to move (this rank's own piece a device copy);
- ``isend``/``recv`` (pipeline stages) and the ``*_object`` calls go through the host: a stage's
  non-blocking send must not wait for its receiver, which an unmatched ``ncclSend`` would;
- ``barrier``: the host's (the runtime synchronises the stream before a step's barrier).

Every call is enqueued on the rank's stream; nothing here synchronises it (the backend's clock
does, at each span's end).
"""

from __future__ import annotations

from executor.backend.device import Communicator
from executor.backend.staging import HostObjects, StagedCommunicator
from kernels.cuda.precision import NCCL_DATA_TYPE

SUM, MAX = 0, 2


class NcclCommunicator(HostObjects):
    """An NCCL communicator over the ranks of ``host`` (a host Communicator of the same group)."""

    def __init__(self, host: Communicator, nccl, stream_ptr: int, staging: StagedCommunicator):
        self.host, self.nccl, self.stream = host, nccl, int(stream_ptr)
        self.rank, self.size = host.rank, host.size
        self.staging = staging  # the host path of isend/recv
        uid = nccl.get_unique_id() if host.rank == 0 else None
        uid = host.bcast_object(uid, 0)
        self.comm = nccl.NcclCommunicator(host.size, uid, host.rank)

    # -- pointers and types -----------------------------------------------------------------

    @staticmethod
    def _ptr(arr, offset_elems: int = 0) -> int:
        return int(arr.data.ptr) + int(offset_elems) * arr.itemsize

    @staticmethod
    def _type(arr) -> int:
        name = arr.dtype.name
        if name not in NCCL_DATA_TYPE:
            raise ValueError(f"NCCL does not move {name} arrays")
        return NCCL_DATA_TYPE[name]

    # -- collectives ------------------------------------------------------------------------

    def barrier(self) -> None:
        self.host.barrier()

    def allreduce(self, arr, op: str = "sum"):
        if not arr.flags.c_contiguous:
            raise ValueError("allreduce needs a contiguous array")
        self.comm.allReduce(self._ptr(arr), self._ptr(arr), arr.size, self._type(arr),
                            SUM if op == "sum" else MAX, self.stream)
        return arr

    def allgather(self, send, recv, counts, displs) -> None:
        counts, displs = [int(c) for c in counts], [int(d) for d in displs]
        even = all(c == counts[0] for c in counts) and displs == [k * counts[0] for k in range(self.size)]
        mine = displs[self.rank]
        if send is not None:
            self._copy(recv, mine, send, 0, counts[self.rank])
        if even:
            self.comm.allGather(self._ptr(recv, mine), self._ptr(recv), counts[0], self._type(recv), self.stream)
            return
        self.nccl.groupStart()
        for peer in range(self.size):
            if peer == self.rank:
                continue
            if counts[self.rank]:
                self.comm.send(self._ptr(recv, mine), counts[self.rank], self._type(recv), peer, self.stream)
            if counts[peer]:
                self.comm.recv(self._ptr(recv, displs[peer]), counts[peer], self._type(recv), peer, self.stream)
        self.nccl.groupEnd()

    def reduce_scatter(self, send, recv, counts) -> None:
        counts = [int(c) for c in counts]
        if all(c == counts[0] for c in counts):
            self.comm.reduceScatter(self._ptr(send), self._ptr(recv), counts[0], self._type(send), SUM, self.stream)
            return
        whole = send.copy()
        self.allreduce(whole)
        self._copy(recv, 0, whole, sum(counts[:self.rank]), counts[self.rank])

    def alltoallv(self, send, send_counts, send_displs, recv, recv_counts, recv_displs) -> None:
        sc, sd = [int(c) for c in send_counts], [int(d) for d in send_displs]
        rc, rd = [int(c) for c in recv_counts], [int(d) for d in recv_displs]
        if sc[self.rank]:
            self._copy(recv, rd[self.rank], send, sd[self.rank], sc[self.rank])
        peers = [k for k in range(self.size) if k != self.rank and (sc[k] or rc[k])]
        if not peers:
            return
        self.nccl.groupStart()
        for k in peers:
            if sc[k]:
                self.comm.send(self._ptr(send, sd[k]), sc[k], self._type(send), k, self.stream)
            if rc[k]:
                self.comm.recv(self._ptr(recv, rd[k]), rc[k], self._type(recv), k, self.stream)
        self.nccl.groupEnd()

    @staticmethod
    def _copy(dst, dst_off: int, src, src_off: int, count: int) -> None:
        """``count`` elements from ``src[src_off:]`` into ``dst[dst_off:]`` (flat views, on the
        current stream)."""
        if count:
            dst.reshape(-1)[dst_off:dst_off + count] = src.reshape(-1)[src_off:src_off + count]

    # -- through the host -------------------------------------------------------------------

    def isend(self, arr, dest: int, tag: int):
        return self.staging.isend(arr, dest, tag)

    def recv(self, arr, source: int, tag: int) -> None:
        self.staging.recv(arr, source, tag)

    def wait_all(self, requests) -> None:
        self.staging.wait_all(requests)

    def split(self, color, key: int):
        sub = self.host.split(color, key)
        if sub is None:
            return None
        return NcclCommunicator(sub, self.nccl, self.stream, StagedCommunicator(self.staging.device, sub))

    def free(self) -> None:
        destroy = getattr(self.comm, "destroy", None)
        if destroy is not None:
            destroy()
        self.host.free()
