"""Per-layer, per-phase timers of one rank, and the trace spans a Perfetto view is drawn from.

The runtime wraps every piece of work in ``timers.span(layer, phase)``; phases match the
prediction's terms one to one (costmodel.step.prediction; docs/executor.md):

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

On a device whose launches cost the host time (a GPU) the timed steps record no span and make no
barrier before a collective (``attributing`` off: a step is two marks); one attribution step after
them, run eagerly with every span and barrier, gives the per-layer times.

Each span's start is also written, when asked, to the rank's progress file
(:class:`ProgressFile`: one fixed-size record overwritten in place), so that the launcher can say
where a rank that was killed was (:func:`read_progress`).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

PHASES = ("fwd_compute", "fwd_comm", "bwd_compute", "bwd_comm", "grad_sync", "update", "wait")
#: The phases a layer's predicted time is compared with (waiting has no prediction).
WORK_PHASES = PHASES[:-1]


#: Bytes of one progress record: "pid step phase wall-clock layer", space-padded, newline-ended.
RECORD_BYTES = 256
#: Phases of a rank outside the spans: before its first span, after its last.
SETUP, FINISH = "setup", "finish"


@dataclass(frozen=True)
class RankProgress:
    """What one rank last started: its step (None before the first), layer and phase."""

    rank: int
    pid: int
    step: int | None
    phase: str
    layer: str
    wall_s: float  # time.time() when it started


class ProgressFile:
    """One rank's progress record in ``folder/rank-R``: kept open and overwritten in place (one
    ``pwrite``, no sync: the page cache outlives a killed process)."""

    def __init__(self, folder: str | os.PathLike, rank: int):
        self.pid = os.getpid()
        self._fd = os.open(Path(folder) / f"rank-{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def mark(self, step: int | None, layer: str, phase: str) -> None:
        text = f"{self.pid} {'-' if step is None else step} {phase} {time.time():.6f} {layer}"
        record = text.encode("utf-8", "replace")[:RECORD_BYTES - 1].ljust(RECORD_BYTES - 1) + b"\n"
        os.pwrite(self._fd, record, 0)

    def close(self) -> None:
        os.close(self._fd)


def read_progress(folder: str | os.PathLike) -> dict[int, RankProgress]:
    """Every rank's last record in ``folder`` (ranks whose file is missing or unreadable left out)."""
    out = {}
    for path in Path(folder).glob("rank-*"):
        try:
            rank = int(path.name[len("rank-"):])
            pid, step, phase, wall, layer = (path.read_bytes().decode("utf-8", "replace").rstrip()
                                             .split(" ", 4) + [""])[:5]
            out[rank] = RankProgress(rank, int(pid), None if step == "-" else int(step), phase, layer,
                                     float(wall))
        except (OSError, ValueError):
            continue
    return out


@dataclass
class Span:
    layer: str
    phase: str
    start_s: float
    end_s: float
    step: int


