"""The GPU backend's communication on the CPU: which NCCL calls each collective of the device
interface becomes (a recording stand-in for ``cupy.cuda.nccl``), the host staging of 16-bit
buffers, the device a rank takes and when ranks share one; and, under mpiexec, which ranks form
which NCCL communicator for a plan's groups.

The stand-in records calls and moves nothing: these tests prove dnnplan's side (the calls, their
peers, counts and offsets, the unique id each group shares), not NCCL's transfers
(tests/gpu/backend/test_gpu_backend.py runs NCCL on a GPU).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from executor.backend.cuda import local_rank, shared_devices
from executor.backend.staging import StagedCommunicator

from tests.support.doubles.fake_nccl import FakeHost, FakeNccl, HostNccl
from tests.support.paths import ROOT


def _comm(rank: int, size: int) -> tuple[HostNccl, FakeNccl]:
    nccl = FakeNccl()
    return HostNccl(FakeHost(rank, size), nccl, 7, None), nccl


def test_rank_0_makes_the_unique_id_and_every_rank_joins_with_it():
    c0, n0 = _comm(0, 3)
    c2, n2 = _comm(2, 3)
    assert n0.calls[0] == ("get_unique_id",) and n0.calls[1][:3] == ("init", 3, 0)
    assert n2.calls[0][:3] == ("init", 3, 2)  # rank 2 got rank 0's id over the host's broadcast
    assert n0.calls[1][3] == n2.calls[0][3] == FakeHost.BCAST


def test_alltoallv_is_one_group_of_sends_and_receives_and_a_local_copy():
    c, nccl = _comm(1, 3)
    send = np.arange(6, dtype=np.float32)
    recv = np.zeros(5, dtype=np.float32)
    c.alltoallv(send, [1, 2, 3], [0, 1, 3], recv, [2, 2, 1], [0, 2, 4])
    assert nccl.names() == ["groupStart", "send", "recv", "send", "recv", "groupEnd"]
    sends = [x for x in nccl.calls if x[0] == "send"]
    recvs = [x for x in nccl.calls if x[0] == "recv"]
    assert [(s[2], s[4]) for s in sends] == [(1, 0), (3, 2)]  # (count, peer) from this rank's layout
    assert [s[1] - send.ctypes.data for s in sends] == [0, 12]  # byte offsets of the parts
    assert [(r[2], r[4], r[1] - recv.ctypes.data) for r in recvs] == [(2, 0, 0), (1, 2, 16)]
    assert recv[2:4].tolist() == [1.0, 2.0]  # its own part, copied on the device
    assert all(x[-1] == 7 for x in sends + recvs)  # on the rank's stream


def test_an_alltoallv_with_nothing_to_move_makes_no_call():
    c, nccl = _comm(0, 2)
    c.alltoallv(np.ones(2, np.float32), [2, 0], [0, 2], np.zeros(2, np.float32), [2, 0], [0, 2])
    assert nccl.names() == []


def test_allgather_and_reduce_scatter_take_nccls_calls_when_counts_are_even():
    c, nccl = _comm(1, 2)
    recv = np.zeros(4, dtype=np.float32)
    c.allgather(np.ones(2, np.float32), recv, [2, 2], [0, 2])
    assert nccl.names() == ["allGather"] and nccl.calls[-1][1] == recv.ctypes.data + 8 and recv[2:].tolist() == [1, 1]
    c.reduce_scatter(np.ones(4, np.float32), np.zeros(2, np.float32), [2, 2])
    assert nccl.names()[-1] == "reduceScatter"
    nccl.calls.clear()
    c.allgather(None, np.zeros(3, np.float32), [1, 2], [0, 1])  # uneven: grouped point to point
    assert nccl.names() == ["groupStart", "send", "recv", "groupEnd"]
    c.reduce_scatter(np.ones(3, np.float32), np.zeros(2, np.float32), [1, 2])
    assert nccl.names()[-1] == "allReduce"  # uneven: the sum whole, then this rank's part
    with pytest.raises(ValueError):
        c.allreduce(np.zeros(2, np.int8))


def test_sixteen_bit_buffers_are_staged_as_bits_and_summed_in_float32():
    host = FakeHost(0, 1)
    dev = _Device()
    staged = StagedCommunicator(dev, host)
    x = np.array([1.5, 2.25], dtype=ml_dtypes.bfloat16)
    staged.allreduce(x)
    assert host.seen[-1] == ("allreduce", "float32")
    staged.alltoallv(x, [2], [0], np.zeros(2, ml_dtypes.bfloat16), [2], [0])
    assert host.seen[-1] == ("alltoallv", "uint16")
    assert x.dtype == ml_dtypes.bfloat16 and x.tolist() == [1.5, 2.25]


class _Device:
    def to_host(self, arr):
        return np.array(arr, copy=True)

    def from_host(self, arr, out=None):
        if out is None:
            return np.array(arr, copy=True)
        out[...] = arr
        return out


def test_a_rank_takes_its_launchers_local_rank_and_staging_follows_shared_gpus():
    class World:
        def allgather(self, v):
            return ["a", "b", "a", "a"]

        def Get_rank(self):
            return 3

    assert local_rank(World(), {"OMPI_COMM_WORLD_LOCAL_RANK": "5"}) == 5
    assert local_rank(World(), {}) == 2  # third rank on host "a"
    assert shared_devices([("a", "0000:01"), ("a", "0000:01")])
    assert not shared_devices([("a", "0000:01"), ("b", "0000:01"), ("a", "0000:02")])


@pytest.mark.mpi
def test_each_group_of_a_plan_is_one_nccl_communicator_of_its_ranks():
    """Under mpiexec with 4 ranks: the plan's groups (executor.comm.groups over the NCCL
    communicator's splits) each share one unique id among exactly their ranks, ranked by world rank."""
    mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    proc = subprocess.run([mpiexec, "-n", "4", sys.executable, "-m", "tests.support.ranks.run_nccl_groups"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["groups"] == data["expected"] and len(data["groups"]) >= 3
