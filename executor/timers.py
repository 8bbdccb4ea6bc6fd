"""Per-layer, per-phase timers of one rank, and the trace spans a Perfetto view is drawn from.

The runtime wraps every piece of work in ``timers.span(layer, phase)``; phases match the
prediction's terms one to one (costmodel.step; docs/executor.md):

=============  ===============================================================
phase          predicted by
=============  ===============================================================
fwd_compute    LayerEstimate.fwd_compute_s
fwd_comm       LayerEstimate.fwd_comm_s + reshard into the layer (forward)
bwd_compute    LayerEstimate.bwd_compute_s (backward-data + backward-weights)
bwd_comm       LayerEstimate.bwd_comm_s + reshard of its input gradients
grad_sync      LayerEstimate.grad_sync_s (weight-gradient allreduce)
update         LayerEstimate.update_s (SGD with momentum)
wait           0: a barrier on a collective's group just before the collective,
               so time spent waiting for a slower rank (load imbalance, noise)
               is not charged to the collective; shown apart, not in layer totals
=============  ===============================================================
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

PHASES = ("fwd_compute", "fwd_comm", "bwd_compute", "bwd_comm", "grad_sync", "update", "wait")
#: The phases a layer's predicted time is compared with (waiting has no prediction).
WORK_PHASES = PHASES[:-1]


@dataclass
class Span:
    layer: str
    phase: str
    start_s: float
    end_s: float
    step: int


@dataclass
class Timers:
    """Accumulates seconds per (step, layer, phase); keeps spans for a trace when asked."""

    keep_spans: bool = False
    sync: object = None  # a callable that waits for the device (cupy stream) before reading the clock
    step: int = -1
    totals: dict = field(default_factory=dict)  # (step, layer, phase) -> seconds
    step_wall: dict = field(default_factory=dict)  # step -> seconds
    spans: list = field(default_factory=list)
    _step_start: float = 0.0

    def _now(self) -> float:
        if self.sync is not None:
            self.sync()
        return time.perf_counter()

    def begin_step(self, step: int) -> None:
        self.step = step
        self._step_start = self._now()

    def end_step(self) -> None:
        self.step_wall[self.step] = self._now() - self._step_start

    @contextmanager
    def span(self, layer: str, phase: str):
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase}")
        start = self._now()
        try:
            yield
        finally:
            end = self._now()
            key = (self.step, layer, phase)
            self.totals[key] = self.totals.get(key, 0.0) + (end - start)
            if self.keep_spans:
                self.spans.append(Span(layer, phase, start, end, self.step))

    def per_layer(self, steps) -> dict[str, dict[str, list[float]]]:
        """layer -> phase -> seconds for each of ``steps`` (0.0 where the phase did not run)."""
        out: dict[str, dict[str, list[float]]] = {}
        layers = sorted({k[1] for k in self.totals}, key=lambda n: min(
            (s.start_s for s in self.spans if s.layer == n), default=0.0))
        for layer in layers:
            out[layer] = {ph: [self.totals.get((s, layer, ph), 0.0) for s in steps] for ph in PHASES}
        return out
