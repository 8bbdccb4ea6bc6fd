"""The executor's own time per layer pass (dispatch): how passes are counted, how a table holds
and interpolates the probe's timings, how the step prediction adds them, and the probe itself."""

from __future__ import annotations

import math

import pytest
from mpi4py import MPI

from costmodel.compute import Roofline
from costmodel.files import load_machine
from costmodel.layer_cost import pass_bytes
from costmodel.layer_layouts import local_layer
from costmodel.profile_table import Entry, ProfileTable, table_from_dict, table_to_dict
from costmodel.profiled_compute import ProfiledCompute
from costmodel.step import predict_step
from costmodel.uniform import uniform_strategies
from executor.dispatch import PROBE, measure, outside_per_pass, probe_passes, typical_bytes
from executor.run import run_plan
from tests.support.cases import make_plan
from executor.timers import Timers
from networks.analysis import consumers
from networks.errors import DnnplanError
from networks.loader import load_network

FP = {"backend": "numpy", "device": "test cpu", "cores": 2, "threads": 1, "memory_bytes": 1}


def _entry(seconds: float, nbytes: int) -> Entry:
    return Entry(seconds, seconds, 0.1, 5, 0, nbytes)


def _compute(executor: dict) -> ProfiledCompute:
    table = ProfileTable(dict(FP), {}, {}, "<test>", executor)
    return ProfiledCompute(table, Roofline(load_machine("local")))


@pytest.mark.parametrize("name", ["lenet5", "alexnet", "resnet18", "googlenet", str(PROBE)])
@pytest.mark.parametrize("spec", ["data", "filter", "spatial"])
def test_pass_bytes_lists_one_entry_per_pass(name, spec):
    net = load_network(name)
    readers = consumers(net)
    strategies, _ = uniform_strategies(net, 2, 8, spec)
    for layer in net.layers:
        local = local_layer(layer, strategies[layer.name], 8)
        got = pass_bytes(local, "im2col" if layer.op == "conv2d" else "", readers[layer.name])
        # forward, backward, the update when it has weights, a gradient sum per extra reader
        assert len(got) == 2 + bool(layer.weights) + max(readers[layer.name] - 1, 0), layer.name
        assert all(b >= 0 for b in got)
    assert readers and max(readers.values()) >= 1


def test_every_pass_the_cost_model_counts_is_a_timed_span_of_the_runtime():
    # the passes pass_bytes counts are the runtime's: forward and backward of every layer, the
    # update of every layer with weights, a gradient sum per extra reader (in the producer's backward)
    net = load_network(str(PROBE))
    plan = make_plan(net, 4, 1, "data")
    timers = Timers(keep_spans=True)
    run_plan(plan, net, MPI.COMM_SELF, steps=1, warmup=0, timers=timers)
    readers = consumers(net)
    phases: dict[str, set] = {}
    for span in timers.spans:
        phases.setdefault(span.layer, set()).add(span.phase)
    for layer in net.layers:
        want = {"fwd_compute", "bwd_compute"} | ({"update"} if layer.weights else set())
        assert phases[layer.name] == want, layer.name
    assert any(n > 1 for n in readers.values())  # the probe has a shared output (a residual add)
    assert len(probe_passes(net, 4)) == sum(2 + bool(l.weights) + max(readers[l.name] - 1, 0) for l in net.layers)


def test_outside_per_pass_is_the_step_less_its_spans():
    timers = Timers(keep_spans=True)
    timers.step_wall = {0: 1.0, 1: 2.0}
    from executor.timers import Span
    timers.spans = [Span("a", "fwd_compute", 0.0, 0.25, 0), Span("b", "update", 0.5, 0.75, 0),
                    Span("a", "fwd_compute", 0.0, 1.5, 1)]
    assert outside_per_pass(timers, range(2), 4) == [0.125, 0.125]


def test_typical_bytes_is_the_geometric_mean():
    assert typical_bytes([10, 1000]) == 100
    assert typical_bytes([0, 1]) == 1  # a pass that moves nothing counts as one byte


def test_dispatch_is_linear_in_log_bytes_between_the_probe_sizes_and_flat_outside():
    pc = _compute({"dispatch/b8": _entry(20e-6, 1000), "dispatch/b64": _entry(40e-6, 100_000)})
    assert pc.pass_dispatch_s(10) == 20e-6 and pc.pass_dispatch_s(1000) == 20e-6
    assert pc.pass_dispatch_s(10**9) == 40e-6 and pc.pass_dispatch_s(100_000) == 40e-6
    assert pc.pass_dispatch_s(10_000) == pytest.approx(30e-6)
    a, b = pc.pass_dispatch_s(3000), pc.pass_dispatch_s(30_000)
    assert 20e-6 < a < b < 40e-6


