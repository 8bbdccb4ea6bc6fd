"""Real ranks: every strategy family on small networks passes --check with 1, 2 and 4 ranks.

Each rank count is one ``mpiexec`` running many cases (``tests.support.ranks.run_case``), so process
start-up is paid once. 4 ranks oversubscribe the 2-core test machine; only numerics are checked.
Families (tests.support.cases): data, spatial H, spatial HxW, filter F, channel C, hybrids
N+F, N+H, C+F, replication (R), and ``mixed`` (consecutive layers on different strategies, so
every edge reshards and halos are exchanged between differently split layers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.processes import mpiexec_or_skip

FAMILIES = ("data", "spatial_h", "spatial_hw", "filter", "channel", "nf", "nh", "cf", "replicated", "mixed")
NETS = (("lenet5", 8), ("tinyres", 4), ("edgenet", 4))
ALGO_CASES = ("tinyres:4:mixed:winograd", "tinyres:4:spatial_hw:fft", "tinyres:4:cf:direct",
              "lenet5:8:spatial_h:fft", "edgenet:4:mixed:direct", "edgenet:4:nh:fft",
              "tinyres:4:spatial_h:winograd", "tinyres:4:nf:im2col")


def _cases(ranks: int) -> list[str]:
    fams = ("data",) if ranks == 1 else FAMILIES
    return [f"{n}:{b}:{f}" for f in fams for n, b in NETS] + list(ALGO_CASES)


def run_cases(ranks: int, cases: list[str], timeout_s: float = 240) -> list[dict]:
    exe = mpiexec_or_skip()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([exe, "-n", str(ranks), sys.executable, "-m", "tests.support.ranks.run_case", *cases],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return results


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_every_family_passes_the_check(ranks):
    results = run_cases(ranks, _cases(ranks))
    failed = [(r["case"], r["worst_tensor"], r["worst_rel_error"], r["tolerance"]) for r in results
              if not r["passed"]]
    assert not failed, failed
    for r in results:
        assert r["worst_rel_error"] <= r["tolerance"]
        assert r["loss_rel_error"] <= 1e-5


@pytest.mark.mpi
def test_mixed_plan_really_mixes_strategies():
    (r,) = run_cases(4, ["tinyres:4:mixed"])
    labels = set(r["strategies"].values())
    assert {"N=4", "C=2,F=2", "H=2,W=2", "F=4"} <= labels
    assert r["passed"]


@pytest.mark.mpi
def test_a_rank_failure_aborts_the_job_with_its_message():
    exe = mpiexec_or_skip()
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-m", "tests.support.ranks.run_case", "nosuchnet:4:data"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "nosuchnet" in proc.stderr


_INRUN_COMM = """
import json
from mpi4py import MPI
from costmodel.step.collective_calls import CommCall
from profiler.in_step.collectives import InRunComm
comm = MPI.COMM_WORLD
calls = [CommCall(c, 4096, g, s) for c in ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoallv")
         for g in (2, 4) for s in ("cold", "warm")] + [CommCall("allreduce", 64, 3, "cold")]
timer = InRunComm(calls, comm)
for i in (-1, 0, 1):
    timer.round(comm.Barrier, keep=i >= 0)
groups = {g: sub.allgather(comm.Get_rank()) for g, sub in timer._subs.items()}
got = comm.gather({"rank": comm.Get_rank(), "samples": timer.samples, "groups": groups}, root=0)
if comm.Get_rank() == 0:
    print(json.dumps(got), flush=True)
"""


@pytest.mark.mpi
def test_inrun_collectives_time_every_kind_in_blocks_of_consecutive_ranks():
    """profiler.in_step.collectives on 4 ranks: one sample per kept round of every collective kind, each
    group size run as blocks of consecutive ranks; a group size that does not divide the job
    (3 of 4) is left out (the prediction then keeps the fits)."""
    exe = mpiexec_or_skip()
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([exe, "-n", "4", sys.executable, "-c", _INRUN_COMM], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert len(lines) == 1, proc.stderr[-3000:]
    out = json.loads(lines[0])
    assert len(out) == 4
    for r in out:
        assert len(r["samples"]) == 20 and not any("/3/" in k for k in r["samples"])
        assert all(len(v) == 2 and all(t > 0 for t in v) for v in r["samples"].values())
        rank = r["rank"]
        assert r["groups"]["2"] == [rank // 2 * 2, rank // 2 * 2 + 1]
        assert r["groups"]["4"] == [0, 1, 2, 3]
