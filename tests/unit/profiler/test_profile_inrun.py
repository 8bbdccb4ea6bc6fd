"""In-run timing (execute --fresh-profile): kernels timed once per round after a barrier, the calls
before each replayed, collectives after their kernels or a cache pass, the slowest rank's median."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import profiler.in_step.kernels as inrun
import profiler.in_step.collectives as ic
from costmodel.step.collective_calls import CommCall
from dnnplan.cli import app
from profiler.in_step.kernels import entries_from_samples, merge_samples

from tests.support.profile_calls import _two_calls

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("dnnplan_cache")


def test_in_run_timer_times_each_call_once_per_round_after_a_barrier(monkeypatch):
    """--fresh-profile's in-run timing: one sample per call and round, a barrier before each call,
    operands built once and kept (or rebuilt every round when there is no room to keep them)."""
    calls = _two_calls()
    built = []
    real_build = inrun.build
    monkeypatch.setattr(inrun, "build", lambda call, xp, shared=None: built.append(call.key) or real_build(call, xp, shared))
    barriers = []
    timer = inrun.InRunTimer(calls + calls[:1])  # a repeated call is timed once per round
    for _ in range(3):
        timer.round(lambda: barriers.append(1))
    assert set(timer.samples) == {c.key for c in calls}
    assert all(len(v) == 3 and min(v) > 0 for v in timer.samples.values())
    # a call timed on operands of its own (a weighted forward, a backward) is built twice
    twice = [c.key for c in calls if inrun.reads_weights(c) or inrun.reads_saved(c)]
    assert twice == ["linear.fwd|64,64,64,0|float32|"]
    assert len(barriers) == 3 * len(calls) and sorted(built) == sorted([c.key for c in calls] + twice)
    built.clear()
    tight = inrun.InRunTimer(calls, cache_bytes=0)
    tight.round()
    tight.round()
    assert len(built) == 2 * (len(calls) + len(twice))


def test_in_run_timer_replays_the_calls_before_each_and_keeps_their_outputs_alive(monkeypatch):
    """Each sample: the call runs once, untimed, then the calls just before it in the step run,
    their outputs alive until the timed run (they are its inputs in the step), then it is timed; a
    call with no known predecessors is timed as the profiler times it (warm-up, pass, run)."""
    calls = _two_calls()
    first, second = calls[0].key, calls[1].key
    log = []

    class Out:
        def __init__(self, key):
            self.key = key

        def __del__(self):
            log.append(("freed", self.key))

    def build(call, xp, shared=None):
        def run():
            log.append(("run", call.key))
            return Out(call.key)
        return run
    monkeypatch.setattr(inrun, "build", build)
    timer = inrun.InRunTimer(calls, before={second: (calls[0],)})
    assert timer.before == {first: (), second: (calls[0],)}
    timer.round(lambda: log.append(("barrier",)))
    log.clear()
    timer.round(lambda: log.append(("barrier",)))
    assert log == [("run", first), ("freed", first), ("barrier",), ("run", first), ("freed", first),
                   ("run", second), ("freed", second), ("barrier",), ("run", first), ("run", second),
                   ("freed", second), ("freed", first)]
    assert [len(v) for v in timer.samples.values()] == [2, 2]


def test_in_run_collectives_follow_the_kernels_before_them_or_the_cache_pass(monkeypatch):
    """A cold collective with known kernels before it is timed right after they run (outputs alive
    until it is made); a warm one, or a cold one without them, after its state's cache pass."""
    k1, k2 = _two_calls()
    log = []

    class Comm:
        def Get_size(self):
            return 2

        def Get_rank(self):
            return 0

    class Kernels:
        def run(self, call):
            log.append(("kernel", call.kernel))
            return call.kernel

    monkeypatch.setattr(ic, "collective_op", lambda sub, call: lambda: log.append(("op", call.key)))
    monkeypatch.setattr(ic, "cache_pass", lambda state: log.append(("pass", state)))
    after = CommCall("allreduce", 4096, 2, "cold", (k1, k2))
    warm = CommCall("allreduce", 4096, 2, "warm", (k1,))  # kernels before a warm call are not run
    bare = CommCall("alltoallv", 64, 2, "cold")
    assert after == CommCall("allreduce", 4096, 2, "cold") and hash(after) == hash(CommCall("allreduce", 4096, 2, "cold"))
    timer = ic.InRunComm([after, warm, bare], Comm(), Kernels())
    timer.round(lambda: log.append(("barrier",)), keep=False)
    log.clear()
    timer.round(lambda: log.append(("barrier",)))
    assert log == [("kernel", k1.kernel), ("kernel", k2.kernel), ("barrier",), ("op", after.key),
                   ("pass", "warm"), ("barrier",), ("op", warm.key),
                   ("pass", "cold"), ("barrier",), ("op", bare.key)]
    assert all(len(v) == 1 for v in timer.samples.values())


