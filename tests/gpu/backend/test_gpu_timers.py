"""Spans timed by marks on a device's stream (executor.backend.device.EventClock), resolved once at
the step's end (executor.runtime.timers): a stand-in clock whose marks carry made-up device times
shows the arithmetic; tests/gpu/backend/test_gpu_backend.py runs CUDA events."""

from __future__ import annotations

from executor.backend.device import EventClock
from executor.runtime.timers import Timers


class Marks:
    """Marks at device times 0, 1, 3, 6, 10, ... (each 1 s longer than the one before); counts waits."""

    def __init__(self):
        self.t, self.step, self.waits = 0.0, 1.0, 0

    def mark(self):
        t = self.t
        self.t += self.step
        self.step += 1
        return t

    def seconds(self, a, b):
        self.waits += 1
        return b - a

    def at(self, m):
        return 100.0 + m

    def recycle(self, marks):
        self.recycled = getattr(self, "recycled", []) + list(marks)


def test_spans_are_marks_resolved_at_the_steps_end():
    clock = Marks()
    assert isinstance(clock, EventClock)
    t = Timers(keep_spans=True, clock=lambda: 1 / 0, events=clock)  # the waiting clock is never read
    t.begin_step(0)                                    # mark 0
    with t.span("conv1", "fwd_compute"):               # marks 1, 3
        pass
    with t.span("conv1", "fwd_compute"):               # marks 6, 10
        pass
    assert clock.waits == 0 and t.totals == {}         # nothing resolved inside the step
    t.end_step()                                       # mark 15
    assert t.totals[(0, "conv1", "fwd_compute")] == (3 - 1) + (10 - 6)
    assert t.step_wall[0] == 15 and [(s.start_s, s.end_s) for s in t.spans] == [(101, 103), (106, 110)]
    assert sorted(clock.recycled) == [0, 1, 3, 6, 10, 15]  # every mark read goes back to the pool
    t.forget(0)
    assert t.step_wall == {} and t.spans == []


def test_a_shared_span_is_one_pair_of_marks_split_among_its_layers():
    """Every weight's update in one launch: two marks, each layer charged its share at the step's end."""
    clock = Marks()
    t = Timers(keep_spans=True, clock=lambda: 1 / 0, events=clock)
    t.begin_step(0)                                    # mark 0
    with t.shared_span("update", {"conv1": 1, "fc": 2}):  # marks 1, 3
        pass
    assert t.totals == {} and clock.t == 6
    t.end_step()
    assert t.totals == {(0, "conv1", "update"): 2 / 3, (0, "fc", "update"): 4 / 3}
    assert [(s.layer, s.start_s, s.end_s) for s in t.spans] == [("conv1", 101, 101 + 2 / 3), ("fc", 101 + 2 / 3, 103)]


def test_the_cuda_backend_records_spans_on_pooled_events(monkeypatch):
    """executor.backend.cuda on the recording cupy double: the first step makes the events it has in
    flight at once, every later step records the same ones again."""
    from executor.backend.cuda import CudaBackend  # noqa: PLC0415 - test-local
    from tests.support.doubles.fake_cupy import FakeCupy  # noqa: PLC0415

    cp = FakeCupy().install(monkeypatch)
    backend = CudaBackend(0)
    t = Timers(clock=backend.now_s, events=backend)
    made = []
    for step in range(3):
        t.begin_step(step)
        for layer in ("conv1", "bn1", "fc"):
            with t.span(layer, "fwd_compute"):
                pass
        t.end_step()
        made.append(cp.events_made)
    assert made == [1 + 2 + 3 * 2] * 3  # the base event, the step's pair, a pair per span; none after
    assert t.totals[(2, "bn1", "fwd_compute")] == 1e-3 and t.step_wall[2] == 7e-3
    backend.now_s()
    assert cp.events_made == made[-1]
