"""`dnnplan profile` end to end (networks, GEMM sweeps, resuming, foreign tables, bad inputs), the
harness timing every kernel of small networks, companion processes, the allocator (the cupy path:
tests/gpu/profiles/test_gpu_profile_timing.py)."""

from __future__ import annotations

import json
import os
import platform
import time as _time

import pytest
from typer.testing import CliRunner

from costmodel.calls.kernel_call import KernelCall
from dnnplan.cli import app
from kernels.allocator import keep_freed_memory
from networks.loader import load_network
from profiler.collect import network_calls
from profiler.timing.companions import Companions
from profiler.timing.harness import QUICK, time_call

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("dnnplan_cache")


def test_profile_lenet5_end_to_end(tmp_path):
    out = tmp_path / "lenet.json"
    r = runner.invoke(app, ["profile", "lenet5", "--devices", "1,2", "--out", str(out), "--quick", "--json",
                            "--max-seconds", "20"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["measured"] > 20 and s["entries"] == s["measured"] + s["left"] * 0 and not s["failed"]
    table = json.loads(out.read_text())
    assert table["format"] == "dnnplan-profile" and table["fingerprint"]["backend"] == "numpy"
    # resume: nothing left to measure
    r2 = runner.invoke(app, ["profile", "lenet5", "--devices", "1,2", "--out", str(out), "--quick", "--json"])
    assert json.loads(r2.stdout)["measured"] == 0
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
    for cmd in (["profile", "lenet5"], ["profile-comm"]):  # before any rank is started
        r = runner.invoke(app, [*cmd, "--backend", "tpu"])
        assert r.exit_code == 2 and "unknown --backend 'tpu' (use numpy or cupy)" in r.output


def test_help():
    for cmd in ("profile", "profile-comm"):
        assert runner.invoke(app, [cmd, "--help"]).exit_code == 0


def test_harness_builds_and_times_every_kernel_of_small_nets():
    kinds = {}
    for name in ("lenet5", "resnet18"):
        net = load_network(name)
        for call in network_calls(net, [1], lambda p: 1, ("im2col",)):
            kinds.setdefault(call.kernel, call)
    for call in kinds.values():
        e = time_call(call, policy=QUICK) if call.flops < 5e8 else None
        if e is not None:
            assert e.median_s > 0 and e.count >= 3 and e.min_s <= e.median_s


def test_companions_run_only_while_loaded():
    """Companion processes (the other ranks sharing the machine) burn CPU only while a call is
    being timed, and are gone after close."""

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
        before, start = cpu_seconds(pids), _time.monotonic()
        busy = 0.0
        while busy <= 0.2 and _time.monotonic() - start < 10.0:  # on a loaded machine they get the CPU later
            _time.sleep(0.1)
            busy = cpu_seconds(pids) - before
        comp.pause()
        before = cpu_seconds(pids)
        _time.sleep(0.5)
        idle = cpu_seconds(pids) - before
    finally:
        comp.close()
    assert busy > 0.2 and idle < 0.05
    assert procs and all(not p.is_alive() for p in procs)


def test_keep_freed_memory_applies_once_on_glibc():
    first = keep_freed_memory()
    assert keep_freed_memory() is first
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert first is True


def test_a_gpu_profile_times_attention_fused_and_materialised_a_cpu_one_materialised():
    # the GPU machines plan flash attention by default: its table holds the fused calls it prices
    from profiler.service import ProfileRequest, plan_calls  # noqa: PLC0415

    def attention_algos(backend: str) -> set[str]:
        req = ProfileRequest("gpt-tiny", [1], batch=2, backend=backend, precision="fp32")
        return {c.algo for c in plan_calls(req) if c.kernel.startswith("attention.")}

    assert attention_algos("cupy") == {"", "flash"}
    assert attention_algos("numpy") == {""}
    # --algorithms names convolution algorithms; the attention's stay
    net = load_network("gpt-tiny")
    got = {c.algo for c in network_calls(net, [1], lambda p: 2, ("im2col",), ("", "flash"))
           if c.kernel.startswith("attention.")}
    assert got == {"", "flash"}


def test_kernel_shapes_that_could_not_be_timed_end_the_profile_with_exit_2(tmp_path):
    """A batch whose operands this computer cannot hold: the shapes that fit are kept in the table,
    the others counted in one line on stderr, exit 2 (it was exit 0, five of them listed)."""
    out = tmp_path / "big.json"
    r = runner.invoke(app, ["profile", "lenet5", "-b", "1000000000", "--out", str(out), "--quick", "--json"])
    assert r.exit_code == 2, r.output
    summary = json.loads(r.stdout.strip().splitlines()[0])
    failed, measured = len(summary["failed"]), summary["measured"]
    assert failed > 5 and set(summary["failed"].values()) == {"out of memory"}
    assert f"error: {failed} of {failed + measured} kernel shapes could not be timed (out of memory" in r.output
    assert "the table keeps the others (try a smaller --batch)" in r.output
    assert len(json.loads(out.read_text())["entries"]) == measured  # nothing lost


def test_sizes_given_for_a_networks_profile_are_said_to_change_nothing(tmp_path):
    """--sizes and --channels size the gemm and conv sweeps; a network is timed at its own shapes."""
    r = runner.invoke(app, ["profile", "lenet5", "--sizes", "3", "--max-seconds", "0.01", "--out",
                            str(tmp_path / "t.json")])
    assert r.exit_code == 0, r.output
    assert "warning: --sizes 3 changes nothing: it sizes the gemm and conv sweeps, and lenet5 is timed at its own " \
           "layers' shapes" in " ".join(r.output.split())


def test_a_bad_size_for_a_networks_profile_is_one_line_without_the_warning():
    """The value is checked before it is said to change nothing: one line, not a warning and an error."""
    r = runner.invoke(app, ["profile", "lenet5", "--sizes", "0"])
    assert r.exit_code == 2
    assert [line for line in r.output.splitlines() if line.strip()] == [
        "error: --sizes must list whole numbers from 1 to 16,384, got '0'"]
