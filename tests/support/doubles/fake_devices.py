"""Test doubles of devices whose arrays are not the host's, to show that the staging path
(executor.backend.staging) and the runtime need nothing of a device beyond its interface.

- :class:`FakeDevice`: arrays are :class:`FakeArray`, numpy data behind an object that is no
  buffer, so MPI cannot read one: a collective on them works only if every buffer is staged.
- :class:`CopyingBackend`: a whole backend (executor.backend.device.Backend and DeviceMemory)
  whose "device" arrays are numpy arrays kept apart from the host's (every transfer a copy),
  communicating through :class:`executor.backend.staging.StagedCommunicator` over the host's MPI.
  The runtime runs a plan on it exactly as it would on a GPU that shares its ranks' device.
- :class:`FusingBackend`: the same, launch-bound (executor.backend.device.LaunchBound), as a GPU is.
"""

from __future__ import annotations

import time
from collections import Counter

import numpy as np

from executor.backend.host import HOST
from executor.backend.staging import StagedCommunicator


class FakeArray:
    """A "device" array: numpy data behind an object without the buffer protocol."""

    __slots__ = ("data",)

    def __init__(self, data: np.ndarray):
        self.data = data

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype


class FakeDevice:
    """Copies between the host and :class:`FakeArray` (executor.backend.device.DeviceMemory),
    counted."""

    def __init__(self):
        self.copies = Counter()

    def to_host(self, arr: FakeArray) -> np.ndarray:
        self.copies["to_host"] += 1
        return arr.data.copy()

    def from_host(self, arr: np.ndarray, out: FakeArray | None = None) -> FakeArray:
        self.copies["from_host"] += 1
        if out is None:
            return FakeArray(np.array(arr, copy=True))
        out.data[...] = arr
        return out


class CopyingBackend:
    """numpy "device" arrays, every host transfer a copy, collectives staged through the host."""

    name = "copying"
    xp = np

    def __init__(self):
        self.calls = Counter()

    def communicator(self, world) -> StagedCommunicator:
        self.calls["communicator"] += 1
        return StagedCommunicator(self, HOST.communicator(world))

    def synchronize(self) -> None:
        self.calls["synchronize"] += 1

    def now_s(self) -> float:
        self.calls["now_s"] += 1
        return time.perf_counter()

    def held_bytes(self, arrays) -> int:
        self.calls["held_bytes"] += 1
        return HOST.held_bytes(arrays)

    def peak_bytes(self, run) -> int:
        self.calls["peak_bytes"] += 1
        return HOST.peak_bytes(run)

    def to_host(self, arr: np.ndarray) -> np.ndarray:
        self.calls["to_host"] += 1
        return arr.copy()

    def from_host(self, arr: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        self.calls["from_host"] += 1
        if out is None:
            return np.array(arr, copy=True)
        out[...] = arr
        return out


class FusingBackend(CopyingBackend):
    """A :class:`CopyingBackend` whose launches cost the host time (executor.backend.device.LaunchBound),
    as a GPU's do: the runtime takes its multi-tensor paths on it."""

    name = "fusing"

    def fuse_launches(self) -> bool:
        self.calls["fuse_launches"] += 1
        return True
