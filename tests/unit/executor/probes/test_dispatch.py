"""The executor's own time per layer pass (dispatch): how passes are counted, how a table holds
and interpolates the probe's timings, how the step prediction adds them, and the probe itself."""

from __future__ import annotations

import math

import pytest
from mpi4py import MPI

from costmodel.compute.roofline import Roofline
from costmodel.machine.loading import load_machine
from costmodel.compute.dispatch import pass_bytes
from costmodel.parallel.shard import local_layer
from costmodel.compute.profile_table import Entry, ProfileTable, table_from_dict, table_to_dict
from costmodel.compute.profiled import ProfiledCompute
from costmodel.step.prediction import predict_step
from costmodel.frameworks.uniform import uniform_strategies
from executor.probes.dispatch import PROBE, after_passes, measure, probe_passes
from executor.runtime.run import run_plan
from executor.runtime.timers import Timers
from networks.analysis import consumers
from networks.errors import DnnplanError
from networks.loader import load_network

from tests.support.cases import make_plan

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


def test_the_time_after_a_pass_is_its_gaps_to_the_next_span_plus_a_share_of_the_rest():
    from executor.runtime.timers import Span
    timers = Timers(keep_spans=True)
    timers.step_wall = {0: 1.0, 1: 2.0}
    passes = [("a", "fwd_compute", 10), ("b", "update", 1000), ("a", "fwd_compute", 5)]
    timers.spans = [Span("a", "fwd_compute", 0.0, 0.25, 0), Span("b", "update", 0.5, 0.75, 0),
                    Span("a", "fwd_compute", 0.0, 1.5, 1)]
    got = after_passes(timers, range(2), passes)
    # step 0: a's gap to b 0.25; the rest (1 - 0.5 in spans - 0.25) split over 3 passes;
    # the third pass shares a's (layer, phase), so the gap is the first's alone
    assert [p["bytes"] for p in got] == [10, 1000, 5]
    assert got[0]["samples_s"] == pytest.approx([0.25 + 0.25 / 3, 0.5 / 3])
    assert got[1]["samples_s"] == pytest.approx([0.25 / 3, 0.5 / 3])
    assert got[2]["samples_s"] == got[1]["samples_s"]
    # the samples add up to the step's time outside its spans
    assert sum(p["samples_s"][0] for p in got) == pytest.approx(1.0 - 0.5)


def test_passes_are_binned_by_half_decades_of_bytes():
    from profiler.probes.dispatch import bin_passes
    got = bin_passes([(0, 1e-6), (1000, 2e-5), (3000, 4e-5), (100_000, 6e-5), (200_000, 9e-5)])
    assert set(got) == {"dispatch/h0", "dispatch/h6", "dispatch/h10"}
    assert got["dispatch/h0"].bytes == 1 and got["dispatch/h0"].median_s == 1e-6
    assert got["dispatch/h6"].median_s == pytest.approx(3e-5) and got["dispatch/h6"].bytes == round(math.sqrt(3e6))
    assert got["dispatch/h10"].count == 2


def test_an_older_tables_dispatch_per_batch_entries_are_not_read():
    # before 2026-11-26 a table held the probe's mean per pass at two batches (dispatch/b8, b64)
    pc = _compute({"dispatch/b8": _entry(20e-6, 1000), "dispatch/b64": _entry(40e-6, 100_000)})
    assert pc.pass_dispatch_s(10_000) == 0.0


def test_dispatch_is_linear_in_log_bytes_between_neighbouring_bins_and_flat_outside():
    pc = _compute({"dispatch/h6": _entry(20e-6, 1000), "dispatch/h10": _entry(40e-6, 100_000),
                   "dispatch/h14": _entry(10e-6, 10**7)})
    assert pc.pass_dispatch_s(10) == 20e-6 and pc.pass_dispatch_s(1000) == pytest.approx(20e-6)
    assert pc.pass_dispatch_s(10**9) == 10e-6 and pc.pass_dispatch_s(10**7) == pytest.approx(10e-6)
    assert pc.pass_dispatch_s(100_000) == pytest.approx(40e-6)
    assert pc.pass_dispatch_s(10_000) == pytest.approx(30e-6)
    assert pc.pass_dispatch_s(10**6) == pytest.approx(25e-6)  # between the second and third bins
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
    timed = _compute({"dispatch/h6": _entry(20e-6, 1000), "dispatch/h10": _entry(40e-6, 100_000)})
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
    from planner.problem.solve import make_plan as plan_net
    net = load_network("lenet5")
    timed = _compute({"dispatch/h6": _entry(20e-6, 1000), "dispatch/h10": _entry(40e-6, 100_000)})
    plan = plan_net(net, "lenet5", 16, 2, load_machine("local"), timed, with_baselines=False)
    assert plan.step_s > 0


