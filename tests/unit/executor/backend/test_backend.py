"""The device seam (executor.backend): the host backend's collectives on 1 and 2 ranks, the same
collectives staged through the host over "device" arrays MPI cannot read, a plan run on a backend
that stages, and the choice of backend."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from executor.backend.device import Backend, Communicator, DeviceMemory, Request, on_device, on_host
from executor.backend.host import HOST
from executor.backend.select import select_backend
from executor.backend.staging import StagedCommunicator
from kernels.xp import gpu_available
from executor.runtime.run import run_plan
from networks.errors import DnnplanError

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_devices import CopyingBackend, FakeArray, FakeDevice
from tests.support.paths import ROOT
from tests.support.processes import mpiexec_or_skip
from tests.support.ranks.run_backend import exercise, staged


def expected(r: int, p: int) -> dict:
    """What rank ``r`` of ``p`` must get from tests.support.ranks.run_backend.exercise, worked out by hand."""
    counts = [k + 1 for k in range(p)]
    start = sum(counts[:r])
    return {
        "allreduce_sum": [p * (p + 1) / 2, p * (p + 1)],
        "allreduce_max": [p - 1, 0],
        "reduce_scatter": [p * g + 100 * p * (p - 1) / 2 for g in range(start, start + counts[r])],
        "allgather": [k for k in range(p) for _ in range(k + 1)],
        "allgather_in_place": [10 + k for k in range(p) for _ in range(k + 1)],
        "alltoallv": [10 * k + r for k in range(p) for _ in range(r + 1)],
        "ring": [(r - 1) % p] * 3, "sent": True,
        "split_size": len([q for q in range(p) if q % 2 == r % 2]), "split_rank": r // 2,
        "undefined_is_none": True if r == 0 else None,
        "bcast": {"from": 0}, "gather": [q * q for q in range(p)] if r == 0 else None,
        "allgather_object": [-q for q in range(p)],
    }


def test_the_host_backend_is_the_device_interface_and_keeps_its_arrays_on_the_host():
    assert isinstance(HOST, Backend) and not isinstance(HOST, DeviceMemory)
    comm = HOST.communicator(MPI.COMM_SELF)
    assert isinstance(comm, Communicator) and (comm.rank, comm.size) == (0, 1)
    a = np.ones(3, np.float32)
    assert on_host(HOST, a) is a and on_device(HOST, a) is a  # no copy on the host
    assert HOST.xp is np and HOST.now_s() <= HOST.now_s()
    held = [a, a, np.zeros(5, np.float64)]
    assert HOST.held_bytes(held) == 12 + 40  # an array listed twice counts once
    assert HOST.peak_bytes(lambda: np.ones(1 << 20, np.uint8)) >= 1 << 20


def test_the_host_collectives_on_one_rank():
    assert exercise(HOST.communicator(MPI.COMM_SELF)) == expected(0, 1)


def test_a_staged_communicator_moves_device_arrays_mpi_cannot_read():
    device = FakeDevice()
    assert isinstance(device, DeviceMemory)
    comm = StagedCommunicator(device, HOST.communicator(MPI.COMM_SELF))
    assert isinstance(comm, Communicator)
    with pytest.raises(TypeError, match="bytes-like"):  # MPI cannot read a device array: it must be staged
        HOST.communicator(MPI.COMM_SELF).reduce_scatter(FakeArray(np.ones(2, np.float32)),
                                                        FakeArray(np.ones(2, np.float32)), [2])
    got, copies = staged(MPI.COMM_SELF)
    assert got == expected(0, 1)
    assert copies["to_host"] >= 7 and copies["from_host"] >= 7  # every collective went through the host
    one = FakeDevice()
    arr = FakeArray(np.full(4, 2.0, np.float32))
    assert StagedCommunicator(one, HOST.communicator(MPI.COMM_SELF)).allreduce(arr) is arr
    assert dict(one.copies) == {"to_host": 1, "from_host": 1}  # one copy each way, into the same array
    req = comm.isend(FakeArray(np.ones(2, np.float32)), 0, 3)
    assert isinstance(req, Request)
    comm.recv(FakeArray(np.zeros(2, np.float32)), 0, 3)
    comm.wait_all([req])


def test_a_plan_runs_on_a_backend_that_stages_as_it_runs_on_the_host():
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    host = run_plan(plan, net, MPI.COMM_SELF, steps=1, warmup=1, check=True, seed=3, backend=HOST)
    device = CopyingBackend()
    got = run_plan(plan, net, MPI.COMM_SELF, steps=1, warmup=1, check=True, seed=3, backend=device)
    assert got.losses == host.losses and got.check.passed
    assert got.check.worst_rel_error == host.check.worst_rel_error
    calls = device.calls
    assert calls["communicator"] == 1 and calls["peak_bytes"] == 1 and calls["held_bytes"] == 1
    assert calls["from_host"] > 0 and calls["to_host"] > 0  # data onto the device, gradients back for the check
    assert calls["now_s"] > 0  # the timers read the backend's clock
    assert calls["synchronize"] == 1 + 1 + 1  # before each step: warm-up, timed, memory


@pytest.mark.mpi
def test_the_collectives_and_a_staged_plan_on_two_ranks():
    exe = mpiexec_or_skip()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([exe, "-n", "2", sys.executable, "-m", "tests.support.ranks.run_backend"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr[-3000:]
    data = json.loads(lines[-1])
    assert data["size"] == 2
    for r, got in enumerate(data["ranks"]):
        assert got["host"] == expected(r, 2), r
        assert got["staged"] == expected(r, 2), r
        assert got["copies"]["to_host"] >= 7 and got["copies"]["from_host"] >= 7
    host, copying = data["runs"]["host"], data["runs"]["copying"]
    assert host["passed"] and copying["passed"]
    assert copying["losses"] == host["losses"]  # the same collectives, staged: the same numbers
    assert copying["calls"]["communicator"] == 1 and copying["calls"]["to_host"] > 0


@pytest.mark.skipif(gpu_available(), reason="a GPU is here: select_backend(plan, 'cupy') makes a CUDA backend")
def test_a_plan_runs_on_the_host_and_without_a_gpu_the_gpu_backend_is_one_clear_line():
    net = load("lenet5")
    plan = make_plan(net, 8, 1, "data")
    assert select_backend(plan) is HOST
    with pytest.raises(DnnplanError) as err:
        select_backend(plan, "cupy")
    assert "\n" not in str(err.value) and "dnnplan[gpu" in err.value.hint
    with pytest.raises(DnnplanError, match="unknown array backend"):
        select_backend(plan, "tpu")


def _is_numpy_test(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
        return False
    names = [n.id for n in [node.left, *node.comparators] if isinstance(n, ast.Name)]
    return any(name in ("numpy", "np", "cupy", "cp") for name in names)


@pytest.mark.parametrize("room", ["runtime", "ops", "comm"])
def test_the_runtime_ops_and_comm_never_ask_which_array_module_they_hold(room):
    """Capabilities are Protocols checked with isinstance (executor.backend.device), never ``xp is numpy``;
    pyproject's import-linter contract keeps mpi4py and cupy out of these packages."""
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for p in sorted((ROOT / "executor" / room).rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text())) if _is_numpy_test(n)]
    assert found == []
