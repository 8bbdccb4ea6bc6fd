"""Collectives of a device's arrays made by the host's MPI: every buffer copied to the host, the
collective made there, the result copied back.

This is how ranks that share one GPU communicate (NCCL refuses two ranks on one device) and how
any device without a device-aware collective library joins MPI: :class:`StagedCommunicator`
wraps a host :class:`~executor.backend.device.Communicator` (executor.backend.host) and a device
that copies both ways (:class:`~executor.backend.device.DeviceMemory`), and needs nothing else of
either, so the same code stages cupy arrays, or any other device's. Each collective costs the
copies on top of the host collective; a backend that stages says so in its report.

MPI has no 16-bit floating-point type: float16 and bfloat16 buffers move as their bits
(``uint16``), and sums of them are made in float32 on the host and rounded back (NCCL also adds
16-bit values in float32 inside its kernels).
"""

from __future__ import annotations

import numpy as np

from executor.backend.device import Array, Communicator, DeviceMemory


class HostObjects:
    """Python objects (plans, timings, check results) go between ranks over the host communicator
    ``self.host``, whatever carries the arrays."""

    host: Communicator

    def bcast_object(self, obj, root: int):
        return self.host.bcast_object(obj, root)

    def gather_object(self, obj, root: int):
        return self.host.gather_object(obj, root)

    def allgather_object(self, obj) -> list:
        return self.host.allgather_object(obj)


class StagedRequest:
    """A staged ``isend``: the host request and the host copy it sends from (kept alive)."""

    __slots__ = ("req", "host")

    def __init__(self, req, host: np.ndarray):
        self.req, self.host = req, host

    def test(self) -> bool:
        return self.req.test()


class StagedCommunicator(HostObjects):
    """``host``'s collectives on ``device``'s arrays, each buffer staged through host memory
    (executor.backend.device.Communicator)."""

    def __init__(self, device: DeviceMemory, host: Communicator):
        self.device, self.host = device, host
        self.rank, self.size = host.rank, host.size

    def _empty(self, like: Array) -> np.ndarray:
        return np.empty(like.shape, dtype=like.dtype)

    @staticmethod
    def _bits(buf: np.ndarray) -> np.ndarray:
        """A host buffer as MPI can move it: 16-bit floats as their bits."""
        return buf.view(np.uint16) if buf.dtype.itemsize == 2 and buf.dtype.kind != "u" else buf

    @staticmethod
    def _summable(buf: np.ndarray) -> np.ndarray:
        """A host buffer as MPI can add it: 16-bit floats as float32."""
        return buf.astype(np.float32) if buf.dtype.itemsize == 2 else buf

    def barrier(self) -> None:
        self.host.barrier()

    def allreduce(self, arr: Array, op: str = "sum") -> Array:
        host = self.device.to_host(arr)
        buf = self._summable(host)
        self.host.allreduce(buf, op)
        self.device.from_host(buf.astype(host.dtype, copy=False), out=arr)
        return arr

    def allgather(self, send: Array | None, recv: Array, counts, displs) -> None:
        buf = self.device.to_host(recv) if send is None else self._empty(recv)  # in place: our part is in recv
        part = None if send is None else self._bits(self.device.to_host(send))
        self.host.allgather(part, self._bits(buf), counts, displs)
        self.device.from_host(buf, out=recv)

    def reduce_scatter(self, send: Array, recv: Array, counts) -> None:
        host = self.device.to_host(send)
        buf = self._summable(self._empty(recv))
        self.host.reduce_scatter(self._summable(host), buf, counts)
        self.device.from_host(buf.astype(host.dtype, copy=False), out=recv)

    def alltoallv(self, send: Array, send_counts, send_displs, recv: Array, recv_counts, recv_displs) -> None:
        buf = self._empty(recv)
        self.host.alltoallv(self._bits(self.device.to_host(send)), send_counts, send_displs, self._bits(buf),
                            recv_counts, recv_displs)
        self.device.from_host(buf, out=recv)

    def isend(self, arr: Array, dest: int, tag: int) -> StagedRequest:
        buf = self.device.to_host(arr)
        return StagedRequest(self.host.isend(self._bits(buf), dest, tag), buf)

    def recv(self, arr: Array, source: int, tag: int) -> None:
        buf = self._empty(arr)
        self.host.recv(self._bits(buf), source, tag)
        self.device.from_host(buf, out=arr)

    def wait_all(self, requests) -> None:
        self.host.wait_all([r.req for r in requests])

    def split(self, color: int | None, key: int) -> StagedCommunicator | None:
        sub = self.host.split(color, key)
        return None if sub is None else StagedCommunicator(self.device, sub)

    def free(self) -> None:
        self.host.free()
