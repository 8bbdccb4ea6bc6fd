"""A recording stand-in for a device that captures a step as a CUDA graph and replays it
(executor.backend.device.StepGraphs), on the host's numpy arrays.

:class:`GraphingBackend` is a launch-bound copying backend (tests/support/doubles/fake_devices.py) that
logs ``begin_capture``, ``end_capture`` and each ``replay`` in :attr:`GraphingBackend.log`, and
raises :class:`CaptureError` for any call that waits for the device or moves data through the host
while a step is being captured or replayed (``synchronize``, the clock, copies both ways, memory
queries, a new communicator), as CUDA refuses such calls in a capture. What it cannot do is record
without doing: its capture runs the step once (so a graphed run takes one update more than its
replays), and a replay runs the recorded step again, its loss copied into the captured loss array,
as a replay writes into the captured arrays.
"""

from __future__ import annotations

import numpy as np

from tests.support.doubles.fake_devices import FusingBackend


class CaptureError(RuntimeError):
    """A host call inside a captured step (CUDA: cudaErrorStreamCaptureUnsupported)."""


class GraphingBackend(FusingBackend):
    name = "graphing"

    def __init__(self, refusal: str | None = None):
        super().__init__()
        self.refusal = refusal
        self.inside = False
        self.log: list[str] = []

    def graph_refusal(self) -> str | None:
        return self.refusal

    def capture(self, run):
        self.log.append("begin_capture")
        try:
            out = self._inside(run)
        finally:
            self.log.append("end_capture")
        return (run, out), out

    def replay(self, graph) -> None:
        run, out = graph
        self.log.append("replay")
        np.copyto(out[0], self._inside(run)[0])

    def _inside(self, run):
        """``run()`` as a captured or replayed step: the host may not wait for the device in it."""
        self.inside = True
        try:
            return run()
        finally:
            self.inside = False

    def _host(self, what: str) -> None:
        if self.inside:
            raise CaptureError(f"{what} inside a captured step: the host cannot wait for the device there")

    def synchronize(self) -> None:
        self._host("synchronize")
        super().synchronize()

    def now_s(self) -> float:
        self._host("now_s")
        return super().now_s()

    def to_host(self, arr):
        self._host("to_host")
        return super().to_host(arr)

    def from_host(self, arr, out=None):
        self._host("from_host")
        return super().from_host(arr, out)

    def peak_bytes(self, run) -> int:
        self._host("peak_bytes")
        return super().peak_bytes(run)

    def communicator(self, world):
        self._host("communicator")
        return super().communicator(world)
