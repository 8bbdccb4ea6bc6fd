"""Recording stand-ins for ``cupy.cuda.nccl`` and a host communicator, and the NCCL communicator on
numpy buffers (their addresses stand for device pointers), for tests/gpu/backend/test_gpu_comm.py and
tests/support/ranks/run_nccl_groups.py. Nothing is moved: every call is recorded with its pointer,
count, type, peer and stream."""

from __future__ import annotations

import itertools

from executor.backend.nccl import NcclCommunicator


#: cupy.cuda.nccl.NcclCommunicator's methods and their positional arguments (cupy 14.2,
#: cupy_backends/cuda/libs/nccl.pyx), the stream pointer last in each collective
COMM_METHODS = {
    "allReduce": ("sendbuf", "recvbuf", "count", "datatype", "op", "stream"),
    "reduce": ("sendbuf", "recvbuf", "count", "datatype", "op", "root", "stream"),
    "broadcast": ("sendbuff", "recvbuff", "count", "datatype", "root", "stream"),
    "bcast": ("buff", "count", "datatype", "root", "stream"),
    "reduceScatter": ("sendbuf", "recvbuf", "recvcount", "datatype", "op", "stream"),
    "allGather": ("sendbuf", "recvbuf", "count", "datatype", "stream"),
    "send": ("sendbuf", "count", "datatype", "peer", "stream"),
    "recv": ("recvbuf", "count", "datatype", "peer", "stream"),
    "destroy": (), "abort": (), "check_async_error": (),
}
#: ncclUniqueId's size: NcclCommunicator takes the id as exactly these many bytes
UNIQUE_ID_BYTES = 128


class FakeNccl:
    """``cupy.cuda.nccl`` recording its calls in ``calls``; ``ids`` makes each unique id."""

    def __init__(self, ids=None):
        self.calls: list[tuple] = []
        self._ids = ids or (lambda: FakeHost.BCAST)
        fake = self

        class NcclCommunicator:  # noqa: D401 - the stand-in of cupy.cuda.nccl.NcclCommunicator
            def __init__(self, size, uid, rank):
                if not isinstance(uid, bytes) or len(uid) != UNIQUE_ID_BYTES:
                    raise ValueError(f"commId length {len(uid)} != {UNIQUE_ID_BYTES}.")  # cupy's check
                fake.calls.append(("init", size, rank, uid))

            def __getattr__(self, name):
                if name not in COMM_METHODS:
                    raise AttributeError(f"'NcclCommunicator' object has no attribute '{name}'")

                def call(*args):
                    if len(args) != len(COMM_METHODS[name]) or not all(isinstance(a, int) for a in args):
                        raise TypeError(f"{name}{COMM_METHODS[name]} takes integers, got {args}")
                    fake.calls.append((name, *args))
                return call

        self.NcclCommunicator = NcclCommunicator

    def get_unique_id(self):
        self.calls.append(("get_unique_id",))
        return self._ids()

    def groupStart(self):  # noqa: N802 - NCCL's name
        self.calls.append(("groupStart",))

    def groupEnd(self):  # noqa: N802 - NCCL's name
        self.calls.append(("groupEnd",))

    def names(self) -> list[str]:
        return [c[0] for c in self.calls if c[0] not in ("init", "get_unique_id")]


class FakeHost:
    """A host communicator of rank ``rank`` among ``size``: broadcasts return :data:`BCAST`
    (standing for rank 0's unique id); collectives of size 1 record (name, dtype) and keep the data."""

    BCAST = b"unique-id-of-rank-0".ljust(UNIQUE_ID_BYTES, b"\0")

    def __init__(self, rank: int, size: int):
        self.rank, self.size = rank, size
        self.seen: list[tuple[str, str]] = []

    def bcast_object(self, obj, root):
        return self.BCAST

    def allreduce(self, arr, op="sum"):
        self.seen.append(("allreduce", arr.dtype.name))
        return arr

    def alltoallv(self, send, sc, sd, recv, rc, rd):
        self.seen.append(("alltoallv", send.dtype.name))
        recv[...] = send

    def barrier(self):
        self.seen.append(("barrier", ""))


class HostNccl(NcclCommunicator):
    """The NCCL communicator over numpy buffers: their addresses stand for device pointers."""

    @staticmethod
    def _ptr(arr, offset_elems: int = 0) -> int:
        return int(arr.ctypes.data) + int(offset_elems) * arr.itemsize


def counter_ids(prefix: str):
    """Unique ids ``prefix-0``, ``prefix-1``, ... (each group's rank 0 makes its own)."""
    count = itertools.count()
    return lambda: f"{prefix}-{next(count)}".encode().ljust(UNIQUE_ID_BYTES, b"\0")