def test_in_run_samples_keep_the_slowest_rank_per_round_and_their_median():
    calls = _two_calls()
    a, b = calls[0].key, calls[1].key
    slowest = merge_samples([{a: [1.0, 5.0, 2.0], b: [2.0]}, {a: [3.0, 4.0, 1.0], b: [1.0]}])
    assert slowest == {a: [3.0, 5.0, 2.0], b: [2.0]}
    e = entries_from_samples(calls, slowest)
    assert e[a].median_s == 3.0 and e[a].min_s == 2.0 and e[a].count == 3 and e[a].flops == calls[0].flops
    assert e[b].median_s == 2.0
    assert entries_from_samples(calls, {a: []}) == {}


def test_execute_fresh_profile_flag_is_documented():
    r = runner.invoke(app, ["execute", "--help"])
    assert r.exit_code == 0 and "--fresh-profile" in r.output


def test_the_steps_updates_are_timed_back_to_back_in_its_order_each_on_its_own_operands(monkeypatch):
    """The update phase: every occurrence of an update call in the step gets its own operands and
    runs in the step's order after one barrier; a key's sample is the mean over its occurrences."""
    from costmodel.calls.kernel_call import KernelCall
    from costmodel.compute.call_context import updates_of
    a = KernelCall("sgd.update", (4096,), "float32", "", 3 * 4096, 5 * 4096 * 4)
    b = KernelCall("sgd.update", (64,), "float32", "", 3 * 64, 5 * 64 * 4)
    other = _two_calls()[0]
    steps = [other, a, b, a]
    assert updates_of(steps) == [a, b, a]
    built = []
    real_build = inrun.build
    monkeypatch.setattr(inrun, "build", lambda call, xp, shared=None: built.append(call.key) or real_build(call, xp, shared))
    barriers = []
    timer = inrun.InRunTimer([other, a, b], updates=updates_of(steps))
    assert timer.updates == (a, b, a)
    for keep in (False, True, True):
        timer.round(lambda: barriers.append(1), keep=keep)
    assert all(len(timer.samples[c.key]) == 2 and min(timer.samples[c.key]) > 0 for c in (other, a, b))
    # one operand set per update occurrence; the weighted forward's two (profiler.in_step.kernels.reads_weights)
    assert sorted(built) == sorted([other.key, other.key, a.key, b.key, a.key])
    assert len(barriers) == 3 * 2  # the other call's barrier and the update phase's
    # an update the timer is not asked for, or no room: each update is timed as any call
    assert inrun.InRunTimer([other, a], updates=[a, b]).updates == ()
    assert inrun.InRunTimer([a, b], updates=[a, b], cache_bytes=10).updates == ()


def test_the_incoming_operand_is_read_into_the_caches_before_a_weight_gradient_kernels_replay(monkeypatch):
    """A call's incoming gradient was written by the input-gradient kernel before it; when the call
    just before it is a weight-gradient kernel (which runs after that one and writes only weight
    gradients), the operand is read between the two replays, not after both."""
    from costmodel.calls.kernel_call import KernelCall
    log = []

    def call(kernel):
        return KernelCall(kernel, (64,), "float32", "", 64, 256)
    data, weights, relu = call("linear.bwd_data"), call("linear.bwd_weights"), call("relu.bwd")
    monkeypatch.setattr(inrun, "build", lambda c, xp, shared=None: lambda: log.append(("run", c.kernel)))
    monkeypatch.setattr(inrun, "touch", lambda operand: log.append(("touch",)))
    monkeypatch.setattr(inrun, "one_call", lambda run: lambda: run() or 1.0)
    timer = inrun.InRunTimer([relu], before={relu.key: (data, weights)})
    timer.round(keep=False)
    log.clear()
    timer.round()
    assert log == [("run", "relu.bwd"), ("run", "linear.bwd_data"), ("touch",), ("run", "linear.bwd_weights"),
                   ("run", "relu.bwd")]
    assert not inrun.writes_weight_grads(data) and inrun.writes_weight_grads(weights)
    log.clear()
    other = inrun.InRunTimer([relu], before={relu.key: (weights, data)})  # an input-gradient kernel last
    other.round(keep=False)
    log.clear()
    other.round()
    assert log == [("run", "relu.bwd"), ("run", "linear.bwd_weights"), ("run", "linear.bwd_data"), ("touch",),
                   ("run", "relu.bwd")]


def test_a_timer_keeps_operands_up_to_its_limit_or_a_quarter_of_the_free_memory(monkeypatch):
    """profiler.in_step.kernels.keep_room: the default room of an InRunTimer is CACHE_BYTES (4 GiB), or a
    quarter of the memory free when it starts if less (1 GiB where that is not known)."""
    pages = {"SC_AVPHYS_PAGES": 1 << 20, "SC_PAGE_SIZE": 4096}  # 4 GiB free
    monkeypatch.setattr(inrun.os, "sysconf", lambda name: pages[name])
    assert inrun.keep_room() == 1 << 30 and inrun.InRunTimer([])._room == 1 << 30
    pages["SC_AVPHYS_PAGES"] = 1 << 24  # 64 GiB free
    assert inrun.keep_room() == inrun.CACHE_BYTES == 4 << 30
    assert inrun.keep_room(1 << 20) == 1 << 20

    def unknown(name):
        raise ValueError(name)
    monkeypatch.setattr(inrun.os, "sysconf", unknown)
    assert inrun.keep_room() == 1 << 30
