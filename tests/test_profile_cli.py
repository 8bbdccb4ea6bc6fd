"""profile / profile-comm end to end, the comm fit on synthetic data, the harness, the cupy path."""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from costmodel.comm_fit import COLLECTIVES, fit, fit_all, model_s
from costmodel.kernel_calls import kernel_calls
from costmodel.machine import LinkLevel
from dnnplan.cli import app
from profiler.harness import QUICK, build, time_call
from kernels.xp import gpu_available

runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DNNPLAN_CACHE", str(tmp_path / "cache"))


def test_profile_lenet5_end_to_end(tmp_path):
    out = tmp_path / "lenet.json"
    r = runner.invoke(app, ["profile", "lenet5", "--devices", "1,2", "--out", str(out), "--quick", "--json",
                            "--max-seconds", "20"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["measured"] > 20 and s["entries"] == s["measured"] + s["left"] * 0 and not s["failed"]
    table = json.loads(out.read_text())
    assert table["format"] == "dnnplan-profile" and table["fingerprint"]["backend"] == "numpy"
    # resume: nothing left to measure
    r2 = runner.invoke(app, ["profile", "lenet5", "--devices", "1,2", "--out", str(out), "--quick", "--json"])
    assert json.loads(r2.output)["measured"] == 0
    # the planner side reads it
    r3 = runner.invoke(app, ["predict", "lenet5", "--devices", "2", "--profile", str(out), "--json"])
    assert r3.exit_code == 0, r3.output


def test_profile_gemm_sweep_and_budget(tmp_path):
    out = tmp_path / "g.json"
    r = runner.invoke(app, ["profile", "gemm", "--sizes", "16,32", "--out", str(out), "--quick"])
    assert r.exit_code == 0, r.output
    assert "8 kernel shapes measured" in r.output


def test_profile_rejects_foreign_table(tmp_path):
    out = tmp_path / "g.json"
    runner.invoke(app, ["profile", "gemm", "--sizes", "16", "--out", str(out), "--quick"])
    r = runner.invoke(app, ["profile", "gemm", "--sizes", "16", "--out", str(out), "--quick", "--threads", "2"])
    assert r.exit_code == 2 and "another device" in r.output


def test_profile_bad_inputs_are_one_line_errors():
    r = runner.invoke(app, ["profile", "lenet5", "--devices", "1,x"])
    assert r.exit_code == 2 and "--devices" in r.output
    r = runner.invoke(app, ["profile", "lenet5", "--backend", "tpu"])
    assert r.exit_code == 2


def test_help():
    for cmd in ("profile", "profile-comm"):
        assert runner.invoke(app, [cmd, "--help"]).exit_code == 0


def test_comm_fit_recovers_synthetic_parameters():
    link = LinkLevel("t", 3e-6, 1e-10, 4e-10)
    sizes = [8 * 4**k for k in range(12)]
    meas = [(c, n, model_s(c, n, 2, link)) for c in COLLECTIVES for n in sizes]
    per, joint = fit_all(meas, 2)
    assert joint.alpha_s == pytest.approx(3e-6, rel=1e-6)
    assert joint.beta_s_per_byte == pytest.approx(1e-10, rel=1e-6)
    assert joint.gamma_s_per_byte == pytest.approx(4e-10, rel=1e-6)
    assert joint.max_error < 1e-9
    assert per["sendrecv"].gamma_s_per_byte == 0.0


def test_comm_fit_is_nonnegative_on_noisy_data():
    rng = np.random.default_rng(0)
    link = LinkLevel("t", 2e-6, 2e-10, 0.0)
    meas = [("allreduce", n, model_s("allreduce", n, 4, link) * rng.uniform(0.8, 1.2)) for n in (8, 64, 4096, 2**20)]
    f = fit(meas, 4)
    assert min(f.alpha_s, f.beta_s_per_byte, f.gamma_s_per_byte) >= 0
    assert f.median_error < 0.25


def test_harness_builds_and_times_every_kernel_of_small_nets():
    from networks.loader import load_network
    from profiler.collect import network_calls
    kinds = {}
    for name in ("lenet5", "resnet18"):
        net = load_network(name)
        for call in network_calls(net, [1], lambda p: 1, ("im2col",)):
            kinds.setdefault(call.kernel, call)
    for call in kinds.values():
        e = time_call(call, policy=QUICK) if call.flops < 5e8 else None
        if e is not None:
            assert e.median_s > 0 and e.count >= 3 and e.min_s <= e.median_s


@pytest.mark.mpi
def test_profile_comm_two_ranks(tmp_path):
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["profile-comm", "--ranks", "2", "--sizes", "8,4096,65536", "--cap", "0.02",
                            "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert set(s["collectives"]) == set(COLLECTIVES) and s["link"]["alpha_s"] >= 0
    assert json.loads(out.read_text())["comm"]["ranks"] == 2


def test_comm_bench_samples_single_calls_after_a_cache_pass_and_keeps_the_median(monkeypatch):
    """Collectives are timed as kernels are: ONE call per sample, after a cache-disturbing pass and
    a barrier, the median kept (a loop's fastest sample would price the hot case only)."""
    import time

    import profiler.comm_bench as cb
    events, slow = [], iter([0, 0, 0, 0, 0.03, 0.03] + [0] * 100)  # 2 warm-up calls, then samples

    class OneRank:
        def Barrier(self):
            events.append("barrier")

        def allreduce(self, x, op=None):
            return x

        def bcast(self, x, root=0):
            return x

    def op():
        events.append("op")
        time.sleep(next(slow))

    monkeypatch.setattr(cb, "cache_pass", lambda state: events.append(f"pass {state}"))
    t = cb._bench(OneRank(), op, min_samples=5, cap_s=0.0, state="cold")
    assert events == ["op", "op"] + ["pass cold", "barrier", "op"] * 5
    assert t < 0.01  # two 30 ms samples of five: the median is a fast one


def test_comm_bench_cold_pass_covers_the_last_level_cache(monkeypatch):
    """Warm: a pass larger than a core's L2 (as after another collective); cold: one over the
    whole last-level cache (as after a layer's kernels), never smaller than the warm one."""
    import profiler.comm_bench as cb
    from profiler.harness import DISTURB_ELEMS
    monkeypatch.setattr(cb, "last_level_cache_bytes", lambda: 64 << 20)
    assert cb.pass_elems("warm") == DISTURB_ELEMS
    assert cb.pass_elems("cold") == (64 << 20) // 4
    monkeypatch.setattr(cb, "last_level_cache_bytes", lambda: 1 << 20)
    assert cb.pass_elems("cold") == DISTURB_ELEMS


def test_comm_section_keeps_warm_and_cold_fits_and_the_bench_revision():
    from profiler.comm import comm_section
    from profiler.comm_bench import BENCH_REVISION
    sizes = [2 ** k for k in range(3, 22)]
    warm = [(c, n, 5e-6 + n * 1e-10) for c in ("allreduce", "alltoall") for n in sizes]
    cold = [(c, n, 6e-5 + n * 3e-10) for c, n, _ in warm]
    section, per, _ = comm_section({"warm": warm, "cold": cold}, 2)
    assert section["bench"] == BENCH_REVISION and set(section["cold"]["collectives"]) == set(per)
    w = section["collectives"]["allreduce"]["points"]
    c = section["cold"]["collectives"]["allreduce"]["points"]
    assert all(cp[2] > wp[2] for wp, cp in zip(w, c))  # the cold measurements, not the warm ones again
    assert "cold" not in comm_section({"warm": warm}, 2)[0]


@pytest.mark.gpu
def test_cupy_timing_matches_kernel_shapes():
    if not gpu_available():
        pytest.skip("no cupy / CUDA device")
    import cupy as cp
    from costmodel.kernel_calls import linear_call
    call = linear_call("linear.fwd", 512, 512, 512, True, "float32", 4)
    e = time_call(call, cp, QUICK)
    assert e.median_s > 0
    y = build(call, cp)()
    assert isinstance(y, cp.ndarray) and y.shape == (512, 512)


def test_local_machine_profiles_on_demand_into_the_cache(tmp_path):
    r = runner.invoke(app, ["predict", "lenet5", "--machine", "local", "--devices", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["compute_model"].startswith("profile ")
    from profiler.context import compute_model
    from costmodel.files import load_machine
    from costmodel.layer_layouts import local_layer
    from costmodel.strategy import Strategy
    from networks.loader import load_network
    cm = compute_model(load_machine("local"))
    layer = load_network("lenet5").layers[0]
    assert cm.pass_s(local_layer(layer, Strategy(1), 4), "fwd", "direct") > 0
    assert not cm.misses
    cm.save()
    files = list((tmp_path / "cache").glob("profile-numpy-1t-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["entries"]


def test_a_new_kernel_revision_starts_a_new_cache_and_keeps_the_fitted_collectives(tmp_path, monkeypatch):
    """Timings of older kernels are not reused (the cache file names the kernel revision), but the
    collectives `dnnplan profile-comm` fitted are carried over from the same device and ranks."""
    from costmodel.files import load_machine
    import kernels
    from profiler.ondemand import local_compute_model
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    fresh = local_compute_model(load_machine("local"), 1, progress=False, concurrency=2)
    assert f"-2r-k{kernels.KERNELS_REVISION}-" in fresh.path and not fresh.table.comm
    from costmodel.profile_table import Entry, ProfileTable
    from profiler.tables import write_table
    ident = fresh.path.rsplit("-", 1)[-1]

    def comm(ranks):
        return {"ranks": ranks, "link": {"alpha_s": 5e-6, "beta_s_per_byte": 1e-10, "gamma_s_per_byte": 1e-10}}

    def old_table(name, ranks):
        entry = Entry(1e-6, 1e-6, 0.0, 1, 1, 4)
        write_table(ProfileTable(dict(fresh.table.fingerprint), {"relu.fwd|1||": entry}, comm(ranks)),
                    str(cache / f"{name}-{ident}"))

    old_table("profile-numpy-1t-2r", 2)
    old_table("profile-numpy-1t", 1)
    old_table("profile-numpy-1t-3r-k1", 3)
    (cache / f"profile-numpy-1t-3r-k2-{ident}").write_text("{not a table")  # passed over
    two = local_compute_model(load_machine("local"), 1, progress=False, concurrency=2)
    assert dict(two.table.comm) == comm(2) and not two.table.entries
    one = local_compute_model(load_machine("local"), 1, progress=False)
    assert dict(one.table.comm) == comm(1)
    monkeypatch.setattr(kernels, "KERNELS_REVISION", kernels.KERNELS_REVISION + 1)
    three = local_compute_model(load_machine("local"), 1, progress=False, concurrency=3)
    assert dict(three.table.comm) == comm(3)


def test_companions_run_only_while_loaded():
    """Companion processes (the other ranks sharing the machine) burn CPU only while a call is
    being timed, and are gone after close."""
    import time as _time

    from costmodel.kernel_calls import KernelCall
    from profiler.companions import Companions

    def cpu_seconds(pids):
        total = 0.0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    call = KernelCall("relu.fwd", (100_000,), "float32", "", 100_000, 800_000)
    comp = Companions(1)
    procs = list(comp.procs)
    pids = [p.pid for p in procs]
    try:
        comp.load(call)
        before = cpu_seconds(pids)
        _time.sleep(0.5)
        busy = cpu_seconds(pids) - before
        comp.pause()
        before = cpu_seconds(pids)
        _time.sleep(0.5)
        idle = cpu_seconds(pids) - before
    finally:
        comp.close()
    assert busy > 0.2 and idle < 0.05
    assert procs and all(not p.is_alive() for p in procs)


def test_piecewise_comm_fit_finds_the_size_regimes_one_line_cannot():
    """Synthetic allreduce whose per-byte cost triples above 1 MiB (out of cache): one line is off
    by tens of percent, the piecewise fit recovers both regimes to a fraction of a percent."""
    from costmodel.comm_fit import fit_regimes
    small, big = LinkLevel("s", 3e-6, 1e-10, 1e-10), LinkLevel("b", 3e-6, 3e-10, 3e-10)
    sizes = [8 * 2**k for k in range(22)]
    meas = [("allreduce", n, model_s("allreduce", n, 2, small if n <= 2**20 else big)) for n in sizes]
    one = fit(meas, 2)
    pieces = fit_regimes(meas, 2)
    assert one.max_error > 0.2
    assert pieces.max_error < 0.01
    assert 1 < len(pieces.regimes) <= 3 and math.isinf(pieces.regimes[-1][0])
    assert [u for u, *_ in pieces.regimes][:-1] == sorted(u for u, *_ in pieces.regimes[:-1])
    top = pieces.regime_links[-1][1]  # beta and gamma are collinear here: compare times, not parameters
    assert model_s("allreduce", 2**23, 2, top) == pytest.approx(model_s("allreduce", 2**23, 2, big), rel=1e-3)


def _two_calls():
    from costmodel.kernel_calls import linear_call, reshard_copy_call
    return [linear_call("linear.fwd", 64, 64, 64, False, "float32", 4),
            reshard_copy_call(4096, 64, "float32", False)]


def test_in_run_timer_times_each_call_once_per_round_after_a_barrier(monkeypatch):
    """--fresh-profile's in-run timing: one sample per call and round, a barrier before each call,
    operands built once and kept (or rebuilt every round when there is no room to keep them)."""
    import profiler.inrun as inrun
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
    assert len(barriers) == 3 * len(calls) and sorted(built) == sorted(c.key for c in calls)
    built.clear()
    tight = inrun.InRunTimer(calls, cache_bytes=0)
    tight.round()
    tight.round()
    assert len(built) == 2 * len(calls)


def test_in_run_timer_replays_the_calls_before_each_and_keeps_their_outputs_alive(monkeypatch):
    """Each sample: the call runs once, untimed, then the calls just before it in the step run,
    their outputs alive until the timed run (they are its inputs in the step), then it is timed; a
    call with no known predecessors is timed as the profiler times it (warm-up, pass, run)."""
    import profiler.inrun as inrun
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
    import profiler.inrun_comm as ic
    from costmodel.comm_calls import CommCall
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
    from profiler.inrun import entries_from_samples, merge_samples
    calls = _two_calls()
    a, b = calls[0].key, calls[1].key
    slowest = merge_samples([{a: [1.0, 5.0, 2.0], b: [2.0]}, {a: [3.0, 4.0, 1.0], b: [1.0]}])
    assert slowest == {a: [3.0, 5.0, 2.0], b: [2.0]}
    e = entries_from_samples(calls, slowest)
    assert e[a].median_s == 3.0 and e[a].min_s == 2.0 and e[a].count == 3 and e[a].flops == calls[0].flops
    assert e[b].median_s == 2.0
    assert entries_from_samples(calls, {a: []}) == {}


def test_calls_of_lists_what_a_prediction_looks_up_and_install_replaces_entries():
    from costmodel.files import load_machine
    from costmodel.profile_table import Entry
    from profiler.ondemand import local_compute_model
    calls = _two_calls()
    cm = local_compute_model(load_machine("local"), progress=False)
    got = cm.calls_of(lambda: [cm.lookup(calls[1]), cm.lookup(calls[0]), cm.lookup(calls[1])])
    assert got == [calls[1], calls[0]]
    assert cm.calls_of(lambda: None) == []
    slow = Entry(7.0, 7.0, 0.0, 4, calls[0].flops, calls[0].bytes)  # never a 64^3 GEMM's time here
    cm.install({calls[0].key: slow})
    assert cm.lookup(calls[0]).seconds == 7.0
    cm.save()
    again = local_compute_model(load_machine("local"), progress=False)  # the cache file keeps its own
    assert again.lookup(calls[0]).seconds < 0.1


def test_refresh_times_every_call_again_once_and_updates_the_cache(monkeypatch):
    """--refresh-profile: a call already in the cache is timed again on its first lookup in the
    process (not on later ones), and the cache file gets the new time; without it the cache's
    entry is used as it is."""
    from costmodel.files import load_machine
    from costmodel.profile_table import Entry, with_entries
    from profiler import ondemand
    from profiler.ondemand import local_compute_model
    call = _two_calls()[0]
    stale = Entry(7.0, 7.0, 0.0, 4, call.flops, call.bytes)  # never a 64^3 GEMM's time here
    cm = local_compute_model(load_machine("local"), progress=False)
    cm.cached = with_entries(cm.cached, {call.key: stale})
    cm.new = {call.key: stale}
    cm.save()
    assert local_compute_model(load_machine("local"), progress=False).lookup(call).seconds == 7.0
    fresh = local_compute_model(load_machine("local"), progress=False, refresh=True)
    timed = []
    real = ondemand.time_call
    monkeypatch.setattr(ondemand, "time_call", lambda c, policy: timed.append(c.key) or real(c, policy=policy))
    first, second = fresh.lookup(call).seconds, fresh.lookup(call).seconds
    assert first < 0.1 and second == first and timed == [call.key]
    fresh.save()
    assert local_compute_model(load_machine("local"), progress=False).lookup(call).seconds == first


def test_plan_and_validate_offer_refresh_profile():
    for command in ("plan", "validate"):
        r = runner.invoke(app, [command, "--help"])
        assert r.exit_code == 0 and "--refresh-profile" in r.output
    r = runner.invoke(app, ["plan", "lenet5", "--devices", "2", "--refresh-profile"])  # machine dgx-a100
    assert r.exit_code == 0 and "--refresh-profile applies to machine `local`" in " ".join(r.output.split())


def test_execute_fresh_profile_flag_is_documented():
    r = runner.invoke(app, ["execute", "--help"])
    assert r.exit_code == 0 and "--fresh-profile" in r.output


def test_keep_freed_memory_applies_once_on_glibc():
    import platform

    from kernels.allocator import keep_freed_memory
    first = keep_freed_memory()
    assert keep_freed_memory() is first
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert first is True
