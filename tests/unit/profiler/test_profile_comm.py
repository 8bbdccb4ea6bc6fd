"""Collective profiling: `dnnplan profile-comm`, the comm fit (one line and piecewise) on synthetic
data, how the bench samples collectives, and the warm/cold comm section."""

from __future__ import annotations

import json
import math
import shutil
import time

import numpy as np
import pytest
from typer.testing import CliRunner

import profiler.comm.bench as cb
from costmodel.comm.fit import COLLECTIVES, fit, fit_all, fit_regimes, model_s
from costmodel.machine.model import LinkLevel
from dnnplan.cli import app
from profiler.comm.launch import comm_section
from profiler.comm.bench import BENCH_REVISION
from profiler.timing.harness import DISTURB_ELEMS

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("dnnplan_cache")


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


@pytest.mark.mpi
def test_profile_comm_two_ranks(tmp_path):
    if shutil.which("mpiexec") is None:
        pytest.skip("no mpiexec")
    out = tmp_path / "c.json"
    r = runner.invoke(app, ["profile-comm", "--ranks", "2", "--sizes", "8,4096,65536", "--cap", "0.02",
                            "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert set(s["collectives"]) == set(COLLECTIVES) and s["link"]["alpha_s"] >= 0
    assert json.loads(out.read_text())["comm"]["ranks"] == 2


def test_comm_bench_samples_single_calls_after_a_cache_pass_and_keeps_the_median(monkeypatch):
    """Collectives are timed as kernels are: ONE call per sample, after a cache-disturbing pass and
    a barrier, the median kept (a loop's fastest sample would price the hot case only)."""
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
    monkeypatch.setattr(cb, "last_level_cache_bytes", lambda: 64 << 20)
    assert cb.pass_elems("warm") == DISTURB_ELEMS
    assert cb.pass_elems("cold") == (64 << 20) // 4
    monkeypatch.setattr(cb, "last_level_cache_bytes", lambda: 1 << 20)
    assert cb.pass_elems("cold") == DISTURB_ELEMS


def test_comm_section_keeps_warm_and_cold_fits_and_the_bench_revision():
    sizes = [2 ** k for k in range(3, 22)]
    warm = [(c, n, 5e-6 + n * 1e-10) for c in ("allreduce", "alltoall") for n in sizes]
    cold = [(c, n, 6e-5 + n * 3e-10) for c, n, _ in warm]
    section, per, _ = comm_section({"warm": warm, "cold": cold}, 2)
    assert section["bench"] == BENCH_REVISION and set(section["cold"]["collectives"]) == set(per)
    w = section["collectives"]["allreduce"]["points"]
    c = section["cold"]["collectives"]["allreduce"]["points"]
    assert all(cp[2] > wp[2] for wp, cp in zip(w, c))  # the cold measurements, not the warm ones again
    assert "cold" not in comm_section({"warm": warm}, 2)[0]


def test_piecewise_comm_fit_finds_the_size_regimes_one_line_cannot():
    """Synthetic allreduce whose per-byte cost triples above 1 MiB (out of cache): one line is off
    by tens of percent, the piecewise fit recovers both regimes to a fraction of a percent."""
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


@pytest.mark.parametrize("args, says", [
    (["--sizes", "3,5,7"], "--sizes 3,5,7 (measured as 1 distinct size, 8 B: whole float32 elements, a multiple of "
                           "the 2 ranks): a fit of alpha, beta and gamma needs at least 3 message sizes"),
    (["--sizes", "8,12,16"], "measured as 2 distinct sizes, 8 B, 16 B"),
    (["--sizes", "8,16"], "--sizes 8,16: a fit of alpha, beta and gamma needs at least 3"),
    (["--max-bytes", "16"], "--max-bytes 16: the default sizes, 8 B to --max-bytes by powers of 2, are 2"),
])
def test_sizes_too_few_to_fit_as_measured_are_refused_before_the_run(args, says):
    """Sizes are measured in whole float32 elements, a multiple of the ranks: 3, 5 and 7 bytes are all
    8 B, one point, whose fit would price every size from it (exit 2, nothing run or written)."""
    r = runner.invoke(app, ["profile-comm", "--ranks", "2", *args])
    assert r.exit_code == 2 and says in " ".join(r.output.split()), r.output
