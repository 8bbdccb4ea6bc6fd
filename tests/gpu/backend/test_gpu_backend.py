"""The GPU backend on a GPU: its clock, memory and NCCL collectives on one rank, and plans executed
with --check on one GPU and on two ranks sharing it (host-staged). Needs cupy, cuDNN, NCCL and a
CUDA device (skipped otherwise; bench/gpu/prove.sh runs them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernels.xp import gpu_available

from tests.support.paths import ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="needs cupy and a CUDA device")]


@pytest.fixture(scope="module")
def backend():
    from executor.backend.cuda import CudaBackend  # noqa: PLC0415 - a GPU module, with a GPU only
    return CudaBackend(0, "fp32")


def test_the_clock_measures_device_work_and_the_pool_its_peak(backend):
    cp = backend.xp
    a = cp.ones((4096, 4096), dtype=cp.float32)
    t0 = backend.now_s()
    for _ in range(10):
        a = a @ a * 1e-4
    t1 = backend.now_s()
    assert t1 - t0 > 1e-4  # ten 4096^3 GEMMs, waited for
    assert backend.peak_bytes(lambda: cp.empty(64 << 20, dtype=cp.uint8)) >= 64 << 20
    assert backend.held_bytes([a, a]) == a.nbytes


def test_nccl_on_one_rank(backend):
    from mpi4py import MPI  # noqa: PLC0415
    comm = backend.communicator(MPI.COMM_SELF)
    cp = backend.xp
    x = cp.arange(6, dtype=cp.float32)
    comm.allreduce(x)
    recv = cp.zeros(6, dtype=cp.float32)
    comm.alltoallv(x, [6], [0], recv, [6], [0])
    gathered = cp.zeros(6, dtype=cp.float32)
    comm.allgather(x, gathered, [6], [0])
    backend.synchronize()
    assert cp.asnumpy(recv).tolist() == cp.asnumpy(gathered).tolist() == list(range(6))
    assert not backend.staged


def _run(args, tmp_path, timeout=300):
    env = {**os.environ, "DNNPLAN_CACHE": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}
    return subprocess.run([sys.executable, "-m", "dnnplan", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.parametrize("network,precision,ranks,graphs", [
    ("lenet5", "fp32", 1, "--graphs"), ("lenet5", "bf16", 1, "--graphs"), ("lenet5", "fp32", 2, "--graphs"),
    ("tests/assets/tinyres.yaml", "fp32", 1, "--graphs"), ("tests/assets/tinyres.yaml", "bf16", 1, "--no-graphs")])
def test_a_plan_runs_on_the_gpu_and_passes_its_check(tmp_path, network, precision, ranks, graphs):
    """tinyres: batch norm's two-launch passes, the multi-tensor update, the prepared convolutions
    and dropout (its step counter on the device), replayed as a CUDA graph and eagerly."""
    if ranks > 1 and not (shutil.which("mpiexec") or (Path(sys.executable).parent / "mpiexec").exists()):
        pytest.skip("no mpiexec")
    plan, out = tmp_path / "plan.yaml", tmp_path / "run.json"
    made = _run(["plan", network, "-p", str(ranks), "-b", "16", "--machine", "dgx-h100", "--precision", precision,
                 "--no-recompute", "--optimizer", "momentum", "--out", str(plan)], tmp_path)
    assert made.returncode == 0, made.stderr[-2000:]
    ran = _run(["execute", str(plan), "--ranks", str(ranks), "--device", "cuda", "--check", "--steps", "3",
                "--warmup", "1", "--json", str(out), graphs], tmp_path)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    got = json.loads(out.read_text())
    assert got["check"]["passed"] and got["device"]["precision"] == precision
    assert got["device"]["staged"] == (ranks > 1)  # two ranks on one GPU: through the host
    assert np.isfinite(got["measured"]["step_s"]) and got["measured_peak_bytes"] > 0
    # one rank replays a captured step; two sharing the GPU stage their collectives, so run eagerly
    want = "graphs" if graphs == "--graphs" and ranks == 1 else "eager"
    assert got["steps_mode"]["mode"] == want, got["steps_mode"]
