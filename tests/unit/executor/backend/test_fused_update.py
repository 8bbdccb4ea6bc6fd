"""On a device whose launches cost the host time (executor.backend.device.LaunchBound) the runtime
updates every weight in one multi-tensor call, and the update's one span is shared among the layers
by their parameter counts (executor.runtime.timers.Timers.shared_span); on the host each layer keeps
its own call and span. The numbers are the same either way."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from executor.backend.host import HOST
from executor.runtime import stage
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_devices import FusingBackend


MANY, ONE = stage.sgd_momentum_update_many, stage.sgd_momentum_update


def _run(backend, monkeypatch, steps=2):
    """lenet5 on one rank (a warm-up step and two timed), the update calls counted."""
    calls = {"many": 0, "one": 0}
    many, one = MANY, ONE

    def count_many(*a, **k):
        calls["many"] += 1
        return many(*a, **k)

    def count_one(*a, **k):
        calls["one"] += 1
        return one(*a, **k)

    monkeypatch.setattr(stage, "sgd_momentum_update_many", count_many)
    monkeypatch.setattr(stage, "sgd_momentum_update", count_one)
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    timers = Timers()
    got = run_plan(plan, net, MPI.COMM_SELF, steps=steps, warmup=1, check=True, seed=3, backend=backend, timers=timers,
                   measure_memory=False)
    return got, timers, calls, net


def test_one_update_call_per_step_on_a_launch_bound_device_the_same_losses(monkeypatch):
    host, host_timers, host_calls, net = _run(HOST, monkeypatch)
    fused, timers, calls, _ = _run(FusingBackend(), monkeypatch)
    assert fused.losses == host.losses and fused.check.passed
    assert calls == {"many": 4, "one": 0}  # one per step: warm-up, two timed, the attribution step
    weighted = [layer for layer in net.layers if layer.weights]
    assert host_calls == {"many": 0, "one": 3 * sum(len(layer.weights) for layer in weighted)}


def test_the_update_span_is_shared_by_parameter_count(monkeypatch):
    _, timers, _, net = _run(FusingBackend(), monkeypatch)
    (step,) = timers.attributed
    update = {layer: s for (k, layer, phase), s in timers.totals.items() if phase == "update" and k == step}
    weighted = [layer for layer in net.layers if layer.weights]
    assert set(update) == {layer.name for layer in weighted}
    counts = {layer.name: sum(int(np.prod(shape)) for _, shape in layer.weights) for layer in weighted}
    big = max(counts, key=counts.get)
    for name, n in counts.items():
        assert update[name] / update[big] == pytest.approx(n / counts[big], rel=1e-9)


def test_a_shared_span_charges_each_layer_its_part_and_draws_them_in_turn():
    ticks = iter([1.0, 5.0])
    timers = Timers(keep_spans=True, clock=lambda: next(ticks))
    timers.begin_step = lambda step: setattr(timers, "step", step)
    timers.begin_step(0)
    with timers.shared_span("update", {"a": 1, "b": 3}):
        pass
    assert timers.totals == {(0, "a", "update"): 1.0, (0, "b", "update"): 3.0}
    assert [(s.layer, s.start_s, s.end_s) for s in timers.spans] == [("a", 1.0, 2.0), ("b", 2.0, 5.0)]
