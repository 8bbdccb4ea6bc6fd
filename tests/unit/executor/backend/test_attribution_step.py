"""On a device whose launches cost the host time (executor.backend.device.LaunchBound, a GPU) the
timed steps are timed whole (two clock reads each: no span, no barrier before a collective) and one
attribution step after them records every span; the report takes the per-layer times from it and
the step time from the timed steps. On the host every step keeps its spans, as before."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from executor.backend.host import HOST
from executor.comm.collectives import wait_for
from executor.report.collect import RankTimes, aggregate
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_devices import FusingBackend


def _run(backend, steps: int):
    net = load("lenet5")
    timers = Timers()
    run_plan(make_plan(net, 8, 1, "data"), net, MPI.COMM_SELF, steps=steps, warmup=1, seed=3, backend=backend,
             timers=timers, measure_memory=False)
    return timers, net


def test_timed_steps_record_no_span_and_one_attribution_step_records_them_all():
    timers, net = _run(FusingBackend(), 2)
    assert sorted(timers.step_wall) == [-1, 0, 1]  # the attribution step (2) is no timed step
    assert timers.attributed == [2] and {k[0] for k in timers.totals} == {2}
    assert {k[1] for k in timers.totals if k[2] == "fwd_compute"} == {layer.name for layer in net.layers}
    host, _ = _run(HOST, 2)
    assert host.attributed == [] and {k[0] for k in host.totals} == {-1, 0, 1}


def test_a_timed_step_reads_the_clock_twice():
    reads = []
    for steps in (2, 4):
        backend = FusingBackend()
        _run(backend, steps)
        reads.append(backend.calls["now_s"])
    assert reads[1] - reads[0] == 2 * 2  # two more timed steps: begin and end of each
    host = []
    for steps in (2, 4):
        backend = HostClock()
        _run(backend, steps)
        host.append(backend.reads)
    assert host[1] - host[0] > 2 * 2 * 10  # the host: every span's start and end in every step


class HostClock:
    """The host backend, its clock reads counted."""

    def __init__(self):
        self.reads = 0

    def __getattr__(self, name):
        return getattr(HOST, name)

    def now_s(self):
        self.reads += 1
        return HOST.now_s()


class Group:
    def __init__(self):
        self.barriers = 0

    def barrier(self):
        self.barriers += 1


def test_no_barrier_before_a_collective_while_the_timers_record_no_span():
    group, timers = Group(), Timers()
    wait_for(group, timers, "conv1")
    timers.attributing = False
    wait_for(group, timers, "conv1")
    assert group.barriers == 1
    wait_for(group, None)  # no timers: a barrier the caller wants as such
    assert group.barriers == 2


def test_the_report_takes_layer_times_from_the_attribution_step_and_the_step_from_the_timed_ones():
    rank = RankTimes(0, {0: 1.0, 1: 3.0}, {(2, "conv1", "fwd_compute"): 0.25, (2, "fc", "update"): 0.5},
                     ("conv1", "fc"), attributed=(2,))
    got = aggregate([rank], 2)
    assert got.step_s == 2.0 and got.steps == 2
    by = {layer.name: layer for layer in got.layers}
    assert by["conv1"].phases["fwd_compute"] == 0.25 and by["fc"].phases["update"] == 0.5


class Loss(np.ndarray):
    """The loss as the device holds it: reading it (``float``) is a wait for the device, recorded."""

    reads: list = []

    def __float__(self):
        Loss.reads.append(Loss.ended)
        return float(self.view(np.ndarray))


def test_the_loss_is_read_after_the_steps_clock_stopped(monkeypatch):
    from executor.ops import OPS  # noqa: PLC0415 - test-local
    from executor.runtime import stage  # noqa: PLC0415

    forward, backward = OPS[stage.LOSS_OP]
    monkeypatch.setitem(OPS, stage.LOSS_OP, (lambda ctx, xs: _as_loss(forward(ctx, xs)), backward))
    Loss.reads, Loss.ended = [], None
    timers = Timers()
    end = timers.end_step

    def ended():
        end()
        Loss.ended = timers.step

    monkeypatch.setattr(timers, "end_step", ended)
    net = load("lenet5")
    run_plan(make_plan(net, 8, 1, "data"), net, MPI.COMM_SELF, steps=2, warmup=1, seed=3, backend=FusingBackend(),
             timers=timers, measure_memory=False)
    assert Loss.reads == [-1, 0, 1]  # each step's loss read once, after that step ended


def _as_loss(out):
    y, cache = out
    return np.asarray(y).view(Loss), cache


def test_the_trace_marks_the_attribution_step():
    from executor.report.collect import rank_times  # noqa: PLC0415 - test-local
    from executor.report.trace import trace_events  # noqa: PLC0415

    net = load("lenet5")
    timers = Timers(keep_spans=True)
    run_plan(make_plan(net, 8, 1, "data"), net, MPI.COMM_SELF, steps=2, warmup=1, seed=3, backend=FusingBackend(),
             timers=timers, measure_memory=False)
    events = trace_events([rank_times(0, timers, 0.0)])["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    assert [(e["name"], e["args"]["attribution"]) for e in steps] == [("step 2 (attribution)", True)]