def test_executor_entries_round_trip_and_a_corrupt_one_is_a_clear_error():
    table = ProfileTable(dict(FP), {}, {}, "<test>", {"dispatch/h6": _entry(2e-5, 1234)})
    data = table_to_dict(table)
    back = table_from_dict(data, "<rt>")
    assert back.executor == table.executor
    assert "executor" not in table_to_dict(ProfileTable(dict(FP), {}, {}, "<test>"))
    data["executor"]["dispatch/h6"]["median_s"] = -1
    with pytest.raises(DnnplanError, match="executor entry 'dispatch/h6'"):
        table_from_dict(data, "<bad>")
    data["executor"] = [1, 2]
    with pytest.raises(DnnplanError, match="executor must be a mapping"):
        table_from_dict(data, "<bad>")


def test_the_probe_measures_a_positive_time_after_each_pass_at_each_size():
    net = load_network(str(PROBE))
    small, big = (measure(b, steps=3, warmup=1, comm=MPI.COMM_SELF) for b in (2, 8))
    assert len(small) == len(big) == len(probe_passes(net, 2))
    for passes in (small, big):
        assert all(len(p["samples_s"]) == 3 for p in passes)
        assert all(s >= 0 and math.isfinite(s) for p in passes for s in p["samples_s"])
        assert sum(p["samples_s"][0] for p in passes) > 0
    assert sum(p["bytes"] for p in small) < sum(p["bytes"] for p in big)  # a bigger batch moves more


def test_the_profilers_probe_writes_binned_entries():
    import profiler.probes.dispatch as pd
    entries, why = pd.time_dispatch()
    assert why == "" and entries and all(k.startswith("dispatch/h") for k in entries)
    assert all(e.median_s >= 0 and e.bytes >= 1 for e in entries.values())
    assert _compute(entries).pass_dispatch_s(10**6) > 0


def test_a_failing_probe_leaves_no_entry_and_says_why(monkeypatch):
    import profiler.probes.dispatch as pd
    monkeypatch.setattr(pd.sys, "executable", "false")
    entries, why = pd.time_dispatch()
    assert entries == {} and "probe failed" in why


def test_a_probe_that_outlives_its_time_is_ended_with_every_process_it_started(monkeypatch, tmp_path):
    """The probe runs as a job of its own session (lifecycle.jobs): ending it ends its whole group
    (an MPI rank's helpers too), and the MPI shared memory and scratch folders its stopped ranks left
    go with it; killing the probe alone left them."""
    import os
    import time
    import profiler.probes.dispatch as pd
    child = tmp_path / "child.pid"
    probe = tmp_path / "probe.sh"
    probe.write_text(f"#!/bin/sh\nsleep 30 &\necho $! > {child}\nwait\n")
    probe.chmod(0o755)
    monkeypatch.setattr(pd.sys, "executable", str(probe))
    entries, why = pd.time_dispatch(timeout_s=1.0)
    assert entries == {} and "took more than 1 s" in why
    pid = int(child.read_text())
    for _ in range(50):  # the group was sent SIGTERM, then SIGKILL after a grace
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the probe's child {pid} still runs")


def test_backward_kernels_are_timed_on_operands_of_their_own():
    # a backward kernel reads what its forward saved, last touched a forward pass earlier: the
    # in-run timer warms the code with one set of operands and times another, untouched since
    from costmodel.compute.call_context import step_calls
    from profiler.in_step.kernels import InRunTimer, reads_saved
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
    # shares the gradient the step's previous kernel has just written (profiler.in_step.kernels.reads_saved)
    import numpy
    from costmodel.compute.call_context import step_calls
    from profiler.timing.harness import build
    from costmodel.calls.kernel_call import KernelCall
    from profiler.in_step.kernels import reads_saved
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
    # operand set keeps weights of its own and shares the input (profiler.in_step.kernels.reads_weights)
    import numpy
    from costmodel.compute.call_context import step_calls
    from profiler.timing.harness import build
    from profiler.in_step.kernels import InRunTimer, reads_saved, reads_weights
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


