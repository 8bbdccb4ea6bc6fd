"""Collectives of a device's arrays made by the host's MPI: every buffer copied to the host, the
collective made there, the result copied back.

This is how ranks that share one GPU communicate (NCCL refuses two ranks on one device) and how
any device without a device-aware collective library joins MPI: :class:`StagedCommunicator`
wraps a host :class:`~executor.backend.device.Communicator` (executor.backend.host) and a device
that copies both ways (:class:`~executor.backend.device.DeviceMemory`), and needs nothing else of
either, so the same code stages cupy arrays, or any other device's. Each collective costs the
copies on top of the host collective; a backend that stages says so in its report.
"""

from __future__ import annotations

import numpy as np

from executor.backend.device import Array, Communicator, DeviceMemory


class StagedRequest:
    """A staged ``isend``: the host request and the host copy it sends from (kept alive)."""

    __slots__ = ("req", "host")

    def __init__(self, req, host: np.ndarray):
        self.req, self.host = req, host

    def test(self) -> bool:
        return self.req.test()


class StagedCommunicator:
    """``host``'s collectives on ``device``'s arrays, each buffer staged through host memory
    (executor.backend.device.Communicator)."""

    def __init__(self, device: DeviceMemory, host: Communicator):
        self.device, self.host = device, host
        self.rank, self.size = host.rank, host.size

    def _empty(self, like: Array) -> np.ndarray:
        return np.empty(like.shape, dtype=like.dtype)

    def barrier(self) -> None:
        self.host.barrier()

    def allreduce(self, arr: Array, op: str = "sum") -> Array:
        buf = self.device.to_host(arr)
        self.host.allreduce(buf, op)
        self.device.from_host(buf, out=arr)
        return arr

    def allgather(self, send: Array | None, recv: Array, counts, displs) -> None:
        buf = self.device.to_host(recv) if send is None else self._empty(recv)  # in place: our part is in recv
        self.host.allgather(None if send is None else self.device.to_host(send), buf, counts, displs)
        self.device.from_host(buf, out=recv)

    def reduce_scatter(self, send: Array, recv: Array, counts) -> None:
        buf = self._empty(recv)
        self.host.reduce_scatter(self.device.to_host(send), buf, counts)
        self.device.from_host(buf, out=recv)

    def alltoallv(self, send: Array, send_counts, send_displs, recv: Array, recv_counts, recv_displs) -> None:
        buf = self._empty(recv)
        self.host.alltoallv(self.device.to_host(send), send_counts, send_displs, buf, recv_counts, recv_displs)
        self.device.from_host(buf, out=recv)

    def isend(self, arr: Array, dest: int, tag: int) -> StagedRequest:
        buf = self.device.to_host(arr)
        return StagedRequest(self.host.isend(buf, dest, tag), buf)

    def recv(self, arr: Array, source: int, tag: int) -> None:
        buf = self._empty(arr)
        self.host.recv(buf, source, tag)
        self.device.from_host(buf, out=arr)

    def wait_all(self, requests) -> None:
        self.host.wait_all([r.req for r in requests])

    def split(self, color: int | None, key: int) -> StagedCommunicator | None:
        sub = self.host.split(color, key)
        return None if sub is None else StagedCommunicator(self.device, sub)

    def free(self) -> None:
        self.host.free()

    def bcast_object(self, obj, root: int):
        return self.host.bcast_object(obj, root)

    def gather_object(self, obj, root: int):
        return self.host.gather_object(obj, root)

    def allgather_object(self, obj) -> list:
        return self.host.allgather_object(obj)