def test_no_dispatch_entries_and_the_roofline_add_nothing():
    net = load_network("lenet5")
    local = local_layer(net.layers[0], uniform_strategies(net, 1, 4, "data")[0][net.layers[0].name], 4)
    assert _compute({}).pass_dispatch_s(1e6) == 0.0 and _compute({}).dispatch_s(local, "im2col", 1) == 0.0
    assert Roofline(load_machine("local")).dispatch_s(local, "im2col", 1) == 0.0
    other = _compute({"other": _entry(1.0, 5)})  # only dispatch/... entries count
    assert other.pass_dispatch_s(5) == 0.0 and other.dispatch_s(local, "im2col", 1) == 0.0


def test_the_step_prediction_adds_dispatch_per_pass_and_the_layers_keep_their_phases():
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 16, "data")
    plain = _compute({})
    timed = _compute({"dispatch/b8": _entry(20e-6, 1000), "dispatch/b64": _entry(40e-6, 100_000)})
    machine = load_machine("local")
    p0 = predict_step(net, 16, strategies, {}, machine, plain)
    p1 = predict_step(net, 16, strategies, {}, machine, timed)
    readers = consumers(net)
    want = sum(timed.pass_dispatch_s(b) for layer in net.layers
               for b in pass_bytes(local_layer(layer, strategies[layer.name], 16), "", readers[layer.name]))
    assert p0.dispatch_s == 0.0
    assert p1.dispatch_s == pytest.approx(want) and want > 20e-6 * len(net.layers) * 2
    assert p1.step_s == pytest.approx(p0.step_s + want)
    assert p1.fwd_s == p0.fwd_s and p1.bwd_s == p0.bwd_s and p1.update_s == p0.update_s


def test_the_planner_agrees_with_the_prediction_when_dispatch_is_priced():
    # make_plan checks its solver objective against predict_step (1e-9): dispatch is in both
    from planner.optimize import make_plan as plan_net
    net = load_network("lenet5")
    timed = _compute({"dispatch/b8": _entry(20e-6, 1000), "dispatch/b64": _entry(40e-6, 100_000)})
    plan = plan_net(net, "lenet5", 16, 2, load_machine("local"), timed, with_baselines=False)
    assert plan.step_s > 0


def test_executor_entries_round_trip_and_a_corrupt_one_is_a_clear_error():
    table = ProfileTable(dict(FP), {}, {}, "<test>", {"dispatch/b8": _entry(2e-5, 1234)})
    data = table_to_dict(table)
    back = table_from_dict(data, "<rt>")
    assert back.executor == table.executor
    assert "executor" not in table_to_dict(ProfileTable(dict(FP), {}, {}, "<test>"))
    data["executor"]["dispatch/b8"]["median_s"] = -1
    with pytest.raises(DnnplanError, match="executor entry 'dispatch/b8'"):
        table_from_dict(data, "<bad>")
    data["executor"] = [1, 2]
    with pytest.raises(DnnplanError, match="executor must be a mapping"):
        table_from_dict(data, "<bad>")


def test_the_probe_measures_a_positive_time_per_pass_at_each_size():
    small, small_bytes = measure(2, steps=3, warmup=1, comm=MPI.COMM_SELF)
    big, big_bytes = measure(8, steps=3, warmup=1, comm=MPI.COMM_SELF)
    assert len(small) == len(big) == 3
    assert all(s > 0 and math.isfinite(s) for s in small + big)
    assert small_bytes < big_bytes  # a bigger batch moves more per pass


def test_a_failing_probe_leaves_no_entry_and_says_why(monkeypatch):
    import profiler.dispatch as pd
    monkeypatch.setattr(pd.sys, "executable", "false")
    entries, why = pd.time_dispatch()
    assert entries == {} and "probe failed" in why