def test_step_context_times_the_probe_again_once_and_its_bins_replace_the_old(monkeypatch, tmp_path):
    """Before a run (executor.session.execute.step_context_entries) the probe is timed again, once per
    process and cache file; its bins replace every cached one in each model of this process opened
    on that file, and the file keeps the profile's (the planner's input stays the same, so a
    resumed validate plans the same plans); a probe that fails leaves the cached bins."""
    import profiler.probes.dispatch as pd
    from profiler.ondemand import OnDemandCompute
    monkeypatch.delenv("DNNPLAN_NO_PROFILE", raising=False)
    old = {"dispatch/h8": _entry(9e-5, 10**4), "dispatch/h18": _entry(9e-4, 10**9), "wait/p2": _entry(0.01, 0)}
    path = tmp_path / "cache.json"

    def model():
        return OnDemandCompute(ProfileTable(dict(FP), {}, {}, str(path), dict(old)), Roofline(load_machine("local")),
                               str(path), 1, progress=False)

    runs = []
    new = {"dispatch/h8": _entry(2e-5, 10**4), "dispatch/h12": _entry(4e-5, 10**6)}
    monkeypatch.setattr(pd, "time_dispatch", lambda threads, ranks: runs.append(threads) or (dict(new), ""))
    cm = model()
    cm.retime_dispatch()
    cm.retime_dispatch()
    assert runs == [1]
    assert set(cm.table.executor) == {"dispatch/h8", "dispatch/h12", "wait/p2"}
    assert cm.pass_dispatch_s(10**4) == pytest.approx(2e-5) and cm.pass_dispatch_s(10**9) == pytest.approx(4e-5)
    assert not path.exists()  # the cache file keeps the profile's bins: nothing written
    again = model()
    again.retime_dispatch()  # once per process and cache file, its bins in every model
    assert runs == [1] and set(again.table.executor) == {"dispatch/h8", "dispatch/h12", "wait/p2"}
    assert again.pass_dispatch_s(10**9) == pytest.approx(4e-5)
    monkeypatch.setattr(pd, "time_dispatch", lambda threads, ranks: ({}, "probe failed"))
    path = tmp_path / "other.json"
    failed = model()
    failed.retime_dispatch()
    assert failed.table.executor == old and failed.pass_dispatch_s(10**9) == pytest.approx(9e-4)


def test_the_timed_call_meets_its_incoming_operand_in_the_caches(monkeypatch):
    # after the calls before it are replayed, a forward kernel's input and a backward kernel's
    # incoming gradient are read into the caches, as the kernel that wrote them in the step leaves
    # them (a large predecessor's replay evicts them); a call with no known predecessor is not
    import profiler.in_step.kernels as inrun
    from costmodel.compute.call_context import step_calls
    net = load_network("lenet5")
    strategies, _ = uniform_strategies(net, 1, 4, "data")
    calls = list(dict.fromkeys(step_calls(net, 4, strategies, {})))
    relu_f, relu_b, conv, pool = (next(c for c in calls if c.kernel == k)
                                  for k in ("relu.fwd", "relu.bwd", "conv2d.fwd", "maxpool2d.fwd"))
    order = []
    monkeypatch.setattr(inrun, "touch", lambda a: order.append(("touch", a)))
    timer = inrun.InRunTimer([relu_f, relu_b, pool], before={relu_f.key: (conv,), relu_b.key: (conv,)})
    replay = timer.run
    timer.run = lambda c: order.append(("run", c.kernel)) or replay(c)
    timer.round()
    assert [step[0] if step[0] == "touch" else step[1] for step in order] == ["conv2d.fwd", "touch"] * 2
    for (_, touched), call, shape in zip(order[1::2], (relu_f, relu_b), ((relu_f.shape[0],), (relu_b.shape[0],))):
        assert touched.shape == shape and id(touched) in _arrays_of(timer._kept[call.key][0]), call.key
    assert order[1][1] is not order[3][1]  # the forward's input, then the backward's gradient
