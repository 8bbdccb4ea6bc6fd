"""The host backend: numpy arrays in this process's memory, MPI (mpi4py) collectives, the host clock.

numpy arrays are handed to MPI as they are (buffer and datatype, no copy). mpi4py is imported on
first use (:func:`mpi`): importing ``mpi4py.MPI`` initialises MPI, which a process that only
plans or launches the ranks must not do. Peak memory is what ``tracemalloc`` sees
(executor.backend.host_memory): numpy reports its buffers to it; MPI's own buffers are not seen.
"""

from __future__ import annotations

import time
from functools import lru_cache

import numpy as np

from executor.backend.host_memory import held_bytes, traced_peak_bytes


def mpi():
    """mpi4py's ``MPI`` module."""
    from mpi4py import MPI  # noqa: PLC0415 - deferred: importing mpi4py.MPI initialises MPI
    return MPI


@lru_cache(maxsize=None)
def mpi_type(dtype):
    """The MPI datatype of a float32, float64 or uint16 numpy dtype (looked up once per dtype: every
    collective of a step asks; 16-bit floats travel as their bits, executor.backend.staging)."""
    MPI = mpi()
    return {np.dtype(np.float32): MPI.FLOAT, np.dtype(np.float64): MPI.DOUBLE,
            np.dtype(np.uint16): MPI.UINT16_T}[np.dtype(dtype)]


@lru_cache(maxsize=None)
def mpi_op(op: str):
    """MPI's reduction of ``op`` ("sum" or "max")."""
    MPI = mpi()
    return {"sum": MPI.SUM, "max": MPI.MAX}[op]


class HostRequest:
    """An ``Isend`` in flight (executor.backend.device.Request)."""

    __slots__ = ("req",)

    def __init__(self, req):
        self.req = req

    def test(self) -> bool:
        return self.req.Test()


class HostCommunicator:
    """A group of ranks over an mpi4py communicator (executor.backend.device.Communicator)."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce(self, arr: np.ndarray, op: str = "sum") -> np.ndarray:
        if not arr.flags.c_contiguous:
            raise ValueError("allreduce needs a contiguous array")
        self.comm.Allreduce(mpi().IN_PLACE, [arr, mpi_type(arr.dtype)], op=mpi_op(op))
        return arr

    def allgather(self, send, recv: np.ndarray, counts, displs) -> None:
        mtype = mpi_type(recv.dtype)
        self.comm.Allgatherv(mpi().IN_PLACE if send is None else [send, mtype], [recv, (counts, displs), mtype])

    def reduce_scatter(self, send: np.ndarray, recv: np.ndarray, counts) -> None:
        self.comm.Reduce_scatter([send, mpi_type(send.dtype)], [recv, mpi_type(recv.dtype)],
                                 recvcounts=counts, op=mpi().SUM)

    def alltoallv(self, send: np.ndarray, send_counts, send_displs, recv: np.ndarray, recv_counts,
                  recv_displs) -> None:
        mtype = mpi_type(send.dtype)
        self.comm.Alltoallv([send, (send_counts, send_displs), mtype], [recv, (recv_counts, recv_displs), mtype])

    def isend(self, arr: np.ndarray, dest: int, tag: int) -> HostRequest:
        return HostRequest(self.comm.Isend([arr, mpi_type(arr.dtype)], dest=dest, tag=tag))

    def recv(self, arr: np.ndarray, source: int, tag: int) -> None:
        self.comm.Recv([arr, mpi_type(arr.dtype)], source=source, tag=tag)

    def wait_all(self, requests) -> None:
        mpi().Request.Waitall([r.req for r in requests])

    def split(self, color: int | None, key: int) -> HostCommunicator | None:
        sub = self.comm.Split(mpi().UNDEFINED if color is None else color, key)
        return None if color is None else HostCommunicator(sub)

    def free(self) -> None:
        self.comm.Free()

    def bcast_object(self, obj, root: int):
        return self.comm.bcast(obj, root=root)

    def gather_object(self, obj, root: int):
        return self.comm.gather(obj, root=root)

    def allgather_object(self, obj) -> list:
        return self.comm.allgather(obj)


class HostBackend:
    """numpy + MPI on the host (executor.backend.device.Backend)."""

    name = "host"
    xp = np
    #: the host clock, read as it is (no queued work to wait for)
    now_s = time.perf_counter

    def communicator(self, world) -> HostCommunicator:
        return HostCommunicator(world)

    def synchronize(self) -> None:
        return None

    def held_bytes(self, arrays) -> int:
        return held_bytes(arrays)

    def peak_bytes(self, run) -> int:
        return traced_peak_bytes(run)


#: The one host backend (it keeps no state).
HOST = HostBackend()
