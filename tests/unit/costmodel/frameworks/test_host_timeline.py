"""The host as a resource of the step (costmodel.step.host_timeline): hand-worked timelines, and the
step a framework's host issues (costmodel.frameworks.host_calls) never below the device's kernels
or the host's own time."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from costmodel.frameworks.framework import HostCosts, Value
from costmodel.frameworks.host_calls import step_calls, with_host
from costmodel.frameworks.loading import load_framework
from costmodel.step.host_timeline import Call, run_timeline
from executor.session import predict as predicting
from costmodel.choices.training import TrainingChoices
from profiler import context


def test_device_bound_the_device_sum_after_the_first_issue():
    # each kernel (10) longer than the host's next call (1): the device never waits after the first
    line = run_timeline([Call("a", 1.0, 10.0)] * 3)
    assert line.end_s == 31.0 and line.device_s == 30.0 and line.host_s == 3.0
    assert line.host_bound == ()


def test_host_bound_the_host_sum_and_the_last_kernel():
    # each call costs the host 10 and the device 1: the device waits for every call
    line = run_timeline([Call("a", 10.0, 1.0)] * 3)
    assert line.end_s == 31.0
    assert line.host_bound == ("a",)


def test_alternating_the_host_runs_ahead_under_the_long_kernels():
    # a (host 1, device 10), b (host 10, device 1), twice: issued at 1, 11, 12, 22; started at
    # 1, 11, 12, 22; ended 11, 12, 22, 23. b's host time hides under a's kernel, not the reverse.
    calls = [Call("a", 1.0, 10.0), Call("b", 10.0, 1.0), Call("a", 1.0, 10.0), Call("b", 10.0, 1.0)]
    line = run_timeline(calls)
    assert line.end_s == 23.0
    assert line.end_s >= max(line.device_s, line.host_s)
    spans = {s.label: s for s in line.spans}
    assert sum(s.share_s for s in line.spans) == pytest.approx(line.end_s)
    assert spans["a"].share_s == 21.0 and spans["b"].share_s == 2.0


def test_a_sync_in_the_middle_makes_the_host_wait():
    # without the sync the second call is issued at 3 and waits for the stream (ends 12); with it,
    # the host waits until 11 for the first kernel, issues at 13 and the step ends at 14, the device
    # idle 2 of b's 3
    free = run_timeline([Call("a", 1.0, 10.0), Call("b", 2.0, 1.0)])
    synced = run_timeline([Call("a", 1.0, 10.0), Call("a", 0.0, sync=True), Call("b", 2.0, 1.0)])
    assert free.end_s == 12.0 and synced.end_s == 14.0
    assert {s.label: s.host_bound for s in synced.spans} == {"a": False, "b": True}


def test_two_streams_run_side_by_side():
    line = run_timeline([Call("a", 1.0, 10.0, stream=0), Call("b", 1.0, 10.0, stream=1)])
    assert line.end_s == 12.0


def test_never_below_either_sum_on_random_timelines():
    rng = random.Random(7)
    for _ in range(200):
        calls = [Call(rng.choice("abc"), rng.uniform(0, 2), rng.uniform(0, 2), sync=rng.random() < 0.1)
                 for _ in range(rng.randint(1, 30))]
        line = run_timeline(calls)
        assert line.end_s >= max(line.host_s, line.device_s) - 1e-12
        assert line.end_s <= line.host_s + line.device_s + 1e-12
        assert sum(s.share_s for s in line.spans) == pytest.approx(line.end_s)


def _gpt2(framework: str):
    choices = TrainingChoices.from_flags(precision="bf16", optimizer="adam", framework=framework, recompute="none")
    ctx = context.resolve("gpt2", 1, 8, "dgx-h100", choices=choices, network_defaults=True)
    return ctx, predicting.step(ctx, predicting.LayerSplits()).prediction


def test_a_framework_step_is_never_below_its_kernels_or_its_host():
    ctx, pred = _gpt2("pytorch")
    fw = ctx.framework
    calls = step_calls(replace(pred, host_s=0.0), ctx.network, fw)
    device = sum(c.device_s for c in calls)  # the kernels and the launch gaps
    assert device >= pred.work_s - pred.dispatch_s
    assert pred.step_s >= device - 1e-12 and pred.step_s >= sum(c.host_s for c in calls) - 1e-12
    assert pred.host_s > 0
    # a host a hundred times slower binds the step: every layer host-bound, the step its host's sum
    slow = replace(fw, host=replace(fw.host, op_s=Value(fw.host.op_s.value * 100)))
    bound = with_host(replace(pred, host_s=0.0), ctx.network, slow, gpu=True)
    host = sum(c.host_s for c in step_calls(pred, ctx.network, slow))
    assert bound.step_s == pytest.approx(host, rel=0.02) and len(bound.host_bound) == len(pred.layers)


def test_an_idle_host_and_a_cpu_leave_the_step_as_it_was():
    ctx, pred = _gpt2("ideal")
    assert pred.host_s == 0.0 and pred.host_bound == ()
    fw = load_framework("pytorch")
    assert with_host(pred, ctx.network, fw, gpu=False) is pred
    assert with_host(pred, ctx.network, replace(fw, host=HostCosts()), gpu=True) is pred


def test_cuda_graphs_issue_one_launch_a_step():
    ctx, pred = _gpt2("pytorch")
    fw = ctx.framework
    graphed = replace(fw, host=replace(fw.host, cuda_graphs=True, graph_launch_s=Value(1e-5)))
    calls = step_calls(replace(pred, host_s=0.0), ctx.network, graphed)
    assert len(calls) == 1 and calls[0].host_s == 1e-5


def test_an_ops_own_launch_cost_and_a_sync_inside_its_forward():
    """``kernels.<op>.launch_s`` prices that op's launches alone; ``sync_after`` makes the host wait
    for the device inside the op's forward pass, after that many launches (Megatron-Core's dropless
    token dispatch reading the tokens per expert), and never makes the step faster."""
    ctx, pred = _gpt2("pytorch")
    fw, plain = ctx.framework, replace(pred, host_s=0.0)
    base = step_calls(plain, ctx.network, fw)
    table = dict(fw.kernels)
    linear = fw.op("linear")
    mine = replace(fw, kernels=tuple(table.items()) + (("linear", replace(linear, launch_s=1e-3, sync_after=1)),))
    calls = step_calls(plain, ctx.network, mine)
    linear_layers = {layer.name for layer in ctx.network.layers if layer.op == "linear"}
    fwd = [c for c in calls if c.label.rsplit(" ", 1)[0] in linear_layers and c.label.endswith(" fwd")]
    launched = [c for c in fwd if not c.sync]
    assert launched and all(c.host_s >= 1e-3 for c in launched)
    syncs = [i for i, c in enumerate(fwd) if c.sync]
    assert len(syncs) == len(linear_layers) and all(not fwd[i - 1].sync for i in syncs)
    assert sum(c.host_s for c in calls) > sum(c.host_s for c in base)
    assert run_timeline(calls).end_s > run_timeline(base).end_s


def test_small_launches_carry_no_device_time_and_expose_the_host_after_a_sync():
    """``kernels.<op>.small``: the first launches of a pass take only their launch gap on the device,
    the rest share its time; after a sync among them the device waits for the host to issue them."""
    ctx, pred = _gpt2("pytorch")
    fw, plain = ctx.framework, replace(pred, host_s=0.0)
    linear = fw.op("linear")
    table = tuple(dict(fw.kernels).items())
    synced = replace(fw, kernels=table + (("linear", replace(linear, fwd=6, launch_s=1e-5, sync_after=1)),))
    small = replace(fw, kernels=table + (("linear", replace(linear, fwd=6, launch_s=1e-5, sync_after=1, small=4)),))
    gap = fw.host.launch_gap_s.value
    calls = step_calls(plain, ctx.network, small)
    name = next(layer.name for layer in ctx.network.layers if layer.op == "linear")
    fwd = [c for c in calls if c.label == f"{name} fwd" and not c.sync]
    assert [c.device_s == gap for c in fwd] == [True] * 4 + [False] * 2
    assert sum(c.device_s for c in fwd) == pytest.approx(sum(c.device_s for c in step_calls(plain, ctx.network, synced)
                                                             if c.label == f"{name} fwd"))

    def idle(framework) -> float:  # the device's wait for the linear's forward launches
        line = run_timeline(step_calls(plain, ctx.network, framework))
        return next(span.idle_s for span in line.spans if span.label == f"{name} fwd")

    assert idle(small) > idle(synced)


def test_more_local_experts_make_the_step_host_bound():
    """The step's calls add ``kernels.moe.per_local_expert`` launches per expert of each mixture of
    experts' shard: tiny-moe's 4 experts on one GPU, at 2 launches an expert each half of the
    forward's kernels (every other launch free), bind its mixture-of-experts layers where the one
    fixed launch alone did not."""
    choices = TrainingChoices.from_flags(precision="bf16", optimizer="adam", framework="megatron", recompute="none")
    ctx = context.resolve("tiny-moe", 1, 8, "dgx-h100", choices=choices, network_defaults=True)
    pred = replace(predicting.step(ctx, predicting.LayerSplits()).prediction, host_s=0.0)
    fw, moes = ctx.framework, {layer.name for layer in ctx.network.layers if layer.op == "moe"}
    fw = replace(fw, host=replace(fw.host, op_s=Value(0.0), launch_s=Value(1e-15), launch_gap_s=Value(0.0)))
    table = tuple(dict(fw.kernels).items())
    fixed = replace(fw.op("moe"), fwd=1, bwd=1, sync_after=0, small=0, per_local_expert=(0, 0))
    device = sum(x.layer.fwd_compute_s for x in pred.layers if x.layer.name in moes)
    each = device / len(moes) / 2  # 1 + 4 x 2 = 9 launches: 4.5 forwards; 1: half of one
    plain = replace(fw, kernels=table + (("moe", replace(fixed, launch_s=each)),))
    experts = replace(fw, kernels=table + (("moe", replace(fixed, launch_s=each, per_local_expert=(2, 2))),))
    fwd = [c for c in step_calls(pred, ctx.network, experts) if c.label.endswith(" fwd")
           and c.label.rsplit(" ", 1)[0] in moes]
    assert len(fwd) == 9 * len(moes)
    assert not moes & set(with_host(pred, ctx.network, plain, gpu=True).host_bound)
    assert moes <= set(with_host(pred, ctx.network, experts, gpu=True).host_bound)