def test_backward_kernels_are_timed_on_operands_of_their_own():
    # a backward kernel reads what its forward saved, last touched a forward pass earlier: the
    # in-run timer warms the code with one set of operands and times another, untouched since
    from costmodel.reuse import step_calls
    from profiler.inrun import InRunTimer, reads_saved
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 4, "data")
    calls = list(dict.fromkeys(step_calls(net, 4, strategies, {})))
    saved = [c for c in calls if reads_saved(c)]
    assert {c.kernel for c in saved} >= {"conv2d.bwd_data", "conv2d.bwd_weights", "relu.bwd", "linear.bwd_data"}
    assert not any(reads_saved(c) for c in calls if c.kernel.endswith(".fwd") or c.kernel == "sgd.update")
    fwd = next(c for c in calls if c.kernel == "relu.fwd")
    bwd = next(c for c in calls if c.kernel == "relu.bwd")
    timer = InRunTimer([fwd, bwd], cache_bytes=1 << 30)
    timer.round(keep=False)
    assert timer._room == (1 << 30) - fwd.bytes - 2 * bwd.bytes  # two operand sets kept for the backward call
    timer.round()
    assert all(len(v) == 1 and v[0] > 0 for v in timer.samples.values())


def _arrays_of(closure):
    """ids of the arrays a closure holds, also inside tuples, lists, dicts and objects (a kernel's cache)."""
    import numpy
    found, todo = set(), [c.cell_contents for c in closure.__closure__ or ()]
    while todo:
        obj = todo.pop()
        if isinstance(obj, numpy.ndarray):
            found.add(id(obj))
        elif isinstance(obj, (tuple, list)):
            todo += obj
        elif isinstance(obj, dict):
            todo += obj.values()
        elif hasattr(obj, "__dict__") and not callable(obj):
            todo += vars(obj).values()
    return found


def test_two_builds_of_a_backward_kernel_share_its_incoming_gradient_only():
    # the in-run timer's timed operand set keeps the saved tensors apart (cold in a step) and
    # shares the gradient the step's previous kernel has just written (profiler.inrun.reads_saved)
    import numpy
    from costmodel.reuse import step_calls
    from profiler.harness import build
    from costmodel.kernel_calls import KernelCall
    from profiler.inrun import reads_saved
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 4, "data")
    calls = [c for c in dict.fromkeys(step_calls(net, 4, strategies, {})) if reads_saved(c)]
    calls.append(KernelCall("concat.bwd", (4, 9, 3, 5), "float32", "", 0, 0))
    assert {c.kernel for c in calls} >= {"conv2d.bwd_data", "conv2d.bwd_weights", "relu.bwd", "maxpool2d.bwd",
                                         "linear.bwd_weights"}
    for call in calls:
        shared = {}
        first, second = build(call, numpy, shared), build(call, numpy, shared)
        if "dy" not in shared:  # the loss's backward takes no incoming gradient
            assert call.kernel == "softmax_xent.bwd" and not _arrays_of(first) & _arrays_of(second)
            continue
        assert _arrays_of(first) & _arrays_of(second) == {id(shared["dy"])}, call.key
        if call.kernel != "concat.bwd":  # concat's backward saves only the sizes
            assert len(_arrays_of(second)) > 1, call.key  # it has saved operands of its own
        first(), second()
        alone_a, alone_b = build(call, numpy), build(call, numpy)
        assert not _arrays_of(alone_a) & _arrays_of(alone_b)  # without the mapping nothing is shared


def test_two_builds_of_a_weighted_forward_kernel_share_its_input_only():
    # a convolution's or linear layer's forward reads weights last touched a step earlier (the
    # update), and an input the kernel before it has just written: the in-run timer's timed
    # operand set keeps weights of its own and shares the input (profiler.inrun.reads_weights)
    import numpy
    from costmodel.reuse import step_calls
    from profiler.harness import build
    from profiler.inrun import InRunTimer, reads_saved, reads_weights
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 4, "data")
    calls = list(dict.fromkeys(step_calls(net, 4, strategies, {"conv1": "im2col", "conv2": "im2col"})))
    weighted = [c for c in calls if reads_weights(c)]
    assert {c.kernel for c in weighted} == {"conv2d.fwd", "linear.fwd"}
    assert not any(reads_weights(c) or reads_saved(c) for c in calls if c.kernel in ("relu.fwd", "maxpool2d.fwd"))
    for call in weighted:
        shared = {}
        first, second = build(call, numpy, shared), build(call, numpy, shared)
        assert "x" in shared, call.key
        assert _arrays_of(first) & _arrays_of(second) == {id(shared["x"])}, call.key
        assert len(_arrays_of(second)) > 1, call.key  # its weights are its own
        first(), second()
    timer = InRunTimer(weighted[:1], cache_bytes=1 << 30)
    timer.round(keep=False)
    assert timer._room == (1 << 30) - 2 * weighted[0].bytes  # two operand sets kept
    timer.round()
    assert len(timer.samples[weighted[0].key]) == 1