@dataclass
class Timers:
    """Accumulates seconds per (step, layer, phase); keeps spans for a trace when asked.

    ``clock``: the seconds spans are timed with, the device's (executor.backend.device.Backend.now_s:
    on a GPU the time the work queued before the call is done; the runner sets it)."""

    keep_spans: bool = False
    clock: Callable[[], float] = time.perf_counter
    progress: ProgressFile | None = None  # where each span's start is recorded (the launcher reads it)
    step: int = -1
    totals: dict = field(default_factory=dict)  # (step, layer, phase) -> seconds
    step_wall: dict = field(default_factory=dict)  # step -> seconds
    spans: list = field(default_factory=list)
    _step_start: float = 0.0
    #: a device whose clock marks the stream without waiting (executor.backend.device.EventClock):
    #: spans are then events on the stream, resolved once at the step's end, so the host queues
    #: work ahead of the device as frameworks do instead of waiting at every span
    events: object | None = None
    #: whether spans are recorded now. On a device whose launches cost the host time the runtime
    #: times its steps whole (two marks each) with this off, and records the per-layer spans in one
    #: attribution step after them (executor.runtime.run), whose totals stand for the timed steps'
    #: per-layer times (:attr:`attributed`) and whose wall time counts as no step's
    attributing: bool = True
    #: False while a step is captured as a graph (executor.runtime.graphs): nothing is marked then,
    #: as a mark would be recorded into the graph
    recording: bool = True
    attributed: list = field(default_factory=list)  # the attribution steps
    _pending: list = field(default_factory=list)
    _step_mark: object = None

    def _now(self) -> float:
        return self.clock()

    def begin_step(self, step: int) -> None:
        if not self.recording:
            return
        self.step = step
        if self.events is not None:
            self._step_mark = self.events.mark()
            return
        self._step_start = self._now()

    def end_step(self) -> None:
        if not self.recording:
            return
        if self.events is not None:
            self._resolve(self.events.mark())
            return
        self.step_wall[self.step] = self._now() - self._step_start

    def _resolve(self, end) -> None:
        """The step's spans and wall time from its events (waits for the step's last one)."""
        ev = self.events
        self.step_wall[self.step] = ev.seconds(self._step_mark, end)
        read = [self._step_mark, end]
        for key, a, b, *shared in self._pending:
            read += [a, b]
            if shared:
                self._charge(key[0], key[2], ev.at(a), ev.at(b), shared[0])
                continue
            self.totals[key] = self.totals.get(key, 0.0) + ev.seconds(a, b)
            if self.keep_spans:
                self.spans.append(Span(key[1], key[2], ev.at(a), ev.at(b), key[0]))
        self._pending.clear()
        ev.recycle(read)

    def forget(self, step: int) -> None:
        """Drop everything recorded for ``step`` (a step run for another purpose than its time,
        such as the memory step, executor.backend.host_memory)."""
        self.step_wall.pop(step, None)
        self.totals = {k: v for k, v in self.totals.items() if k[0] != step}
        self.spans = [s for s in self.spans if s.step != step]

    def attribution_step(self, step: int) -> None:
        """``step`` (just ended) was the attribution step: its spans stay, its wall time goes."""
        self.step_wall.pop(step, None)
        self.attributed.append(step)

    @contextmanager
    def span(self, layer: str, phase: str):
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase}")
        if not (self.attributing and self.recording):
            yield
            return
        if self.progress is not None:
            self.progress.mark(self.step, layer, phase)
        if self.events is not None:
            first = self.events.mark()
            try:
                yield
            finally:
                self._pending.append(((self.step, layer, phase), first, self.events.mark()))
            return
        start = self._now()
        try:
            yield
        finally:
            end = self._now()
            key = (self.step, layer, phase)
            self.totals[key] = self.totals.get(key, 0.0) + (end - start)
            if self.keep_spans:
                self.spans.append(Span(layer, phase, start, end, self.step))

    @contextmanager
    def shared_span(self, phase: str, shares: dict[str, float]):
        """One span of work done for many layers at once (every weight's update in one launch):
        timed once, each layer charged the part ``shares`` gives it (its parameter count, say), so
        per-layer totals stay comparable with per-layer predictions; a trace draws the parts one
        after the other inside the span."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase}")
        total = float(sum(shares.values()))
        if not shares or total <= 0 or not (self.attributing and self.recording):
            yield
            return
        parts = [(layer, share / total) for layer, share in shares.items()]
        if self.progress is not None:
            self.progress.mark(self.step, parts[0][0], phase)
        if self.events is not None:
            first = self.events.mark()
            try:
                yield
            finally:
                self._pending.append(((self.step, "", phase), first, self.events.mark(), parts))
            return
        start = self._now()
        try:
            yield
        finally:
            self._charge(self.step, phase, start, self._now(), parts)

    def _charge(self, step: int, phase: str, start: float, end: float, parts) -> None:
        at = start
        for layer, frac in parts:
            key = (step, layer, phase)
            self.totals[key] = self.totals.get(key, 0.0) + (end - start) * frac
            if self.keep_spans:
                self.spans.append(Span(layer, phase, at, at + (end - start) * frac, step))
            at += (end - start) * frac

    def per_layer(self, steps) -> dict[str, dict[str, list[float]]]:
        """layer -> phase -> seconds for each of ``steps`` (0.0 where the phase did not run)."""
        out: dict[str, dict[str, list[float]]] = {}
        layers = sorted({k[1] for k in self.totals}, key=lambda n: min(
            (s.start_s for s in self.spans if s.layer == n), default=0.0))
        for layer in layers:
            out[layer] = {ph: [self.totals.get((s, layer, ph), 0.0) for s in steps] for ph in PHASES}
        return out
