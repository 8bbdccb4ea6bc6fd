"""The device seam on the ranks of COMM_WORLD: every collective of a communicator, on the host's
and on a staged one over "device" arrays MPI cannot read, and a plan run on a backend that
stages; rank 0 prints one JSON line (tests/unit/executor/backend/test_backend.py).

    mpiexec -n 2 python -m tests.support.ranks.run_backend
"""

from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from executor.backend.host import HOST
from executor.backend.staging import StagedCommunicator
from executor.launch.abort import abort
from executor.runtime.run import run_plan

from tests.support.cases import load, make_plan, parse_case
from tests.support.doubles.fake_devices import CopyingBackend, FakeArray, FakeDevice


def _f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _reductions(comm, make, read) -> dict:
    r, p = comm.rank, comm.size
    total = make(_f32([r + 1, 2 * (r + 1)]))
    comm.allreduce(total)
    top = make(_f32([r, -r]))
    comm.allreduce(top, "max")
    counts = [k + 1 for k in range(p)]
    send = make(_f32(np.arange(sum(counts)) + 100 * r))
    part = make(np.zeros(counts[r], np.float32))
    comm.reduce_scatter(send, part, counts)
    return {"allreduce_sum": read(total).tolist(), "allreduce_max": read(top).tolist(),
            "reduce_scatter": read(part).tolist()}


def _gathers(comm, make, read) -> dict:
    r, p = comm.rank, comm.size
    counts = [k + 1 for k in range(p)]
    displs = [sum(counts[:k]) for k in range(p)]
    gathered = make(np.zeros(sum(counts), np.float32))
    comm.allgather(make(np.full(counts[r], r, np.float32)), gathered, counts, displs)
    in_place = np.full(sum(counts), -1.0, np.float32)
    in_place[displs[r]:displs[r] + counts[r]] = 10 + r
    in_place = make(in_place)
    comm.allgather(None, in_place, counts, displs)
    # alltoallv: rank r sends k + 1 elements of value 10 r + k to rank k
    send_counts = [k + 1 for k in range(p)]
    send = make(np.concatenate([np.full(k + 1, 10 * r + k, np.float32) for k in range(p)]))
    recv_counts = [r + 1] * p
    recv = make(np.zeros(sum(recv_counts), np.float32))
    comm.alltoallv(send, send_counts, [sum(send_counts[:k]) for k in range(p)],
                   recv, recv_counts, [k * (r + 1) for k in range(p)])
    return {"allgather": read(gathered).tolist(), "allgather_in_place": read(in_place).tolist(),
            "alltoallv": read(recv).tolist()}


def _point_to_point(comm, make, read) -> dict:
    r, p = comm.rank, comm.size
    req = comm.isend(make(np.full(3, r, np.float32)), (r + 1) % p, 7)
    got = make(np.zeros(3, np.float32))
    comm.recv(got, (r - 1) % p, 7)
    comm.wait_all([req])
    return {"ring": read(got).tolist(), "sent": bool(req.test())}


def _groups(comm) -> dict:
    r = comm.rank
    half = comm.split(r % 2, r)
    alone = comm.split(None if r == 0 else 1, r)
    out = {"split_size": half.size, "split_rank": half.rank, "undefined_is_none": alone is None if r == 0 else None}
    for sub in (half, alone):
        if sub is not None:
            sub.barrier()
            sub.free()
    out.update(bcast=comm.bcast_object({"from": r}, 0), gather=comm.gather_object(r * r, 0),
               allgather_object=comm.allgather_object(-r))
    comm.barrier()
    return out


def exercise(comm, make=lambda a: a, read=lambda a: a) -> dict:
    """Every collective of ``comm`` on arrays ``make`` turns host arrays into (``read``: back)."""
    return {**_reductions(comm, make, read), **_gathers(comm, make, read), **_point_to_point(comm, make, read),
            **_groups(comm)}


def staged(world) -> tuple[dict, dict]:
    """:func:`exercise` on FakeArray "device" arrays staged through the host; and the copies made."""
    device = FakeDevice()
    comm = StagedCommunicator(device, HOST.communicator(world))
    got = exercise(comm, FakeArray, lambda a: a.data)
    return got, dict(device.copies)


def plan_runs(world, case: str = "lenet5:8:filter") -> dict:
    """One plan run with the check on the host backend and on the staging test double."""
    net_name, batch, family, algo = parse_case(case)
    net = load(net_name)
    plan = make_plan(net, batch, world.Get_size(), family, algo)
    out = {}
    for name, backend in (("host", HOST), ("copying", CopyingBackend())):
        res = run_plan(plan, net, world, steps=2, warmup=1, check=True, seed=3, backend=backend)
        out[name] = {"losses": res.losses, "passed": res.check.passed, "worst": res.check.worst_rel_error,
                     "peak_bytes": res.peak_bytes, "calls": dict(getattr(backend, "calls", {}))}
    return out


def main() -> int:
    world = MPI.COMM_WORLD
    try:
        host = exercise(HOST.communicator(world))
        staged_got, copies = staged(world)
        runs = plan_runs(world)
    except Exception as err:  # a failed collective would hang the other ranks
        sys.stderr.write(f"rank {world.Get_rank()}: {type(err).__name__}: {err}\n")
        abort(world, 3)
        return 3  # not reached
    every = world.gather({"host": host, "staged": staged_got, "copies": copies}, root=0)
    if world.Get_rank() == 0:
        print(json.dumps({"size": world.Get_size(), "ranks": every, "runs": runs}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
