"""Under ``mpiexec -n 4``: the NCCL communicators a plan's groups make (executor.comm.groups over
executor.backend.nccl, NCCL recorded by tests/support/doubles/fake_nccl.py, MPI real); rank 0 prints one
JSON line with the groups formed (world ranks sharing a unique id, in their NCCL rank order) and
the groups the plan's strategies give (tests/gpu/backend/test_gpu_comm.py)."""

from __future__ import annotations

import json

from mpi4py import MPI

from executor.backend.host import HostCommunicator
from executor.backend.staging import StagedCommunicator
from executor.comm.groups import GroupComms
from executor.runtime.stage import run_strategies
from executor.ops.norm import STAT_DIMS

from tests.support.cases import load, make_plan
from tests.support.doubles.fake_nccl import FakeNccl, HostNccl, counter_ids

DIMS = (("C",), ("F",), ("H", "W"), ("N", "H"), STAT_DIMS, ("N",))


def main() -> None:
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    nccl = FakeNccl(counter_ids(f"r{rank}"))
    host = HostCommunicator(world)
    comm = HostNccl(host, nccl, 0, StagedCommunicator(None, host))
    net = load("alexnet")
    plan = make_plan(net, 8, 4, "mixed")
    groups, expected = GroupComms(comm), set()
    for layer in net.layers:
        s = run_strategies(plan)[layer.name]
        for dims in DIMS:
            groups.get(s, dims)
            active = tuple(d for d in dims if s.degree(d) > 1)
            if active:
                for r in range(s.p):
                    members = tuple(q for q in range(s.p) if s.group(q, active) == s.group(r, active))
                    if len(members) > 1:
                        expected.add(members)
    inits = [(c[3].decode(), c[2], c[1]) for c in nccl.calls if c[0] == "init"][1:]  # the world's own first
    every = world.gather([(uid, grank, size, rank) for uid, grank, size in inits], root=0)
    if rank == 0:
        by_id: dict[str, list] = {}
        for part in every:
            for uid, grank, size, wr in part:
                by_id.setdefault(uid, []).append((grank, wr, size))
        formed = sorted(tuple(wr for _, wr, _ in sorted(v)) for v in by_id.values())
        ordered = all([wr for _, wr, _ in sorted(v)] == sorted(wr for _, wr, _ in v) for v in by_id.values())
        print(json.dumps({"groups": [list(g) for g in sorted(set(formed))] if ordered else "misordered",
                          "expected": [list(g) for g in sorted(expected)]}))


if __name__ == "__main__":
    main()
