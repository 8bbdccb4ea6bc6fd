"""The host as a resource of the step (pure): calls issued in order, run on the device when issued.

A framework's host issues a step's calls one after another, each after its host cost (the Python,
the dispatcher, the launch). The device runs a call once it has been issued and the previous call
on its stream has finished; a synchronisation (a loss read, a barrier, a staged copy) makes the host
wait until the device has finished everything issued before it. So, for calls ``i`` in order with
host cost ``h_i`` and device time ``d_i`` on stream ``s_i``::

    issued_i = host + h_i                       (host: when the host finished the call before)
    start_i  = max(issued_i, free[s_i]);   end_i = start_i + d_i;   free[s_i] = end_i
    host     = issued_i, or, after a sync, max(issued_i, every stream's free)

The step ends when both the host and every stream are done. It is never below the device's sum on
any one stream nor the host's sum; when every device time exceeds the host cost after it, it is the
device's sum plus the first call's host cost (large kernels: the device sum, as without a host).

Each call carries a label (a layer and its pass); a label's share of the step is how far it moves
the step's end (``end`` after its last call, less the end before its first), so the shares sum to
the step. A label is host-bound when the device sat idle, waiting for its calls to be issued, for
more than half of its share.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Call:
    """One call the host issues: its host cost, its device time and stream, whether the host then
    waits for the device (``sync``), and the layer and pass it belongs to (``label``)."""

    label: str
    host_s: float
    device_s: float = 0.0
    stream: int = 0
    sync: bool = False


@dataclass(frozen=True)
class Span:
    """A label's calls on the timeline: their host and device sums, how far they moved the step's
    end (``share_s``), and how long the device sat idle waiting for them to be issued."""

    label: str
    host_s: float
    device_s: float
    share_s: float
    idle_s: float

    @property
    def host_bound(self) -> bool:
        return self.idle_s > 0.5 * self.share_s > 0.0


@dataclass(frozen=True)
class Timeline:
    """The step's end and its labels' spans, in the order of their first call."""

    end_s: float
    host_s: float  # the host's sum
    device_s: float  # the device's sum (every stream)
    spans: tuple[Span, ...]

    @property
    def host_bound(self) -> tuple[str, ...]:
        return tuple(s.label for s in self.spans if s.host_bound)


def run_timeline(calls: list[Call] | tuple[Call, ...]) -> Timeline:
    """The timeline of ``calls`` issued in order from time 0 (module docstring)."""
    host = 0.0
    free: dict[int, float] = {}
    end = 0.0
    sums: dict[str, list[float]] = {}
    for call in calls:
        before = end
        issued = host + call.host_s
        ready = free.get(call.stream, 0.0)
        start = max(issued, ready)
        free[call.stream] = start + call.device_s
        idle = max(0.0, issued - ready) if call.device_s > 0 else 0.0
        host = max(issued, max(free.values())) if call.sync else issued
        end = max(host, max(free.values()))
        got = sums.setdefault(call.label, [0.0, 0.0, 0.0, 0.0])
        got[0] += call.host_s
        got[1] += call.device_s
        got[2] += end - before
        got[3] += min(idle, end - before)
    spans = tuple(Span(label, *values) for label, values in sums.items())
    return Timeline(end, sum(c.host_s for c in calls), sum(c.device_s for c in calls), spans)
