"""On-demand profiling of machine `local`: the cache it fills (named by kernel revision, keeping
fitted collectives), the calls a prediction looks up, installing entries, and --refresh-profile."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import kernels
from costmodel.machine.loading import load_machine
from costmodel.parallel.shard import local_layer
from costmodel.compute.profile_table import Entry, ProfileTable, with_entries
from costmodel.parallel.strategy import Strategy
from dnnplan.cli import app
from networks.loader import load_network
from profiler import ondemand
from profiler.context import compute_model
from profiler.ondemand import local_compute_model
from profiler.tables.store import write_table

from tests.support.profile_calls import _two_calls

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("dnnplan_cache")


def test_local_machine_profiles_on_demand_into_the_cache(tmp_path):
    r = runner.invoke(app, ["predict", "lenet5", "--machine", "local", "--devices", "1", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["compute_model"].startswith("profile ")
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
    cache = tmp_path / "cache"
    cache.mkdir(exist_ok=True)
    fresh = local_compute_model(load_machine("local"), 1, progress=False, concurrency=2)
    assert f"-2r-k{kernels.KERNELS_REVISION}-" in fresh.path and not fresh.table.comm
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


def test_calls_of_lists_what_a_prediction_looks_up_and_install_replaces_entries():
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


def test_into_a_pipe_what_is_timed_is_a_line_now_and_then(monkeypatch, capsys):
    """On a terminal the timing status redraws one line; into a file or pipe (capsys's stderr is
    neither a terminal) it is printed as a line of its own, at most every SAY_EVERY_S, so a long
    timing (a sweep's machine `local` points) is not minutes of silence in a log."""
    cm = local_compute_model(load_machine("local"), progress=True)
    now = [0.0]
    monkeypatch.setattr(ondemand.time, "perf_counter", lambda: now[0])
    for at, text in ((100.0, "profiling kernel 1: a"), (101.0, "profiling kernel 2: b"),
                     (100.5 + ondemand.SAY_EVERY_S, "profiling kernel 3: c")):
        now[0] = at
        cm._say(text)
    assert capsys.readouterr().err.splitlines() == ["profiling kernel 1: a", "profiling kernel 3: c"]
    quiet = local_compute_model(load_machine("local"), progress=False)
    quiet._say("profiling kernel 4: d")
    assert capsys.readouterr().err == ""


def test_a_cache_that_cannot_be_written_is_said_once_and_the_plan_goes_on(tmp_path, monkeypatch):
    """HOME not writable (a cluster's compute nodes) and no DNNPLAN_CACHE: the plan is answered, the
    kernels timed are not cached, said in one warning (the periodic save failed the plan, exit 74,
    and the exit's save said it again)."""
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("DNNPLAN_CACHE", str(blocked / "cache"))  # a folder under a file: never made
    r = runner.invoke(app, ["plan", "lenet5", "-p", "2", "--machine", "local", "--time-limit", "30"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert text.count("the kernels timed are not cached") == 1 and "set DNNPLAN_CACHE to a folder" in text
    assert "step " in text
